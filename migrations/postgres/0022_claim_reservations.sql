-- A claim of a limited queue (concurrency, rate, per-key limit or fair rotation) first reserves what it
-- may start, in a short transaction of its own under the queue's advisory lock, committed at once; then
-- it takes those jobs in its own (the writer's) transaction, outside the lock, and marks the reservation
-- used. So two nodes count and pick one at a time, but write their claims side by side. Every count of a
-- limit adds the reservations still open (used IS NULL) to the running jobs, in one statement (one
-- snapshot): a limit holds across nodes, exactly. A reservation a dead node left open comes back after
-- expires_at (core/flow.py RESERVED_FOR); a claim whose reservation was taken back starts nothing of it.
CREATE TABLE claim_reservations (
    id         bigserial PRIMARY KEY,
    queue      text COLLATE "C" NOT NULL,
    jobs       integer NOT NULL,    -- starts reserved: counted against the concurrency limit, taken from the bucket
    ids        bigint[],            -- a keyed queue's picked jobs: other claims' picks leave them alone
    keys       text[] COLLATE "C",  -- their concurrency keys (counted against the per-key limit)
    used       integer,             -- NULL while its claim runs; then how many it started (the rest is refunded)
    expires_at double precision NOT NULL
);
CREATE INDEX claim_reservations_queue ON claim_reservations (queue);
