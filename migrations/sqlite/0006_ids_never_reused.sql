-- Ids the API shows are never handed out twice. Without AUTOINCREMENT, SQLite gives a new row
-- max(rowid) + 1, so deleting the newest schedule (or, once jobs can be purged, the newest job)
-- let the next one take its id, and `GET /v1/jobs?schedule_id=N` mixed two schedules' jobs.
-- With AUTOINCREMENT, sqlite_sequence keeps the highest id ever used (explicit ids included:
-- the writer hands out job ids itself and reads the next one from there). events and audit_log
-- have had AUTOINCREMENT from the start. SQLite cannot add it to a table: both are rebuilt,
-- keeping every row, id and index of 0001-0005 (tests/store/test_ids.py checks that no index is
-- lost). `SELECT *` copies by position and fails loudly if a column was added that this file
-- does not know of.
CREATE TABLE jobs_new (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    name              TEXT    NOT NULL,
    queue             TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    priority          INTEGER NOT NULL,
    sort_key          REAL    NOT NULL,   -- claim order: enqueued_at - priority * aging
    run_at            REAL    NOT NULL,
    created_at        REAL    NOT NULL,
    updated_at        REAL    NOT NULL,
    attempt           INTEGER NOT NULL DEFAULT 0,  -- attempts made; also the lease's fencing token
    max_attempts      INTEGER NOT NULL,
    backoff_base      REAL    NOT NULL,
    backoff_cap       REAL    NOT NULL,
    timeout           REAL,
    task              TEXT    NOT NULL,
    tags              TEXT    NOT NULL DEFAULT '[]',
    idempotency_key   TEXT,
    schedule_id       INTEGER,
    fire_time         REAL,
    agent             TEXT,
    lease_expires_at  REAL,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    paused_from       TEXT,
    last_error        TEXT,
    started_at        REAL,
    finished_at       REAL,
    result            TEXT,
    spec_max_attempts INTEGER NOT NULL,
    labels            TEXT    NOT NULL DEFAULT ''
);
INSERT INTO jobs_new SELECT * FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
CREATE UNIQUE INDEX jobs_schedule_fire ON jobs (schedule_id, fire_time) WHERE fire_time IS NOT NULL;
CREATE UNIQUE INDEX jobs_idempotency ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_claim ON jobs (sort_key, id) WHERE state = 'queued';
CREATE INDEX jobs_claim_queue ON jobs (queue, sort_key, id) WHERE state = 'queued';
CREATE INDEX jobs_due ON jobs (run_at) WHERE state IN ('scheduled', 'failed');
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_state ON jobs (state, id);
CREATE INDEX jobs_queue ON jobs (queue, id);
CREATE INDEX jobs_queue_state ON jobs (queue, state);
CREATE INDEX jobs_name ON jobs (name, id);
CREATE INDEX jobs_priority ON jobs (priority, id);
CREATE INDEX jobs_duration ON jobs (coalesce(finished_at - started_at, -1), id);

CREATE TABLE schedules_new (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    cron         TEXT,
    interval     REAL,
    at           REAL,
    timezone     TEXT    NOT NULL,
    anchor       REAL    NOT NULL,
    job          TEXT    NOT NULL,
    paused       INTEGER NOT NULL DEFAULT 0,
    next_fire_at REAL,
    last_fire_at REAL,
    fired        INTEGER NOT NULL DEFAULT 0,
    created_at   REAL    NOT NULL,
    updated_at   REAL    NOT NULL
);
INSERT INTO schedules_new SELECT * FROM schedules;
DROP TABLE schedules;
ALTER TABLE schedules_new RENAME TO schedules;
CREATE INDEX schedules_next ON schedules (next_fire_at) WHERE paused = 0;
