-- Jobs per (queue, state), kept by statement triggers in the transaction of every insert, state
-- change and delete, whoever writes (the engine on any node, retention, a restore): /v1/stats,
-- /v1/queues and the dispatcher's running counts read a few rows instead of counting a million jobs
-- (55-60 ms at 1M). Rows are deltas, only ever inserted, so writers on several nodes never wait on
-- one another's counter rows (nor deadlock on them); a reader sums them, and the store's maintenance
-- folds them into one row per (queue, state) every few seconds (_pg_counts.py).
CREATE TABLE job_counts (
    queue text   NOT NULL,
    state text   NOT NULL,
    n     bigint NOT NULL
);
INSERT INTO job_counts (queue, state, n) SELECT queue, state, count(*) FROM jobs GROUP BY queue, state;

CREATE FUNCTION job_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_counts (queue, state, n) SELECT queue, state, count(*) FROM new_rows GROUP BY queue, state;
    RETURN NULL;
END $$;
CREATE FUNCTION job_counts_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_counts (queue, state, n) SELECT queue, state, -count(*) FROM old_rows GROUP BY queue, state;
    RETURN NULL;
END $$;
-- Most updates change no state (lease extensions, output): only rows whose state or queue moved count.
CREATE FUNCTION job_counts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_counts (queue, state, n)
    SELECT queue, state, sum(d) FROM (
        SELECT o.queue, o.state, -1 AS d FROM old_rows o JOIN new_rows w ON w.id = o.id
        WHERE (o.state, o.queue) IS DISTINCT FROM (w.state, w.queue)
        UNION ALL
        SELECT w.queue, w.state, 1 FROM old_rows o JOIN new_rows w ON w.id = o.id
        WHERE (o.state, o.queue) IS DISTINCT FROM (w.state, w.queue)
    ) moved GROUP BY queue, state HAVING sum(d) <> 0;
    RETURN NULL;
END $$;
CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION job_counts_inserted();
CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION job_counts_deleted();
CREATE TRIGGER job_counts_update AFTER UPDATE ON jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION job_counts_updated();
