-- JobDeck schema, version 1 (SQLite). Times are Unix seconds (REAL, UTC); JSON as TEXT.

CREATE TABLE jobs (
    id                INTEGER PRIMARY KEY,
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
    spec_max_attempts INTEGER NOT NULL
);

-- A schedule fires at most once per fire time.
CREATE UNIQUE INDEX jobs_schedule_fire ON jobs (schedule_id, fire_time) WHERE fire_time IS NOT NULL;
CREATE UNIQUE INDEX jobs_idempotency ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Claims: the next queued jobs, overall and per queue.
CREATE INDEX jobs_claim ON jobs (sort_key, id) WHERE state = 'queued';
CREATE INDEX jobs_claim_queue ON jobs (queue, sort_key, id) WHERE state = 'queued';
-- Promotion of due jobs and the reaper.
CREATE INDEX jobs_due ON jobs (run_at) WHERE state IN ('scheduled', 'failed');
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'running';
-- Lists and counts.
CREATE INDEX jobs_state ON jobs (state, id);
CREATE INDEX jobs_queue ON jobs (queue, id);
CREATE INDEX jobs_queue_state ON jobs (queue, state);
CREATE INDEX jobs_name ON jobs (name, id);

CREATE TABLE job_tags (
    tag    TEXT    NOT NULL,
    job_id INTEGER NOT NULL,
    PRIMARY KEY (tag, job_id)
) WITHOUT ROWID;

CREATE TABLE attempts (
    job_id      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    agent       TEXT,
    claimed_at  REAL,
    started_at  REAL,
    finished_at REAL,
    outcome     TEXT NOT NULL,
    error       TEXT,
    exit_code   INTEGER,
    output      TEXT,
    result      TEXT,
    PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;

-- The outbox: every state change writes one row here in the same transaction.
CREATE TABLE events (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    ts     REAL    NOT NULL,
    type   TEXT    NOT NULL,
    job_id INTEGER,
    queue  TEXT,
    body   TEXT    NOT NULL   -- the event as sent to subscribers (JSON)
);
-- Throughput over the last minute counts finished-job events by type and time.
CREATE INDEX events_type_ts ON events (type, ts);
CREATE INDEX events_job ON events (job_id, seq);

CREATE TABLE queues (
    name        TEXT PRIMARY KEY,
    paused      INTEGER NOT NULL DEFAULT 0,
    concurrency INTEGER,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);

CREATE TABLE schedules (
    id           INTEGER PRIMARY KEY,
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
CREATE INDEX schedules_next ON schedules (next_fire_at) WHERE paused = 0;
