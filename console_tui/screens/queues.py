"""The Queues view: depth, running, throughput sparkline, paused, its limits (concurrency, rate, per key,
fair share) and open circuit breakers; below the table, the highlighted queue's per-key usage (running
jobs per concurrency key, queued jobs per fairness key) and its breakers; pause, resume, change the
limits and the breakers' numbers, reset a breaker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from console_tui.actions import bindings_for
from console_tui.screens.base import Json
from console_tui.screens.dialogs import PromptScreen
from console_tui.screens.tables import TableView
from console_tui.throughput import SPARK_SECONDS
from core.client import breaker_window_text, relay_lag_text

FINISHED = ("job.succeeded", "job.failed", "job.dead", "job.cancelled")


class QueuesView(TableView):
    view_name: ClassVar[str] = "queues"
    title: ClassVar[str] = "Queues"
    BINDINGS = bindings_for("queues")
    # 128 columns with their padding: the whole table fits a 130-column terminal, and the sparkline's
    # column is as wide as its series (one character a second), so its newest seconds are never cut off
    COLUMNS = (("name", "QUEUE", 16), ("status", "STATUS", 8), ("depth", "DEPTH", 7), ("running", "RUNNING", 8),
               ("scheduled", "WAITING", 8), ("concurrency", "LIMIT", 7), ("rate_limit", "RATE", 9),
               ("key_concurrency", "PER KEY", 8), ("breakers", "BREAKERS", 8),
               ("spark", f"DONE/S, LAST {SPARK_SECONDS} S", SPARK_SECONDS), ("rate", "NOW/S", 7))  # fmt: skip
    POLL_SECONDS = 2.0
    DEFAULT_CSS = """
    QueuesView #keys { height: auto; max-height: 12; padding: 0 1; border-top: solid $boost; }
    """

    async def fetch(self) -> list[Json]:
        return await self.console.client.queues()

    def __init__(self) -> None:
        super().__init__()
        self.relays: dict[str, Json] = {}
        self.breakers: list[Json] = []
        self.usage: Json | None = None

    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield Static("", id="keys")

    async def enrich(self, items: list[Json]) -> None:
        # The outbox relays' lag (Kafka) rides on the bar; a node without them shows nothing.
        client = self.console.client
        stats = await self.call(client.stats())
        self.relays = dict((stats or {}).get("relays") or {})
        self.breakers = await self.call(client.breakers()) or []
        for item in items:  # on the item, so a breaker that opens or closes redraws its queue's row
            item["breakers_open"] = sum(
                1 for b in self.breakers if b["queue"] == item["name"] and b["state"] != "closed"
            )
        q = self.current() or (items[0] if items else None)
        name = q["name"] if q else None
        self.usage = await self.call(client.queue_keys(name)) if name else None

    def show_items(self, items: list[Json]) -> None:
        super().show_items(items)
        self.query_one("#keys", Static).update(self.keys_panel())

    def keys_panel(self) -> Text:
        """The highlighted queue's per-key usage and circuit breakers."""
        q = self.current()
        if q is None:
            return Text("")
        out = Text()
        out.append(f"{q['name']}", style="bold")
        u = self.usage if self.usage and self.usage.get("queue") == q["name"] else None
        limit = q.get("key_concurrency")
        out.append(" — per concurrency key: " + ("no limit" if limit is None else f"at most {limit} running"))
        weights = " ".join(f"{k}={v:g}" for k, v in sorted((q.get("fairness_weights") or {}).items()))
        out.append(
            f" — fair share: {'on' if q.get('fair') else 'off'}" + (f", weights {weights}" if weights else "") + "\n"
        )
        if u is not None:
            running = u["running_by_concurrency_key"]
            out.append("  running  ", style="bold")
            out.append(" · ".join(f"{r['key']} {r['running']}" + ("" if limit is None else f"/{limit}")
                                  for r in running) or "none", style="cyan")  # fmt: skip
            out.append(" …" if u["more_running_keys"] else "")
            out.append("\n  queued   ", style="bold")  # not "waiting": the table's WAITING is its scheduled jobs
            waiting = u["waiting_by_fairness_key"]
            out.append(" · ".join(f"{w['key']} {w['waiting']:,}" + (f" (served {w['served']:g})" if q.get("fair") else "")
                                  for w in waiting) or "none", style="cyan")  # fmt: skip
            out.append(" …" if u["more_waiting_keys"] else "")
            if u["waiting_capped"]:
                out.append(f"  (counted the first {u['waiting_counted']:,} only)", style="dim")
        mine = [b for b in self.breakers if b["queue"] == q["name"]]
        out.append("\n  breakers ", style="bold")
        if not mine:
            out.append("none yet (one per host its http jobs call)", style="dim")
        for b in mine:
            style = {"open": "bold red", "half_open": "yellow"}.get(b["state"], "green")
            out.append(f"\n    {b['host']} ", style="bold")
            out.append(b["state"].replace("_", " "), style=style)
            out.append(f" ({b['mode']}; {breaker_window_text(b)}; opened {b['times_opened']}×)")
            if b["reason"]:
                out.append(f"\n      {b['reason']}", style="dim")
        return out

    @on(DataTable.RowHighlighted)
    def _show_keys(self, event: DataTable.RowHighlighted) -> None:
        q = self.current()
        if q is not None and (self.usage is None or self.usage.get("queue") != q["name"]):
            self.stale = True  # read the newly highlighted queue's keys at the next reload (a moment)
        self.query_one("#keys", Static).update(self.keys_panel())

    def bar(self) -> str:
        return "  ·  ".join([super().bar(), *(relay_lag_text(n, lag) for n, lag in sorted(self.relays.items()))])

    def cells(self, q: Json) -> list[Any]:
        d = self.console.fmt
        series = self.console.throughput.series(q["name"])
        return [
            q["name"],
            Text("paused", style="bold magenta") if q.get("paused") else Text("active", style="green"),
            Text(str(q.get("depth", 0)), justify="right"),
            Text(str(q.get("running", 0)), justify="right"),
            Text(str(q.get("scheduled", 0)), justify="right"),
            Text("-" if q.get("concurrency") is None else str(q["concurrency"]), justify="right"),
            Text(rate_cell(q), justify="right"),
            Text(key_cell(q), justify="right"),
            breakers_cell(q.get("breakers_open", 0)),
            Text(d.spark(series), style="cyan"),
            Text(d.number(series[-1] if series else 0), justify="right"),
        ]

    def wants(self, event: Json) -> bool:
        return str(event.get("type", "")).startswith(("queue.", "job.", "breaker."))

    def target_queue(self) -> str | None:
        q = self.current()
        return q["name"] if q else None

    async def action_pause(self) -> None:
        if q := self.current():
            await self.call(self.console.client.queue_action(q["name"], "pause"), f"queue {q['name']} paused")
            await self.reload()

    async def action_resume(self) -> None:
        if q := self.current():
            await self.call(self.console.client.queue_action(q["name"], "resume"), f"queue {q['name']} resumed")
            await self.reload()

    def _edit_queue(self, what: str, hint: str, parse: Callable[[str], Json], shown: Callable[[Json], str]) -> None:
        """A prompt for one of the highlighted queue's settings, live: `parse` turns what is typed into
        the queue's changes (a ValueError says what it cannot use), `shown` the queue into its current text."""
        q = self.current()
        if q is None:
            return
        client = self.console.client

        async def submit(text: str) -> Json:
            changed = await client.update_queue(q["name"], **parse(text))
            self.console.notify(f"queue {q['name']}: {what.lower()} {shown(changed)}")  # what the queue now has
            return changed

        self.console.push_screen(PromptScreen(f"{what} of queue {q['name']}", hint, submit, value=shown(q)))

    async def action_concurrency(self) -> None:
        self._edit_queue("Concurrency", "jobs of this queue running at once ('none': no limit)",
                         lambda t: {"concurrency": parse_whole(t)}, lambda q: limit_text(q.get("concurrency")))  # fmt: skip

    async def action_rate_limit(self) -> None:
        self._edit_queue("Rate limit", "jobs started per second over every node, e.g. '10' or '0.5 burst 3' "
                         "('none': no limit)", parse_rate_limit, rate_limit_text)  # fmt: skip

    async def action_key_limit(self) -> None:
        self._edit_queue("Per-key limit", "jobs of one concurrency key running at once ('none': no limit)",
                         lambda t: {"key_concurrency": parse_whole(t)}, lambda q: limit_text(q.get("key_concurrency")))  # fmt: skip

    async def action_fair_share(self) -> None:
        self._edit_queue("Fair share", "'on' or 'off' (claims rotate between fairness keys), then each key's "
                         "weight as KEY=N, e.g. 'on gold=3 free=1' ('none': every weight 1)",
                         parse_fair_share, fair_share_text)  # fmt: skip

    async def action_breaker_settings(self) -> None:
        self._edit_queue("Circuit breakers", "opens at RATIO of at least MIN requests failed within WINDOW s; a "
                         "trial after RESET s; while open its jobs wait or fail ('default': all defaults)",
                         parse_breaker_settings, breaker_settings_text)  # fmt: skip

    async def action_reset_breaker(self) -> None:
        q = self.current()
        if q is None:
            return
        client = self.console.client
        mine = [b for b in self.breakers if b["queue"] == q["name"]]
        if not mine:
            self.console.notify(f"queue {q['name']} has no circuit breaker yet", severity="warning")
            return
        shut = [b for b in mine if b["state"] != "closed"] or mine

        async def submit(text: str) -> Json:
            host = text.strip()
            if not host:
                raise ValueError("the host (host[:port]) whose breaker to close")
            done = await client.reset_breaker(q["name"], host)
            self.console.notify(f"breaker of {host} in queue {q['name']} closed; the jobs it held go now")
            await self.reload()
            return done

        open_now = ", ".join(b["host"] for b in mine if b["state"] != "closed") or "none"
        self.console.push_screen(PromptScreen(f"Reset a circuit breaker of queue {q['name']}",
                                              f"the host whose breaker closes now, the jobs it held going at once "
                                              f"(open now: {open_now})",
                                              submit, value=shut[0]["host"]))  # fmt: skip


