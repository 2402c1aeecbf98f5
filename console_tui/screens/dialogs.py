"""Modal dialogs: a confirmation, and a one-field prompt that shows the server's error in place."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from core.errors import JobDeckError

DIALOG_CSS = """
.dialog { width: 72; height: auto; padding: 1 2; border: thick $primary; background: $surface; }
.dialog.danger { border: thick $error; }
.dialog .title { text-style: bold; margin-bottom: 1; }
.dialog .buttons { height: auto; margin-top: 1; align-horizontal: right; }
.dialog .buttons Button { margin-left: 2; }
.dialog .error { color: $error; height: auto; }
"""


class ConfirmScreen(ModalScreen[bool]):
    """Asks before a destructive action: y / enter confirms, n / escape does nothing."""

    DEFAULT_CSS = "ConfirmScreen { align: center middle; }" + DIALOG_CSS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, detail: str = "", *, yes: str = "Yes") -> None:
        super().__init__()
        self.question, self.detail, self.yes = question, detail, yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog danger"):
            yield Label(self.question, classes="title", id="question")
            if self.detail:
                yield Static(self.detail, id="detail")
            with Horizontal(classes="buttons"):
                yield Button("No (n)", id="no")
                yield Button(f"{self.yes} (y)", id="yes", variant="error")

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class PromptScreen(ModalScreen[Any]):
    """One value: `submit(text)` runs it; a ValueError or a server error is shown under the field
    and the dialog stays open; on success it closes with what `submit` returned."""

    DEFAULT_CSS = "PromptScreen { align: center middle; }" + DIALOG_CSS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss_none", "Cancel")]

    def __init__(
        self, title: str, label: str, submit: Callable[[str], Awaitable[Any]], *, value: str = "", placeholder: str = ""
    ) -> None:
        super().__init__()
        self.title_text, self.label, self.submit = title, label, submit
        self.value, self.placeholder = value, placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="title")
            yield Label(self.label)
            yield Input(self.value, placeholder=self.placeholder, id="value", select_on_focus=True)
            yield Static("", classes="error", id="error")

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        error = self.query_one("#error", Static)
        try:
            result = await self.submit(event.value)
        except ValueError as exc:
            error.update(str(exc))
            return
        except JobDeckError as exc:
            error.update(exc.message)
            return
        self.dismiss(result)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
