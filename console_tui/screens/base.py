"""What every view of the main screen shares: the app it serves, live events, actions that are
shown disabled (with the reason) when the user's role does not allow them."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from textual.containers import Vertical

from console_tui.actions import BY_NAME, permission_of
from core.errors import JobDeckError

if TYPE_CHECKING:
    from console_tui.app import ConsoleApp

T = TypeVar("T")
Json = dict[str, Any]


class ConsoleMixin:
    """Access to the console app and its calls, for views and screens."""

    view_name: ClassVar[str] = ""

    @property
    def console(self) -> ConsoleApp:
        return self.app  # type: ignore[attr-defined, no-any-return]

    def target_queue(self) -> str | None:
        """The queue of what the action would act on (for queue-scoped permissions)."""
        return None

    def refusal(self, action: str) -> str | None:
        """Why the user may not run `action` here, or None."""
        spec = BY_NAME.get(action)
        if spec is None or self.view_name not in spec.views:
            return None
        permission = permission_of(action, self.view_name)
        return None if permission is None else self.console.identity.refusal(permission, self.target_queue())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # None: the binding shows, greyed out; the help screen and palette say why.
        return None if self.refusal(action) else True

    def refresh_refusals(self) -> None:
        """Refresh the footer when what the user may do here changed (the cursor moved to a row of
        another queue): redrawing the footer on every cursor move would cost more than the table."""
        refusals = tuple(self.refusal(a) for a in BY_NAME)
        if refusals != getattr(self, "_refusals", None):
            self._refusals = refusals
            self.refresh_bindings()  # type: ignore[attr-defined]

    async def call(self, call: Awaitable[T], done: str | None = None) -> T | None:
        """Run one API call; a refusal (403, 409, ...) is a notification and changes nothing."""
        try:
            result = await call
        except JobDeckError as exc:
            self.console.notify(exc.message, title=f"refused ({exc.status})", severity="error", timeout=8)
            return None
        if done:
            self.console.notify(done, timeout=3)
        return result


class View(ConsoleMixin, Vertical):
    """One view of the main screen (Jobs, Queues, ...)."""

    DEFAULT_CSS = "View { height: 1fr; }"
    title: ClassVar[str] = ""

    def apply_events(self, events: list[Json]) -> None:
        """Live events since the last batch, oldest first (called even when hidden)."""

    async def reload(self) -> None:
        """Read the view's data from the server again."""

    def tick(self) -> None:
        """Once a second: refresh what depends on the clock."""

    def focus_main(self) -> None:
        """Give focus to the view's main widget."""
