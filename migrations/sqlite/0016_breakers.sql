-- Circuit breakers of http tasks (core/breaker.py), one per (queue, target host), shared by every
-- agent and node. A queue's breaker_* settings (NULL: the defaults) say when one opens and what its
-- jobs do while it is open (breaker_mode: wait | fail).
ALTER TABLE queues ADD COLUMN breaker_mode TEXT;
ALTER TABLE queues ADD COLUMN breaker_failure_ratio REAL;
ALTER TABLE queues ADD COLUMN breaker_window REAL;
ALTER TABLE queues ADD COLUMN breaker_reset REAL;
ALTER TABLE queues ADD COLUMN breaker_min_requests INTEGER;
CREATE TABLE breakers (
    queue       TEXT NOT NULL,
    key         TEXT NOT NULL,
    opened_at   REAL,
    retry_at    REAL,
    probe_job   INTEGER,
    win_start   REAL NOT NULL DEFAULT 0,
    ok          INTEGER NOT NULL DEFAULT 0,
    failed      INTEGER NOT NULL DEFAULT 0,
    prev_ok     INTEGER NOT NULL DEFAULT 0,
    prev_failed INTEGER NOT NULL DEFAULT 0,
    opened      INTEGER NOT NULL DEFAULT 0,
    updated_at  REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;
