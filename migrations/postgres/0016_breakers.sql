-- Circuit breakers of http tasks (core/breaker.py), one per (queue, target host), shared by every
-- agent and node. A queue's breaker_* settings (NULL: the defaults) say when one opens and what its
-- jobs do while it is open (breaker_mode: wait | fail).
ALTER TABLE queues ADD COLUMN breaker_mode text;
ALTER TABLE queues ADD COLUMN breaker_failure_ratio double precision;
ALTER TABLE queues ADD COLUMN breaker_window double precision;
ALTER TABLE queues ADD COLUMN breaker_reset double precision;
ALTER TABLE queues ADD COLUMN breaker_min_requests integer;
CREATE TABLE breakers (
    queue       text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    opened_at   double precision,
    retry_at    double precision,
    probe_job   bigint,
    win_start   double precision NOT NULL DEFAULT 0,
    ok          integer NOT NULL DEFAULT 0,
    failed      integer NOT NULL DEFAULT 0,
    prev_ok     integer NOT NULL DEFAULT 0,
    prev_failed integer NOT NULL DEFAULT 0,
    opened      integer NOT NULL DEFAULT 0,
    updated_at  double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, key)
);
