-- Pick-up latency history (core/store/pickup.py), kept by the claim transaction so it is the same on
-- every node and survives restarts. `queues.held_at` is the last time the queue's own policy held
-- jobs back (a claim found it at its concurrency or rate limit; the moment it was resumed): a job
-- that was ready before that waited "held", any other waited "for a slot".
ALTER TABLE queues ADD COLUMN held_at DOUBLE PRECISION;

-- One row per (minute, node, class, latency bucket): how many jobs were claimed and their summed
-- waits. One upsert per claim batch; each node writes its own rows, so claims on several nodes
-- never wait on each other's row locks. Read by GET /v1/stats/history; pruned after 25 hours.
CREATE TABLE pickup_minutes (
    minute  BIGINT           NOT NULL,
    node    TEXT             NOT NULL,
    held    SMALLINT         NOT NULL,
    bucket  SMALLINT         NOT NULL,
    n       BIGINT           NOT NULL,
    seconds DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (minute, node, held, bucket)
);
