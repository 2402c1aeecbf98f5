-- The audit log: one row per mutating API call (allowed, refused or failed), written in the
-- same transaction as the change. Append-only: UPDATE is refused; only the retention prune
-- deletes (rows older than audit_retention_days). See migrations/sqlite/0003_audit_log.sql.
CREATE TABLE audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          double precision NOT NULL,
    actor       text NOT NULL,
    subject     text NOT NULL,
    role        text NOT NULL,
    via         text NOT NULL,
    ip          text,
    user_agent  text,
    action      text NOT NULL,
    target      text,
    outcome     text NOT NULL,
    message     text,
    before      json,
    after       json
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_actor ON audit_log (actor, id);
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
