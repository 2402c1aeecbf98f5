-- The audit log: one row per mutating API call (allowed, refused or failed), written in the
-- same transaction as the change. Append-only: rows are never updated; only the retention
-- prune deletes (rows older than audit_retention_days).
CREATE TABLE audit_log (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          REAL NOT NULL,
    actor       TEXT NOT NULL,
    subject     TEXT NOT NULL,
    role        TEXT NOT NULL,
    via         TEXT NOT NULL,
    ip          TEXT,
    user_agent  TEXT,
    action      TEXT NOT NULL,
    target      TEXT,
    outcome     TEXT NOT NULL,
    message     TEXT,
    before      TEXT,
    after       TEXT
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_actor ON audit_log (actor, id);
CREATE TRIGGER audit_log_append_only BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END
