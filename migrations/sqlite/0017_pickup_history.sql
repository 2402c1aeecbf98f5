-- Pick-up latency history (core/store/pickup.py), kept by the claim transaction so it is the same on
-- every node and survives restarts. `queues.held_at` is the last time the queue's own policy held
-- jobs back (a claim found it at its concurrency or rate limit; the moment it was resumed): a job
-- that was ready before that waited "held", any other waited "for a slot".
ALTER TABLE queues ADD COLUMN held_at REAL;

-- One row per (minute, node, class, latency bucket): how many jobs were claimed and their summed
-- waits. One upsert per claim batch; read by GET /v1/stats/history; pruned after 25 hours.
CREATE TABLE pickup_minutes (
    minute  INTEGER NOT NULL,   -- epoch minute of the claim
    node    TEXT    NOT NULL,   -- the claiming node ('' on SQLite: one node), so nodes never contend
    held    INTEGER NOT NULL,   -- 1: held by its queue's policy; 0: waited for a slot
    bucket  INTEGER NOT NULL,   -- index into core/store/pickup.py BOUNDS
    n       INTEGER NOT NULL,
    seconds REAL    NOT NULL,
    PRIMARY KEY (minute, node, held, bucket)
) WITHOUT ROWID;
