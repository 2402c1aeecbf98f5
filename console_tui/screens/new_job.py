"""The new-job form. It sends what was typed; an invalid field is explained next to it with the
server's own message (422 names the field), any other refusal under the form and in a notification."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from console_tui.screens.dialogs import DIALOG_CSS
from core.errors import InvalidInput, JobDeckError

if TYPE_CHECKING:
    from console_tui.app import ConsoleApp

# (field id, label, placeholder): the ids are the API's field names.
FIELDS = (
    ("command", "Command", "a shell string, e.g. ./backup.sh --full"),
    ("name", "Name", "default: from the command"),
    ("queue", "Queue", "default"),
    ("priority", "Priority", "0   (-1000 … 1000, higher runs first)"),
    ("max_attempts", "Max attempts", "3"),
    ("timeout", "Timeout (s)", "none"),
    ("delay", "Delay (s)", "run now"),
    ("tags", "Tags", "comma-separated"),
)
INTEGER, NUMBER = ("priority", "max_attempts"), ("timeout", "delay")


def field_of(path: str | None) -> str | None:
    """The form field an API error names: `task.command` -> command, `tags[0]` -> tags."""
    if not path:
        return None
    head = path.split(".")[0].split("[")[0]
    if head == "task":
        return "command"
    return head if head in {f for f, _, _ in FIELDS} else None


class NewJobScreen(ModalScreen[dict[str, Any] | None]):
    """ctrl+s or the Submit button sends it; escape closes without sending."""

    DEFAULT_CSS = (
        """
    NewJobScreen { align: center middle; }
    NewJobScreen .dialog { width: 84; max-height: 90%; }
    NewJobScreen .row { height: auto; }
    NewJobScreen .row Label { width: 14; padding-top: 1; }
    NewJobScreen .row Input { width: 1fr; }
    NewJobScreen .field-error { color: $error; padding-left: 14; height: auto; display: none; }
    NewJobScreen .field-error.shown { display: block; }
    """
        + DIALOG_CSS
    )
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close"), Binding("ctrl+s", "submit", "Submit")]

    def __init__(self, queue: str = "default") -> None:
        super().__init__()
        self.default_queue = queue

    @property
    def console(self) -> ConsoleApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog"):
            yield Label("New job", classes="title")
            for key, label, placeholder in FIELDS:
                with Horizontal(classes="row"):
                    yield Label(label)
                    yield Input(self.default_queue if key == "queue" else "", placeholder=placeholder, id=key)
                yield Static("", classes="field-error", id=f"error-{key}")
            yield Static("", classes="error", id="error")
            with Horizontal(classes="buttons"):
                yield Button("Cancel (esc)", id="close")
                yield Button("Submit (ctrl+s)", id="submit", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#command", Input).focus()

    def value(self, key: str) -> str:
        return self.query_one(f"#{key}", Input).value.strip()

    def spec(self) -> dict[str, Any]:
        """The job spec; a number that does not parse raises InvalidInput naming its field."""
        spec: dict[str, Any] = {"task": {"kind": "shell", "command": self.value("command")}}
        for key in ("name", "queue"):
            if self.value(key):
                spec[key] = self.value(key)
        for key in INTEGER + NUMBER:
            text = self.value(key)
            if not text:
                continue
            try:
                spec[key] = int(text) if key in INTEGER else float(text)
            except ValueError:
                kind = "a whole number" if key in INTEGER else "a number"
                raise InvalidInput(f"{key}: {text!r} is not {kind}", field=key) from None
        if self.value("tags"):
            spec["tags"] = [t.strip() for t in self.value("tags").split(",") if t.strip()]
        return spec

    def _clear_errors(self) -> None:
        for key, _, _ in FIELDS:
            self.query_one(f"#error-{key}", Static).update("")
            self.query_one(f"#error-{key}", Static).remove_class("shown")
        self.query_one("#error", Static).update("")

    def show_error(self, exc: JobDeckError) -> None:
        """Next to the field it names, else under the form."""
        key = field_of(exc.field)
        if key is not None:
            self.query_one(f"#error-{key}", Static).update(f"↑ {exc.message}")
            self.query_one(f"#error-{key}", Static).add_class("shown")
            self.query_one(f"#{key}", Input).focus()
        else:  # a refusal (403, ...): under the form, and a notification like every refused action
            self.query_one("#error", Static).update(exc.message)
            self.console.notify(exc.message, title=f"refused ({exc.status})", severity="error", timeout=8)

    async def action_submit(self) -> None:
        self._clear_errors()
        try:
            job = await self.console.client.submit(self.spec())
        except JobDeckError as exc:
            self.show_error(exc)
            return
        self.console.notify(f"job {job['id']} ({job['name']}) is {job['state']}", title="submitted", timeout=4)
        self.dismiss(job)

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        await self.action_submit()

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "submit":
            await self.action_submit()
        else:
            self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)
