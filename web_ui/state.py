"""The state every page shares: who is signed in, whether the core answers, and the live loop
that pushes the hub's changes into this browser tab."""

from __future__ import annotations

import asyncio
import fnmatch
import time
from typing import Any

import reflex as rx

from core.client import JobDeckClient
from core.errors import JobDeckError, NotFound, Unauthorized, Unavailable
from web_ui import sessions
from web_ui.hub import HUB, Change
from web_ui.settings import client_for, public_core_url

PUSH_INTERVAL = 0.1  # at most ten pushes a second to one tab
DISCONNECT_GRACE = 15.0  # a tab gone this long stops its live loop

# Every action the UI offers, the permission it needs, and whether it is about one queue.
ACTIONS = {
    "jobs.write": "change jobs",
    "schedules.write": "change schedules",
    "queues.pause": "pause queues",
    "queues.configure": "configure queues",
    "breakers.reset": "reset circuit breakers",
    "agents.drain": "drain agents",
    "audit.read": "read the audit log",
    "notifications.manage": "manage notifications",
}

# Live loops running in this backend, by client token: one per tab however often it navigates.
_LOOPS: set[str] = set()


class AppState(rx.State):
    """Session, permissions, core status and the live loop."""

    user_name: str = ""
    role: str = "admin"
    auth_mode: str = "none"
    allowed: list[str] = list(ACTIONS)
    queue_patterns: list[str] = ["*"]
    signed_out: bool = False
    web_login: bool = False  # the core offers the browser sign-in (OIDC)
    has_session: bool = False  # this browser holds a dashboard session cookie
    signin_error: str = ""
    browser_zone: str = ""  # the browser's IANA zone (Intl), once it told us
    show_utc: bool = False
    core_ok: bool = True
    core_error: str = ""
    last_seq: int = 0
    live_version: int = 0
    alert_title: str = ""  # the latest alert on the live feed (the banner); "" for none
    alert_kind: str = ""
    alert_dismissed_at: float = 0.0  # the arrival time of the alert this session dismissed

    # -- helpers for the page states (plain methods, not events)

    def _token(self) -> str | None:
        return sessions.token_from_cookie_header(self.router.headers.cookie)

    def client(self) -> JobDeckClient:
        """The core client of this browser session (with its sign-in token, if any)."""
        return client_for(self._token())

    def may(self, action: str, queue: str | None = None) -> str:
        """Why this user may not do `action` (on `queue`), or "" when allowed."""
        if self.signed_out:
            return "sign in first"
        if action not in self.allowed:
            return f"your role ({self.role}) may not {ACTIONS.get(action, action)}"
        if queue is not None and not self.sees_queue(queue):
            return f"your teams may not act on queue {queue}"
        return ""

    def sees_queue(self, queue: str | None) -> bool:
        """Whether this user's teams cover `queue` (a queue-less thing is everyone's)."""
        return queue is None or any(fnmatch.fnmatchcase(queue, p) for p in self.queue_patterns)

    async def _fetch_or_fail(self) -> Any:
        """Read the page again (`fetch`); a toast (see `failed`) if the core refuses or is away."""
        try:
            await self.fetch()  # type: ignore[attr-defined]
        except JobDeckError as exc:
            return self.failed(exc)
        return None

    def failed(self, exc: JobDeckError) -> Any:
        """A toast for a refused or failed call; notes an unreachable core."""
        if isinstance(exc, Unavailable):
            self.core_ok, self.core_error = False, exc.message
        if isinstance(exc, Unauthorized):
            self.signed_out = True
            return None  # the header's sign-in box says it
        return rx.toast.error(exc.message, duration=6000)

    # -- computed vars

    @rx.var
    def sign_in_url(self) -> str:
        origin = self.router.url.origin
        return f"{public_core_url()}/auth/login?next={origin}/auth/done"

    @rx.var
    def can_write_jobs(self) -> bool:
        return not self.signed_out and "jobs.write" in self.allowed

    @rx.var
    def can_write_schedules(self) -> bool:
        return not self.signed_out and "schedules.write" in self.allowed

    @rx.var
    def can_read_audit(self) -> bool:
        return not self.signed_out and "audit.read" in self.allowed

    @rx.var
    def can_manage_notifications(self) -> bool:
        return not self.signed_out and "notifications.manage" in self.allowed

    def dismiss_alert(self) -> None:
        """Hide the banner's alert in this session only (a newer alert shows again)."""
        self.alert_dismissed_at = HUB.alert_now(self.sees_queue)[2]
        self.alert_title, self.alert_kind = "", ""

    @rx.var
    def write_reason(self) -> str:
        return self.may("jobs.write")

    # -- events

    def token_sign_in(self, form: dict[str, Any]) -> Any:
        """The token sign-in form: the token goes to this backend only, never into page state."""
        token = str(form.get("token") or "").strip()
        if not token:
            self.signin_error = "paste an access token"
            return None
        code = sessions.pending_sign_in(token)
        return rx.call_script(f"window.location.assign('/auth/session?code={code}')")

    async def load_me(self) -> None:
        """Who is signed in (a core without sign-in answers admin; an older core has no /auth/me)."""
        try:
            me = await self.client().me()
        except NotFound:
            me = {"name": "", "role": "admin", "auth": "none", "allowed": list(ACTIONS), "queues": ["*"]}
        except Unauthorized:
            self.signed_out, self.user_name, self.role, self.allowed = True, "", "viewer", []
            self.core_ok, self.core_error = True, ""
            try:
                config = await sessions.auth_config(self.client())
            except JobDeckError:
                config = {}
            self.web_login = bool(config.get("web_login"))
            return
        except Unavailable as exc:
            self.core_ok, self.core_error = False, exc.message
            return
        except JobDeckError as exc:
            self.core_error = exc.message
            return
        self.signed_out = False
        self.user_name = str(me.get("name") or me.get("subject") or "")
        self.role = str(me.get("role") or "viewer")
        self.auth_mode = str(me.get("auth") or "none")
        self.allowed = list(me.get("allowed") or [])
        self.queue_patterns = list(me.get("queues") or ["*"])
        self.core_ok, self.core_error = True, ""

    async def on_page_load(self) -> Any:
        """Every page's on_load: who am I, then make sure this tab's live loop runs (and learn the
        browser's time zone, once)."""
        self.has_session = self._token() is not None
        self.signin_error = str(self.router.url.query_parameters.get("signin_error", ""))
        await self.load_me()
        self.live_version = HUB.version
        self.last_seq = HUB.last_seq
        if not self.browser_zone:
            return [AppState.live_loop, rx.call_script(BROWSER_ZONE, callback=AppState.set_browser_zone)]
        return AppState.live_loop

    # -- time zones: times show in the browser's zone, or in UTC (the header's switch)

    def zone_name(self) -> str:
        """The zone the viewer reads times in."""
        return "UTC" if self.show_utc or not self.browser_zone else self.browser_zone

    async def set_browser_zone(self, name: str) -> None:
        self.browser_zone = str(name or "UTC")[:64]
        await self.refresh_page(None)

    async def toggle_utc(self, on: bool) -> None:
        self.show_utc = bool(on)
        await self.refresh_page(None)

    @rx.var
    def zone_label(self) -> str:
        """What the header says times are in."""
        return "UTC" if self.show_utc or not self.browser_zone else self.browser_zone

    async def refresh_page(self, changes: list[Change] | None) -> None:
        """Let the state of the page shown refresh what `changes` touched (None: everything)."""
        state_cls = _PAGE_STATES.get(_route_key(self.router.route_id)) or _PAGE_STATES.get(
            _route_key(self.router.url.path)
        )
        if state_cls is not None:
            page = await self.get_state(state_cls)
            await page.live_refresh(changes)

    @rx.event(background=True)
    async def live_loop(self) -> None:
        """Push the hub's changes into this tab until it goes away (one loop per tab)."""
        token = self.router.session.client_token
        if token in _LOOPS:
            return
        _LOOPS.add(token)
        try:
            version = HUB.version
            gone_since: float | None = None
            while True:
                new = await HUB.wait_newer(version, timeout=5.0)
                if not HUB.session_connected(token):
                    gone_since = gone_since or time.monotonic()
                    if time.monotonic() - gone_since > DISCONNECT_GRACE:
                        return
                    continue
                gone_since = None
                if new == version and self.core_ok == HUB.connected:
                    continue
                changes = HUB.changes_since(version)
                version = new
                started = time.monotonic()
                async with self:
                    was_ok = self.core_ok
                    self.core_ok = HUB.connected
                    self.core_error = "" if HUB.connected else (HUB.error or "the core does not answer")
                    self.last_seq = HUB.last_seq
                    self.live_version = version
                    title, kind, at = HUB.alert_now(self.sees_queue)
                    shown = at != self.alert_dismissed_at
                    self.alert_title, self.alert_kind = (title, kind) if shown else ("", "")
                    try:
                        if self.core_ok and not was_ok:
                            await self.load_me()
                            await self.refresh_page(None)
                        elif self.core_ok:
                            await self.refresh_page(changes)
                    except JobDeckError as exc:
                        if isinstance(exc, Unavailable):
                            self.core_ok, self.core_error = False, exc.message
                await asyncio.sleep(max(0.0, PUSH_INTERVAL - (time.monotonic() - started)))
        finally:
            _LOOPS.discard(token)


