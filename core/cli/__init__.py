"""`jobdeck`: the command line (parser in main.py; commands in remote.py and nodes.py)."""

from core.cli.main import main
from core.cli.nodes import attach_local_agent

__all__ = ["attach_local_agent", "main"]
