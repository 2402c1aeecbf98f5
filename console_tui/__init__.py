"""Textual terminal console (see the console issue)."""