def limit_text(limit: int | None) -> str:
    """A whole-number limit as its prompt takes it: '8', 'none'."""
    return "none" if limit is None else str(limit)


def parse_whole(text: str) -> int | None:
    """A whole-number limit's prompt: N, or 'none' / '-' / nothing for no limit."""
    text = text.strip()
    if text.lower() in ("", "none", "-"):
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number (or 'none' for no limit)") from None


def rate_limit_text(q: Json) -> str:
    """A queue's rate limit as its prompt takes it: '10', '0.5 burst 3', 'none'."""
    if q.get("rate_limit") is None:
        return "none"
    burst = q.get("rate_burst")
    return f"{q['rate_limit']:g}" + ("" if burst is None else f" burst {burst}")


def parse_rate_limit(text: str) -> Json:
    """The rate-limit prompt's changes: 'N' or 'N/s' per second, optionally 'burst M'; 'none' for none."""
    text = text.strip()
    if text.lower() in ("", "none", "-"):
        return {"rate_limit": None}
    rate, _, burst = text.partition(" burst ")
    try:
        changes: Json = {"rate_limit": float(rate.removesuffix("/s"))}
        if burst:
            changes["rate_burst"] = int(burst)
    except ValueError:
        raise ValueError(f"{text!r}: a number per second, optionally 'burst N' (or 'none')") from None
    return changes


