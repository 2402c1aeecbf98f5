"""The notifier: the outbox relay's "notify" sink (events -> rules -> deliveries), one-off sends,
and the dispatcher that sends what they write.

The sink runs on the node holding the relay's "notify" lease (core/relay/), so rules see every
event once per round, in seq order, and their state (suppression windows) has one owner. It writes
deliveries and a `notify.alert` event per alert in one transaction, then acknowledges the round:
the deliveries it writes claimed for this node go straight to its dispatcher (the others, for a
channel whose breaker is open or queue full, wait for a claim by any node). A crash repeats a
round, and deterministic message and alert ids make the repeat write nothing new
(neither deliveries nor, for an alert that has any, its event; front ends also ignore an alert id
they have shown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from core.model import iso
from core.notify import conditions as C
from core.notify import rules as R
from core.notify.dispatcher import CLAIM_TTL, DEFAULT_MAX_ATTEMPTS, Dispatcher
from core.store._ops import Emit
from core.store.base import Event

log = logging.getLogger("jobdeck.notify")

STALE = 3600.0  # an event older than this when relayed raises no alert (a first start reads old history)
TICK = 1.0  # seconds between checks of the time conditions and closing windows
FACTS_EVERY = 5.0  # seconds between reads of queue depths and agents (for queue_depth / no_agent rules)


def payload(kind: str, now: float, data: dict[str, Any]) -> dict[str, Any]:
    """A delivery's body (Standard Webhooks' shape: type, timestamp, data)."""
    return {"type": f"jobdeck.{kind}", "timestamp": iso(now), "data": data}


def max_attempts_of(channel: dict[str, Any]) -> int:
    return int(channel["config"].get("max_attempts", DEFAULT_MAX_ATTEMPTS))


class Notifier:
    """Notifications of one node: its dispatcher, and the relay sink when this node holds the lease."""

    def __init__(self, store: Any, clock: Callable[[], float],
                 facts: Callable[[], Awaitable[dict[str, Any]]] | None = None) -> None:  # fmt: skip
        self.store = store
        self.clock = clock
        self.facts = facts  # {"queues": [...], "agents": [...]} for the queue conditions
        self.dispatcher = Dispatcher(store, clock)
        self.sink = NotifySink(self)

    def start(self) -> None:
        """Start sending (every node sends; claims keep them from sending one delivery twice)."""
        self.dispatcher.start()

    async def stop(self) -> None:
        await self.dispatcher.stop()

    async def send_test(self, channel_id: int, title: str, text: str) -> dict[str, Any]:
        """A one-off notification to one channel (to try it); the delivery, pending."""
        channel = await self.store.get_channel(channel_id)
        now = self.clock()
        data = {"title": title, "text": text, "severity": "info", "channel": channel["name"], "rule": None,
                "event": None}  # fmt: skip
        item = {"channel_id": channel_id, "kind": "test", "message_id": f"msg_test_{secrets.token_hex(12)}",
                "payload": payload("test", now, data), "max_attempts": max_attempts_of(channel)}  # fmt: skip
        [delivery] = await self.store.add_deliveries([item])
        self.dispatcher.wake()
        return delivery  # type: ignore[no-any-return]

    async def replay(self, delivery_id: int) -> dict[str, Any]:
        """Send a finished delivery again, with the channel's attempts."""
        d = await self.store.get_delivery(delivery_id)
        channel = await self.store.get_channel(d["channel_id"])
        out = await self.store.replay_delivery(delivery_id, max_attempts_of(channel))
        self.dispatcher.wake()
        return out  # type: ignore[no-any-return]


