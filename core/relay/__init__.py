"""The outbox relay: every committed event, in seq order, to a sink outside JobDeck, at least once.

One mechanism, several sinks. Each sink gets its own `Relay`: a cursor over the events table (the
last seq the sink acknowledged) kept in the store with a lease, so with many nodes exactly one
relays at a time and another takes over within `relay_lease_seconds` when it dies (see
core/store/relay_cursors.py). The relay reads events after its cursor, hands them to the sink,
and moves the cursor only once the sink says they are safe; a crash or an outage therefore
repeats events (a bounded number: at most one unacknowledged round) and never skips one.

Adding a sink (the notifications sink is next) means writing one class; nothing in the cursor or
lease code changes. A sink is any object with:

    name: str
        The relay's row in `relay_cursors` ("kafka", "notify"): its own position and lease, so a
        slow sink never holds another back.
    async open() -> None
        Connect. Raise `SinkUnavailable(reason)` while the destination cannot be reached: the
        relay says so once in the log, tries again with backoff, and says when it is back.
    async deliver(events: Sequence[Event]) -> int
        Hand over the longest prefix of `events` (seq order, never empty, at most `batch` long) it
        takes in one go, and return the seq of the last event of that prefix once the destination
        has acknowledged all of it durably. Raise (any exception) to have the same events offered
        again after a backoff: the relay closes the sink, opens it again and starts from its cursor.
        Events the sink does not care about are simply included in the prefix (acknowledged).
    async close() -> None
        Flush and disconnect; called on a clean stop, on losing the lease, and after a failure.

`Event.body` is the event's JSON as the WebSocket feed sends it ({"seq", "ts", "type", "job_id",
"queue", "data"}). Delivery is at least once and in seq order per relay round: a sink that must
keep per-key order across retries should send a whole prefix as one unit (the Kafka sink builds
one batch per partition) and consumers drop an event whose seq they have seen for its key.
`relay_positions()` in the store gives every relay's lag, shown in /v1/stats and both front ends.
"""

from core.relay.relay import Relay, RelayStore, Sink, SinkUnavailable, relay_lag

__all__ = ["Relay", "RelayStore", "Sink", "SinkUnavailable", "relay_lag"]
