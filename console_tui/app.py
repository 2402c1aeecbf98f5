"""The console app and `jobdeck console`: sign-in check, then the live screens."""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.screen import Screen

from console_tui.actions import ACTIONS, key_label
from console_tui.feed import Connection, LiveFeed
from console_tui.format import Display, epoch
from console_tui.operations import whoami
from console_tui.permissions import Identity
from console_tui.screens.base import ConsoleMixin, View
from console_tui.screens.help import HelpScreen
from console_tui.screens.main import MainScreen
from console_tui.throughput import Throughput
from console_tui.widgets.header import VIEWS, ConsoleHeader
from core.auth.credentials import token_for
from core.client import JobDeckClient, first_sight
from core.errors import JobDeckError, Unauthorized

FLUSH_SECONDS = 0.05  # live events are applied in batches this often: well inside the 250 ms promise
LOGIN_HINT = "sign in with `jobdeck login --server {server}` (or set JOBDECK_TOKEN)"


class ConsoleApp(App[int]):
    """The JobDeck terminal console for one server."""

    TITLE = "JobDeck console"
    CSS = """
    Screen { background: $background; }
    Toast { max-width: 80; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
        Binding("z", "toggle_zone", "Local/UTC", show=False),
    ]

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        identity: Identity | None = None,
        masked: bool = False,
        clock: Callable[[], float] = time.time,
        ca_file: str | None = None,
    ) -> None:
        super().__init__()
        self.token = token
        self.client = JobDeckClient(server, token=token, ca_file=ca_file)
        self.server = self.client.server
        self.identity = identity or Identity(name="…", role="…", auth="token", queues=(), allowed=frozenset())
        self.fmt = Display(masked=masked, clock=clock)
        self.throughput = Throughput(clock=clock)
        self.headers: set[ConsoleHeader] = set()
        self.connection = Connection()
        self.feed: LiveFeed | None = None
        self.ready = asyncio.Event()
        self._reload_wanted: set[View] = set()
        self.on_batch: Callable[[list[dict[str, Any]]], None] | None = None  # the benchmark listens here
        self.alert: tuple[float, dict[str, Any]] | None = None  # the latest notify.alert: (when seen, event)
        self._alerts_seen: deque[str] = deque(maxlen=256)  # alert ids shown: a repeated one is not shown again

    # -- start, stop

    async def on_mount(self) -> None:
        try:
            if self.identity.role == "…":
                self.identity = await whoami(self.client)
            since = int((await self.client.health())["last_seq"])
        except Unauthorized as exc:
            self.exit(1, message=f"error: {exc.message}; {LOGIN_HINT.format(server=self.server)}")
            return
        except JobDeckError as exc:
            self.exit(1, message=f"error: {exc.message}")
            return
        self.feed = LiveFeed(self.client, since, self._connection_changed)
        self.connection = self.feed.connection
        await self.push_screen(MainScreen())
        self.run_worker(self.feed.run(), name="feed", group="feed")
        self.set_interval(FLUSH_SECONDS, self._apply_feed)
        self.set_interval(1.0, self._tick)
        # What exists now lives as long as the app: keep the collector from walking it again and
        # again (full collections of a large heap were the console's longest pauses under load).
        gc.collect()
        gc.freeze()
        self.ready.set()

    async def on_unmount(self) -> None:
        await self.client.close()

    @property
    def main_screen(self) -> MainScreen | None:
        for screen in self.screen_stack:
            if isinstance(screen, MainScreen):
                return screen
        return None

    # -- live state

    def _connection_changed(self, connection: Connection) -> None:
        self.connection = connection
        for header in list(self.headers):
            header.refresh()

    async def _apply_feed(self) -> None:
        if self.feed is None:
            return
        main = self.main_screen
        events = self.feed.take()
        if self.feed.gap and main is not None:  # events were pruned before we saw them: read everything again
            self.feed.gap = False
            self._reload_wanted.update(main.views)
        if events:
            for e in events:
                self.throughput.add(str(e.get("type")), e.get("queue"), epoch(e.get("ts")))
                if e.get("type") == "notify.alert" and first_sight(self._alerts_seen, (e.get("data") or {}).get("id")):
                    self.alert = (self.fmt.clock(), e)
            if main is not None:
                for view in main.views:
                    view.apply_events(events)
            for header in list(self.headers):
                header.refresh()
            if self.on_batch is not None:
                self.on_batch(events)
        if main is not None and main.is_mounted:
            wanted, self._reload_wanted = self._reload_wanted, set()
            try:
                for view in wanted:
                    await view.reload()
                current = main.current_view
                maybe = getattr(current, "maybe_reload", None)
                if maybe is not None:
                    await maybe()
            except NoMatches:  # the app is closing: its widgets went while the reload awaited the server
                return

    def reload_soon(self, view: View) -> None:
        """Reload `view` at the next batch (a change the view cannot place by itself)."""
        self._reload_wanted.add(view)

    def _tick(self) -> None:
        main = self.main_screen
        if main is not None and self.screen is main:
            try:
                view = main.current_view
            except NoMatches:  # the app is closing: its views are being removed under the timer
                return
            view.tick()
        for header in list(self.headers):
            header.refresh()

    # -- help and the command palette

    async def action_toggle_zone(self) -> None:
        """Times in UTC, or back in this machine's zone (schedules keep their own)."""
        self.fmt.utc = not self.fmt.utc
        self.notify(f"times in {'UTC' if self.fmt.utc else 'your local zone'}", timeout=2)
        for view in self.query(View):
            if view.display:
                await view.reload()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def _actionable(self, screen: Screen[Any]) -> ConsoleMixin | None:
        if isinstance(screen, MainScreen):
            return screen.current_view
        return screen if isinstance(screen, ConsoleMixin) else None

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if isinstance(screen, MainScreen):
            for key, name, label in VIEWS:
                yield SystemCommand(f"Show {label}", f"key {key}", lambda n=name: self._show(screen, n))
        target = self._actionable(screen)
        if target is None:
            return
        for spec in ACTIONS:
            if target.view_name not in spec.views:
                continue
            refusal = target.refusal(spec.name)
            help_text = f"key {key_label(spec.key)}" + (f" — {spec.help}" if spec.help else "")
            if refusal:
                yield SystemCommand(f"{spec.title} (disabled)", f"{refusal}", lambda r=refusal: self._refuse(r))
            else:
                yield SystemCommand(spec.title, help_text, lambda t=target, n=spec.name: self._run(t, n))

    def _show(self, screen: MainScreen, name: str) -> None:
        self.call_later(screen.action_show, name)

    def _refuse(self, reason: str) -> None:
        self.notify(reason, title="not allowed", severity="warning")

    def _run(self, target: ConsoleMixin, name: str) -> None:
        self.call_later(target.run_action, name)  # type: ignore[attr-defined]


async def sign_in(server: str, ca_file: str | None = None) -> tuple[str | None, Identity]:
    """The token `jobdeck login` cached (or $JOBDECK_TOKEN) and who it signs in as; raises
    Unauthorized when the server refuses it."""
    token = await token_for(server)
    async with JobDeckClient(server, token=token, ca_file=ca_file) as client:
        await client.health()
        identity = await whoami(client)
    return token, identity


def main(args: argparse.Namespace) -> int:
    """`jobdeck console`: check the server and the sign-in first, so a wrong URL or an expired
    token is one clear line with a hint, not a traceback; then run the console."""
    server: str = args.server
    ca_file: str | None = getattr(args, "ca_file", None)
    try:
        token, identity = asyncio.run(sign_in(server, ca_file))
    except Unauthorized as exc:
        print(f"error: {exc.message}; {LOGIN_HINT.format(server=server)}", flush=True)
        return 1
    except JobDeckError as exc:
        print(f"error: {exc.message}", flush=True)
        return 1
    app = ConsoleApp(server, token, identity=identity, ca_file=ca_file)
    result = app.run()
    return app.return_code or (result if isinstance(result, int) else 0)
