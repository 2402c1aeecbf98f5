"""The Textual terminal console: `jobdeck console`. It talks to the core only through core.client."""

from __future__ import annotations

from console_tui.app import ConsoleApp, main

__all__ = ["ConsoleApp", "main"]