def fair_share_text(q: Json) -> str:
    """A queue's fair share as the prompt takes it: 'on gold=3 free=1', 'off'."""
    weights = q.get("fairness_weights") or {}
    return " ".join(["on" if q.get("fair") else "off", *(f"{k}={v:g}" for k, v in sorted(weights.items()))])


def parse_fair_share(text: str) -> dict[str, Any]:
    """The queue settings of the fair-share prompt's words: on / off, KEY=N weights (the whole set: a key
    left out goes back to 1), 'none' (every weight 1). ValueError says which word it cannot use."""
    out: dict[str, Any] = {}
    weights: dict[str, float] = {}
    for word in text.split():
        if word.lower() in ("on", "off"):
            out["fair"] = word.lower() == "on"
        elif word.lower() == "none":
            out["fairness_weights"] = None
        elif "=" in word:
            key, _, n = word.partition("=")
            try:
                weights[key] = float(n)
            except ValueError:
                raise ValueError(f"the weight of {key!r} is not a number: {n!r}") from None
        else:
            raise ValueError(f"{word!r}: say on or off, and KEY=N for a key's weight")
    if weights:
        out["fairness_weights"] = weights
    if not out:
        raise ValueError("say on or off, and KEY=N for a key's weight ('none': every weight 1)")
    return out


