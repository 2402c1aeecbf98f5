"""Reflex's configuration of the JobDeck web dashboard (this folder is the Reflex project root)."""

from __future__ import annotations

import reflex as rx

config = rx.Config(
    app_name="jobdeck_web",
    app_module_import="web_ui.app",
    telemetry_enabled=False,
    show_built_with_reflex=False,
    plugins=[rx.plugins.RadixThemesPlugin(theme=rx.theme(accent_color="indigo", gray_color="slate", radius="medium"))],
    disable_plugins=[rx.plugins.SitemapPlugin],
)