class NotifySink:
    """The relay's notify sink (the contract is in core/relay/__init__.py)."""

    name = "notify"

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier
        self.store = notifier.store
        self.rules: list[dict[str, Any]] = []
        self.states: dict[int, R.RuleState] = {}
        self.channels: dict[int, dict[str, Any]] = {}
        self._lock = asyncio.Lock()
        self._ticker: asyncio.Task[None] | None = None
        self._facts_due = 0.0

    async def open(self) -> None:
        await self._load()
        self._ticker = asyncio.create_task(self._tick_forever(), name="jobdeck-notify-rules")

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(BaseException):
                await self._ticker
            self._ticker = None

    async def _load(self) -> None:
        self.rules = await self.store.list_rules()
        self.states = {r["id"]: R.state_from_dict(r["state"]) for r in self.rules}
        self.channels = {c["id"]: c for c in await self.store.list_channels()}

    async def deliver(self, events: Sequence[Event]) -> int:
        async with self._lock:
            alerts: list[R.Alert] = []
            changed: set[int] = set()
            now = self.notifier.clock()
            for e in events:
                if e.type.startswith("notify."):
                    if e.type.startswith(("notify.rule.", "notify.channel.")):
                        await self._write(alerts, changed)  # what came before is judged by the old rules
                        alerts, changed = [], set()
                        await self._load()
                    if e.type == "notify.channel.disabled":
                        alerts.append(self._disabled_alert(orjson.loads(e.body)))
                    continue
                if not self.rules or now - e.ts > STALE:
                    continue
                body = orjson.loads(e.body)
                for rule in self.rules:
                    if not rule["enabled"] or not R.matches(rule["spec"], body):
                        continue
                    state = self.states.setdefault(rule["id"], R.RuleState())
                    if e.seq is not None:
                        if e.seq <= state.seq:
                            continue  # counted before this round was repeated (see RuleState.seq)
                        state.seq = e.seq
                    changed.add(rule["id"])
                    alerts += C.on_event(rule, state, body, e.ts)
            await self._write(alerts, changed)
            assert events[-1].seq is not None
            return events[-1].seq

    def _disabled_alert(self, body: dict[str, Any]) -> R.Alert:
        data = body.get("data") or {}
        ch = data.get("channel") or {}
        title = f"notification channel {ch.get('name')} was disabled"
        text = f"{data.get('reason')}. Fix the receiver, then turn the channel on again (PATCH enabled: true)."
        return R.Alert(None, None, "channel_disabled", title, text, "critical", f"d{body.get('seq')}", None, (),
                       (int(ch.get("id", 0)),))  # fmt: skip

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("notifications: checking the rules failed; trying again in %.0f s", TICK)

    async def tick(self) -> None:
        """What time alone changes: suppression windows that closed (their summaries), and the time
        conditions (counts, ratios, queue depth, queues without agents) that began or cleared."""
        async with self._lock:
            now = self.notifier.clock()
            facts = None
            if (
                self.notifier.facts is not None
                and now >= self._facts_due
                and any(r["enabled"] and C.condition_of(r["spec"])["kind"] in C.NEEDS_FACTS for r in self.rules)
            ):
                facts = await self.notifier.facts()
                self._facts_due = now + FACTS_EVERY
            alerts: list[R.Alert] = []
            changed: set[int] = set()
            for rule in self.rules:
                state = self.states.setdefault(rule["id"], R.RuleState())
                # serialised: the state's dicts change in place, so a shallow copy would compare equal
                before = orjson.dumps(R.state_to_dict(state))
                alerts += C.on_tick(rule, state, facts, now)
                if orjson.dumps(R.state_to_dict(state)) != before:
                    changed.add(rule["id"])
            if alerts or changed:
                await self._write(alerts, changed)

    async def _write(self, alerts: list[R.Alert], changed: set[int]) -> None:
        if not alerts and not changed:
            return
        now = self.notifier.clock()
        dispatcher = self.notifier.dispatcher
        items, emits = [], []
        for a in alerts:
            targets = [c for cid, c in self.channels.items()
                       if c["enabled"] and (cid in a.channels if a.channels else cid not in a.exclude)]  # fmt: skip
            rule = None if a.rule_id is None else {"id": a.rule_id, "name": a.rule_name}
            data = {"title": a.title, "text": a.text, "severity": a.severity, "rule": rule, "event": a.event}
            alert_id = f"alert_{a.rule_id or 0}_{a.key}"  # the same in a repeated round: the store skips it
            for c in targets:
                items.append({"channel_id": c["id"], "rule_id": a.rule_id, "kind": a.kind, "alert_id": alert_id,
                              "claim": dispatcher.can_take(c["id"]),
                              "message_id": f"msg_{a.rule_id or 0}_{a.key}_{c['id']}",
                              "payload": payload(a.kind, now, {**data, "channel": c["name"]}),
                              "max_attempts": max_attempts_of(c)})  # fmt: skip
            emits.append(Emit("notify.alert", {"id": alert_id, "kind": a.kind, "title": a.title, "text": a.text,
                                               "severity": a.severity, "rule": rule,
                                               "channels": [c["name"] for c in targets]}, queue=a.queue))  # fmt: skip
        states = {rid: R.state_to_dict(self.states[rid]) for rid in changed if rid in self.states}
        made = await self.store.save_rule_states(states, items, emits, claim_ttl=CLAIM_TTL)
        claimed = {it["message_id"] for it in items if it["claim"]}
        dispatcher.take([d for d in made if d["message_id"] in claimed])
        # No wake-up for the rest: their channel's breaker is open or its queue full (or this node
        # does not send), so a claim now would find nothing to take; the dispatchers' polls will.
        # (A claim per relay round also scans every waiting delivery of a hanging channel.)