BROWSER_ZONE = "Intl.DateTimeFormat().resolvedOptions().timeZone"

# Page states register here so the live loop can refresh the page shown (a plain class attribute
# would become a state var).
_PAGE_STATES: dict[str, Any] = {}  # by _route_key


def _route_key(route: str) -> str:
    """A route as both sides spell it: Reflex names the index route "index" (route_id), pages say
    "/"; without this the Overview never refreshed live (its counters and relay lag froze at load)."""
    return route.strip("/") or "index"


_EDITABLE: dict[Any, tuple[str, ...]] = {}


def set_editable(state: Any, name: str, value: str) -> None:
    """Set a text field of a form or filter: only the fields its page listed in `editable`. (Each page
    state has its own `set_field` event calling this: an event inherited from AppState would run on
    the AppState instance.)"""
    if name in _EDITABLE.get(type(state), ()):
        setattr(state, name, value)


def page_state(route: str | None, editable: tuple[str, ...] = ()) -> Any:
    """Class decorator of a page's state. Every page state has `load()` (its page's on_load, after
    AppState.on_page_load), `fetch()` (read what the page shows from the core) and
    `live_refresh(changes)`, which the live loop calls while `route` is shown; `editable` names the
    text fields its `set_field(name, value)` may set."""

    def register(cls: Any) -> Any:
        if route is not None:
            _PAGE_STATES[_route_key(route)] = cls
        _EDITABLE[cls] = editable
        return cls

    return register
