-- Outbox relays (core/relay/): each sink's position in the events table, and the lease that lets
-- one node at a time move it. acked_seq is the last seq the sink acknowledged: every event after
-- it is still to be delivered. epoch grows whenever another node takes the lease (a fencing token).
CREATE TABLE relay_cursors (
    name        text COLLATE "C" PRIMARY KEY,
    acked_seq   bigint           NOT NULL DEFAULT 0,
    holder      text,
    lease_until double precision NOT NULL DEFAULT 0,
    epoch       bigint           NOT NULL DEFAULT 0,
    acked_at    double precision,
    created_at  double precision NOT NULL
);
