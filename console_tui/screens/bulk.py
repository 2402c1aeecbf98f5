"""Bulk actions on every job matching the current filter: pick the action, confirm, see the result."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from console_tui.operations import bulk_summary
from console_tui.query import JobQuery
from console_tui.screens.dialogs import DIALOG_CSS
from core.errors import JobDeckError

if TYPE_CHECKING:
    from console_tui.app import ConsoleApp

CHOICES = {"c": ("cancel", "cancel"), "p": ("pause", "pause"), "u": ("resume", "resume"),
           "r": ("retry", "retry / replay"), "=": ("priority", "set the priority of")}  # fmt: skip


class BulkScreen(ModalScreen[None]):
    """Press the action's key (and type the priority), see how many jobs it would touch, then y to confirm;
    the server acts on everything the filter matches."""

    DEFAULT_CSS = (
        "BulkScreen { align: center middle; } #priority { display: none; } #priority.open { display: block; }"
        + DIALOG_CSS
    )
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close")]

    def __init__(self, query: JobQuery) -> None:
        super().__init__()
        self.filter = query
        self.action_name: str | None = None
        self.matched: int | None = None  # what a dry run of the chosen action counted; None until it answers
        self.priority: int | None = None

    @property
    def console(self) -> ConsoleApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        flt = self.filter.text() or "no filter: EVERY job"
        with Vertical(classes="dialog danger"):
            yield Label(f"Act on every job matching:  {flt}", classes="title")
            yield Static("  ".join(f"[b]{k}[/b] {label}" for k, (_, label) in CHOICES.items()) + "   esc: close",
                         id="choices")  # fmt: skip
            yield Input(placeholder="priority, then enter", id="priority", disabled=True)
            yield Static("", id="prompt")
            yield Static("", classes="error", id="error")

    def on_key(self, event: object) -> None:
        key = getattr(event, "character", None) or ""
        if self.query_one("#priority", Input).has_focus:
            return
        if self.action_name is None and key in CHOICES:
            self.action_name = CHOICES[key][0]
            if self.action_name == "priority":  # counted once the value is in (the server wants it)
                box = self.query_one("#priority", Input)
                box.disabled = False
                box.add_class("open")
                box.focus()
            else:
                self._count(None)
            getattr(event, "stop", lambda: None)()
        elif self.action_name and self.matched and key in ("y", "Y"):  # only once the count is shown
            getattr(event, "stop", lambda: None)()
            self.run_worker(self._run(self.priority))
        elif self.action_name and key in ("n", "N"):
            self._reset()

    def _reset(self) -> None:
        self.action_name, self.matched, self.priority = None, None, None
        self.query_one("#prompt", Static).update("")
        box = self.query_one("#priority", Input)
        box.disabled = True
        box.remove_class("open")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            value = int(event.value.strip())
        except ValueError:
            self.query_one("#error", Static).update(f"{event.value!r} is not a whole number")
            return
        self.query_one("#error", Static).update("")
        event.input.disabled = True  # keys go to the dialog again: y / n
        self._count(value)

    def _count(self, priority: int | None) -> None:
        assert self.action_name is not None
        self.matched, self.priority = None, priority
        self.query_one("#prompt", Static).update("counting the jobs it would touch …")
        self.run_worker(self._ask(self.action_name, priority), exclusive=True, group="count")

    async def _ask(self, action: str, priority: int | None) -> None:
        """Ask the server how many jobs the action would touch (a dry run changes nothing), then ask the user."""
        try:
            result = await self.console.client.bulk(
                action, filter=self.filter.params(), priority=priority, dry_run=True
            )
        except JobDeckError as exc:
            if action == self.action_name:
                self._reset()
                self.query_one("#error", Static).update(exc.message)
            return
        if action != self.action_name:  # given up meanwhile
            return
        flt = self.filter.text()
        verb = dict(CHOICES.values())[action]
        matched = int(result.get("matched") or 0)
        if not matched:
            self._reset()  # nothing to confirm: another action can be chosen at once
            none = f"No job matches [b]{flt}[/b]" if flt else "There are no jobs"
            self.query_one("#prompt", Static).update(f"{none}: nothing to {verb}.")
            return
        self.matched = matched
        where = f"matching [b]{flt}[/b]" if flt else "[b](no filter: every job)[/b]"
        to = "" if priority is None else f" to {priority}"
        self.query_one("#prompt", Static).update(
            f"[b]{verb.capitalize()}[/b] {matched:,} job{'' if matched == 1 else 's'} {where}{to}?  y: yes   n: no"
        )

    async def _run(self, priority: int | None) -> None:
        assert self.action_name is not None
        try:
            result = await self.console.client.bulk(self.action_name, filter=self.filter.params(), priority=priority)
        except JobDeckError as exc:
            self.query_one("#error", Static).update(exc.message)
            self.action_name = None
            return
        text, severity = bulk_summary(self.action_name, result)
        self.console.notify(text, severity=severity, timeout=8)  # type: ignore[arg-type]
        self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)
