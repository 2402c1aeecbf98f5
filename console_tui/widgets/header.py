"""The header every screen shows: the server, the feed's connection state, the user and role."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

if TYPE_CHECKING:
    from console_tui.app import ConsoleApp

CONNECTION_STYLES = {
    "live": ("●", "bold green"),
    "connecting": ("◌", "yellow"),
    "reconnecting": ("◌", "bold yellow"),
    "signed-out": ("✗", "bold red"),
}
VIEWS = (("1", "jobs", "Jobs"), ("2", "queues", "Queues"), ("3", "agents", "Agents"),
         ("4", "schedules", "Schedules"), ("5", "dead", "Dead letters"), ("6", "events", "Events"),
         ("7", "alerts", "Alerts"), ("8", "workflows", "DAGs"))  # fmt: skip
ALERT_SHOWN_FOR = 900.0  # seconds the header keeps the latest alert (a resolve notice replaces it)


class ConsoleHeader(Static):
    """Two lines: server, connection and user; then the views, the current one highlighted."""

    DEFAULT_CSS = """
    ConsoleHeader { height: 2; background: $panel; color: $foreground; }
    """

    def __init__(self, title: str = "", *, current: str | None = None) -> None:
        super().__init__()
        self.title = title
        self.current = current

    @property
    def console(self) -> ConsoleApp:
        return self.app  # type: ignore[return-value]

    def on_mount(self) -> None:
        self.console.headers.add(self)

    def on_unmount(self) -> None:
        self.console.headers.discard(self)

    def show_view(self, name: str) -> None:
        self.current = name
        self.refresh()

    def render(self) -> Group:
        app = self.console
        conn = app.connection
        mark, style = CONNECTION_STYLES.get(conn.state, ("?", ""))
        server = "jobdeck.test" if app.fmt.masked else app.server
        left = Text.assemble((" JobDeck ", "bold reverse"), "  ", (server, "bold"))
        if self.title:
            left.append(f"  ›  {self.title}", style="bold")
        middle = Text.assemble((f"{mark} {conn.state}", style))
        if conn.state != "live" and conn.detail:
            middle.append(f"  {conn.detail}", style="dim")
        alert = app.alert
        if alert is not None and app.fmt.clock() - alert[0] < ALERT_SHOWN_FOR:
            data = alert[1].get("data") or {}
            ok = data.get("kind") == "resolved"
            middle.append(f"  {'✓' if ok else '⚠'} {data.get('title')}", style="green" if ok else "bold red")
        seq = "··" if app.fmt.masked else str(conn.last_seq)
        right = Text.assemble((app.identity.label, "bold cyan"), (f" │ seq {seq} ", "dim"))
        grid = Table.grid(expand=True)
        grid.add_column(ratio=3, no_wrap=True, overflow="ellipsis")
        grid.add_column(ratio=2, no_wrap=True, overflow="ellipsis")
        grid.add_column(no_wrap=True, justify="right")
        grid.add_row(left, middle, right)
        tabs = Text(" ")
        for key, name, label in VIEWS:
            tabs.append(f" {key} {label} ", style="bold reverse" if name == self.current else "dim")
            tabs.append(" ")
        tabs.append("   ? help  ctrl+p commands  q quit", style="dim")
        return Group(grid, tabs)
