"""The installed JobDeck's version: one number, in pyproject.toml, read from the package metadata."""

from __future__ import annotations

from functools import cache
from importlib import metadata


@cache
def version() -> str:
    """The version of the installed `jobdeck` distribution ("0+unknown" when run from an uninstalled tree)."""
    try:
        return metadata.version("jobdeck")
    except metadata.PackageNotFoundError:
        return "0+unknown"
