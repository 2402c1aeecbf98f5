-- Outbox relays (core/relay/): each sink's position in the events table, and the lease that lets
-- one node at a time move it. acked_seq is the last seq the sink acknowledged: every event after
-- it is still to be delivered. epoch grows whenever another node takes the lease (a fencing token).
CREATE TABLE relay_cursors (
    name        TEXT PRIMARY KEY,
    acked_seq   INTEGER NOT NULL DEFAULT 0,
    holder      TEXT,
    lease_until REAL    NOT NULL DEFAULT 0,
    epoch       INTEGER NOT NULL DEFAULT 0,
    acked_at    REAL,
    created_at  REAL    NOT NULL
)
