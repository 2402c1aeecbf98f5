"""`?`: every action with its key, where it works, and whether this user may run it (and why not)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

from console_tui.actions import ACTIONS, key_label, permission_of
from console_tui.permissions import Identity

GLOBAL_KEYS = (("1 … 6", "Jobs, Queues, Agents, Schedules, Dead letters, Events"), ("?", "this help"),
               ("z", "times in UTC / in your zone (a schedule's own zone stays)"), ("ctrl+p", "command palette: every action, searchable"), ("ctrl+r", "reload the view"),
               ("escape", "back / close / clear the selection"), ("q", "quit"))  # fmt: skip


def action_rows(identity: Identity, queue: str | None = None) -> list[tuple[str, str, str, str | None]]:
    """(key, title, views, refusal or None) for every action."""
    rows = []
    for a in ACTIONS:
        perms = {permission_of(a.name, v) for v in a.views} - {None}
        reasons = [r for p in sorted(p for p in perms if p) if (r := identity.refusal(p, queue))]
        rows.append((key_label(a.key), a.title + (f" — {a.help}" if a.help else ""), ", ".join(a.views),
                     reasons[0] if reasons and len(reasons) == len(perms) else None))  # fmt: skip
    return rows


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical { width: 96%; height: 90%; border: thick $primary; background: $surface; padding: 0 1; }
    HelpScreen DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "close", "Close")]

    def compose(self) -> ComposeResult:
        identity: Identity = self.app.identity  # type: ignore[attr-defined]
        with Vertical():
            yield Label(Text.assemble(("Keys", "bold"), f"    signed in as {identity.label}   (esc closes)"))
            table: DataTable[Any] = DataTable(id="keys", cursor_type="row", zebra_stripes=True)
            for label in ("KEY", "ACTION", "WHERE", "FOR YOU"):
                table.add_column(label)
            for key, title in GLOBAL_KEYS:
                table.add_row(key, title, "everywhere", Text("ok", style="green"))
            for key, title, views, refusal in action_rows(identity):
                status = Text(f"disabled: {refusal}", style="dim red") if refusal else Text("ok", style="green")
                table.add_row(key, title, views, status)
            yield table

    def action_close(self) -> None:
        self.dismiss(None)
