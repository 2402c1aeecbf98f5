-- Notifications (core/notify/): channels (where alerts go), rules (what raises one), and the
-- delivery log. A delivery is written before it is sent (an outbox of its own): a receiver that
-- is down gets it later, after a restart too. Secrets (the signing secret, SMTP password, header
-- values) live in `secrets`, which the API never shows.
CREATE TABLE notify_channels (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            TEXT NOT NULL UNIQUE,
    kind            TEXT NOT NULL,
    config          TEXT NOT NULL,
    secrets         TEXT NOT NULL,
    enabled         INTEGER NOT NULL DEFAULT 1,
    disabled_reason TEXT,
    failures        INTEGER NOT NULL DEFAULT 0,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
);
CREATE TABLE notify_rules (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL UNIQUE,
    spec        TEXT NOT NULL,
    enabled     INTEGER NOT NULL DEFAULT 1,
    state       TEXT NOT NULL DEFAULT '{}',
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE TABLE notify_deliveries (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    channel_id    INTEGER NOT NULL REFERENCES notify_channels (id) ON DELETE CASCADE,
    rule_id       INTEGER,
    kind          TEXT NOT NULL,
    message_id    TEXT NOT NULL UNIQUE,
    payload       TEXT NOT NULL,
    status        TEXT NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    max_attempts  INTEGER NOT NULL,
    next_at       REAL NOT NULL,
    claimed_until REAL NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL,
    finished_at   REAL,
    last_status   INTEGER,
    last_error    TEXT,
    replay_of     INTEGER
);
CREATE INDEX notify_deliveries_due ON notify_deliveries (next_at) WHERE status = 'pending';
CREATE INDEX notify_deliveries_channel ON notify_deliveries (channel_id, id);
CREATE TABLE notify_attempts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id INTEGER NOT NULL REFERENCES notify_deliveries (id) ON DELETE CASCADE,
    channel_id  INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    at          REAL NOT NULL,
    ok          INTEGER NOT NULL,
    status      INTEGER,
    latency_ms  REAL NOT NULL,
    response    TEXT,
    error       TEXT
);
CREATE INDEX notify_attempts_delivery ON notify_attempts (delivery_id, id);
CREATE INDEX notify_attempts_channel ON notify_attempts (channel_id, id)