#: the words of the breaker prompt -> the queue settings they set
BREAKER_WORDS = {"ratio": "breaker_failure_ratio", "window": "breaker_window", "reset": "breaker_reset",
                 "min": "breaker_min_requests", "mode": "breaker_mode"}  # fmt: skip


def breaker_settings_text(q: Json) -> str:
    """A queue's breaker numbers as the prompt takes them: 'ratio 0.5 window 10 reset 30 min 5 mode wait'
    (the defaults where it sets none)."""
    defaults = {"breaker_failure_ratio": 0.5, "breaker_window": 10.0, "breaker_reset": 30.0,
                "breaker_min_requests": 5, "breaker_mode": "wait"}  # fmt: skip
    parts = []
    for word, field in BREAKER_WORDS.items():
        value = q.get(field)
        value = defaults[field] if value is None else value
        parts.append(f"{word} {value:g}" if isinstance(value, float) else f"{word} {value}")
    return " ".join(parts)


def parse_breaker_settings(text: str) -> dict[str, Any]:
    """'reset 60 mode fail' as the PATCH of a queue's breaker settings (only what it names); 'default'
    sets every one back to the defaults. ValueError says what is wrong; the server checks the ranges."""
    words = text.split()
    if [w.lower() for w in words] in (["default"], ["defaults"]):
        return dict.fromkeys(BREAKER_WORDS.values())
    if not words or len(words) % 2:
        raise ValueError("pairs of a name and a value: ratio 0.5 window 10 reset 30 min 5 mode wait")
    changes: dict[str, Any] = {}
    for word, value in zip(words[::2], words[1::2], strict=True):
        field = BREAKER_WORDS.get(word.lower())
        if field is None:
            raise ValueError(f"{word!r} is none of {', '.join(BREAKER_WORDS)}")
        if field == "breaker_mode":
            changes[field] = value.lower()
            continue
        try:
            number = float(value.removesuffix("%")) / (100 if value.endswith("%") else 1)
        except ValueError:
            raise ValueError(f"{word} {value!r}: not a number") from None
        if field == "breaker_min_requests":
            if not number.is_integer():
                raise ValueError(f"min {value!r}: a whole number of requests")
            changes[field] = int(number)
        else:
            changes[field] = number
    return changes


def rate_cell(q: Json) -> str:
    """A queue's rate limit as the table shows it: '10/s ×5' (burst 5), or '-'."""
    rate = q.get("rate_limit")
    if rate is None:
        return "-"
    return f"{rate:g}/s" + (f" ×{q['rate_burst']}" if q.get("rate_burst") is not None else "")


def key_cell(q: Json) -> str:
    """A queue's per-key limit, and 'fair' when its claims rotate between fairness keys."""
    limit = "-" if q.get("key_concurrency") is None else str(q["key_concurrency"])
    return limit + (" fair" if q.get("fair") else "")


def breakers_cell(shut: int) -> Text:
    """How many of a queue's circuit breakers are open (or half open), or '-'."""
    if not shut:
        return Text("-", justify="right")
    return Text(f"{shut} open", style="bold red", justify="right")
