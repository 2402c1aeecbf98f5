"""Reflex web dashboard (see the web dashboard issue)."""
