"""The main screen: the header, one view at a time (keys 1 … 6), the footer of the view's keys."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import ContentSwitcher, Footer

from console_tui.screens.agents import AgentsView
from console_tui.screens.alerts import AlertsView
from console_tui.screens.base import View
from console_tui.screens.events import EventsView
from console_tui.screens.jobs import DeadView, JobsView
from console_tui.screens.queues import QueuesView
from console_tui.screens.schedules import SchedulesView
from console_tui.screens.workflows import WorkflowsView
from console_tui.widgets.header import VIEWS, ConsoleHeader


class MainScreen(Screen[None]):
    DEFAULT_CSS = "MainScreen #views { height: 1fr; }"
    BINDINGS: ClassVar[list[BindingType]] = [
        *(Binding(key, f"show('{name}')", label, show=False) for key, name, label in VIEWS),
        Binding("ctrl+r", "reload", "Reload", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield ConsoleHeader(current="jobs")
        with ContentSwitcher(initial="jobs", id="views"):
            yield JobsView()
            yield QueuesView()
            yield AgentsView()
            yield SchedulesView()
            yield DeadView()
            yield EventsView()
            yield AlertsView()
            yield WorkflowsView()
        yield Footer()

    @property
    def views(self) -> list[View]:
        return list(self.query(View))

    @property
    def current_view(self) -> View:
        switcher = self.query_one("#views", ContentSwitcher)
        return switcher.query_one(f"#{switcher.current}", View)

    async def on_mount(self) -> None:
        for view in self.views:
            if view.id in ("jobs", "dead"):
                await view.reload()
        self.current_view.focus_main()

    async def action_show(self, name: str) -> None:
        switcher = self.query_one("#views", ContentSwitcher)
        if switcher.current == name:
            return
        switcher.current = name
        self.query_one(ConsoleHeader).show_view(name)
        view = self.current_view
        view.focus_main()
        await view.reload()
        self.refresh_bindings()

    async def action_reload(self) -> None:
        await self.current_view.reload()
        self.notify("reloaded", timeout=1)
