"""The agent runtime and its handlers: runs jobs handed to it by a core node."""
