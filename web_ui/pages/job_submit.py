"""The form that submits a job (on the Jobs page): a shell command, queue, name, priority, delay;
client-side checks first, then the server's message under the field it names."""

from __future__ import annotations

import shlex
from typing import Any

import reflex as rx

from core.errors import InvalidInput, JobDeckError
from web_ui.state import AppState, page_state, set_editable

FIELDS = ("command", "queue", "name", "priority", "delay")


@page_state(None, editable=("new_command", "new_queue", "new_name", "new_priority", "new_delay"))
class SubmitJobState(AppState):
    """The submit form; the new job reaches the table through the live feed."""

    form_open: bool = False
    new_command: str = ""
    new_queue: str = "default"
    new_name: str = ""
    new_priority: str = "0"
    new_delay: str = ""
    form_errors: dict[str, str] = {}

    def set_field(self, name: str, value: str) -> None:
        set_editable(self, name, value)

    def set_form_open(self, value: bool) -> None:
        self.form_open = value
        self.form_errors = {}

    async def submit(self) -> Any:
        """Check the form, submit the job, and put the server's refusal under the field it names."""
        errors: dict[str, str] = {}
        spec: dict[str, Any] = {"queue": self.new_queue.strip() or "default"}
        try:
            argv = shlex.split(self.new_command)
        except ValueError as exc:
            argv, errors["command"] = [], f"cannot split the command: {exc}"
        if not argv and "command" not in errors:
            errors["command"] = "a command is needed"
        spec["task"] = {"kind": "shell", "argv": argv}
        if self.new_name.strip():
            spec["name"] = self.new_name.strip()
        try:
            spec["priority"] = int(self.new_priority or 0)
        except ValueError:
            errors["priority"] = "a whole number"
        if self.new_delay.strip():
            try:
                spec["delay"] = float(self.new_delay)
            except ValueError:
                errors["delay"] = "seconds, e.g. 30"
        if errors:
            self.form_errors = errors
            return None
        try:
            job = await self.client().submit(spec)
        except InvalidInput as exc:
            field = (exc.field or "command").split(".")[-1]
            field = {"argv": "command", "task": "command", "queue": "queue", "name": "name"}.get(field, field)
            self.form_errors = {field if field in FIELDS else "command": exc.message}
            return None
        except JobDeckError as exc:
            return self.failed(exc)
        self.form_open, self.form_errors, self.new_command, self.new_name = False, {}, "", ""
        return rx.toast.success(f"job {job['id']} submitted", duration=2000)


def _field(label: str, name: str, value: Any, on_change: Any, **props: Any) -> rx.Component:
    field_id = f"new-{name}"
    return rx.vstack(
        rx.el.label(label, html_for=field_id, style={"font_size": "0.85rem", "font_weight": "500"}),
        rx.input(value=value, on_change=on_change, id=field_id, name=name, width="100%", **props),
        rx.cond(
            SubmitJobState.form_errors.contains(name),
            rx.text(SubmitJobState.form_errors[name], color_scheme="red", size="1", id=f"error-{name}", role="alert"),
            rx.fragment(),
        ),
        spacing="1",
        width="100%",
    )


def submit_dialog() -> rx.Component:
    """The "New job" button and its form."""
    return rx.dialog.root(
        rx.dialog.trigger(
            rx.button(
                rx.icon("plus", size=16),
                "New job",
                id="new-job",
                disabled=~AppState.can_write_jobs,
                title=AppState.write_reason,
            ),
        ),
        rx.dialog.content(
            rx.dialog.title("Submit a job"),
            rx.dialog.description("A shell command, split like a shell would (no shell runs it).", size="2"),
            rx.form(
                rx.vstack(
                    _field(
                        "Command",
                        "command",
                        SubmitJobState.new_command,
                        lambda v: SubmitJobState.set_field("new_command", v),
                        placeholder="echo hello",
                        auto_focus=True,
                    ),
                    rx.hstack(
                        _field(
                            "Queue",
                            "queue",
                            SubmitJobState.new_queue,
                            lambda v: SubmitJobState.set_field("new_queue", v),
                        ),
                        _field(
                            "Name",
                            "name",
                            SubmitJobState.new_name,
                            lambda v: SubmitJobState.set_field("new_name", v),
                            placeholder="optional",
                        ),
                        width="100%",
                    ),
                    rx.hstack(
                        _field(
                            "Priority",
                            "priority",
                            SubmitJobState.new_priority,
                            lambda v: SubmitJobState.set_field("new_priority", v),
                        ),
                        _field(
                            "Delay (s)",
                            "delay",
                            SubmitJobState.new_delay,
                            lambda v: SubmitJobState.set_field("new_delay", v),
                            placeholder="run now",
                        ),
                        width="100%",
                    ),
                    rx.hstack(
                        rx.dialog.close(rx.button("Cancel", variant="soft", color_scheme="gray", type="button")),
                        rx.button("Submit", type="submit", id="submit-job"),
                        justify="end",
                        width="100%",
                    ),
                    spacing="3",
                ),
                on_submit=lambda _: SubmitJobState.submit(),
                reset_on_submit=False,
            ),
        ),
        open=SubmitJobState.form_open,
        on_open_change=SubmitJobState.set_form_open,
    )
