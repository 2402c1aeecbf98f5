-- A text index for job searches (q=), as SQLite's job_search (sqlite/0021): each job's name, task and
-- tags once, in a table of their own, with a trigram index. Not an index on jobs: a jobs row is
-- rewritten by every claim, lease and result, and a GIN entry of a row that moved would be written
-- again each time; job_search is written when a job is inserted and deleted with it, never updated.
-- The GIN index's first column is the id's block of 16,384 (job_id >> 14, btree_gin): a page of a
-- search reads the newest blocks first, each its own index scan, and stops at a full page, so a
-- search reads about the matches it shows, not every match in the store (core/store/_pg_search.py).
-- The search's own condition (search_sql) is still checked on each job: this only finds candidates.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;

CREATE TABLE job_search (
    job_id bigint PRIMARY KEY,
    body   text NOT NULL
);
INSERT INTO job_search (job_id, body) SELECT id, name || E'\n' || task::text || E'\n' || tags::text FROM jobs;
-- The pending list of a GIN index is read whole by every scan, and a page scans one index block after
-- another: 256 kB keeps it short (the default, 4 MB, holds the entries of ~20,000 jobs).
-- An extension lives in one schema of the database: the first JobDeck schema to migrate creates
-- pg_trgm in its own, and a second JobDeck in another schema of the same database finds it there, off
-- its search_path. So the operator class is named with the schema pg_trgm is in, wherever that is
-- (btree_gin's bigint class is the type's default, found in any schema).
DO $$
BEGIN
    EXECUTE format('CREATE INDEX job_search_text ON job_search USING gin ((job_id >> 14), body %I.gin_trgm_ops) '
                   'WITH (gin_pending_list_limit = 256)',
                   (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                    WHERE e.extname = 'pg_trgm'));
END $$;

-- Kept in the transaction of every insert and delete of jobs, whoever writes (as job_counts, 0010).
CREATE FUNCTION job_search_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_search (job_id, body) SELECT id, name || E'\n' || task::text || E'\n' || tags::text FROM new_rows;
    RETURN NULL;
END $$;
CREATE FUNCTION job_search_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_search s USING old_rows o WHERE s.job_id = o.id;
    RETURN NULL;
END $$;
-- No write of JobDeck changes a job's name, task or tags; should one, its text follows.
CREATE FUNCTION job_search_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE job_search SET body = new.name || E'\n' || new.task::text || E'\n' || new.tags::text WHERE job_id = new.id;
    RETURN NULL;
END $$;
CREATE TRIGGER job_search_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION job_search_inserted();
CREATE TRIGGER job_search_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION job_search_deleted();
CREATE TRIGGER job_search_update AFTER UPDATE OF name, task, tags ON jobs FOR EACH ROW
    WHEN (old.name IS DISTINCT FROM new.name OR old.task::text IS DISTINCT FROM new.task::text
          OR old.tags::text IS DISTINCT FROM new.tags::text)
    EXECUTE FUNCTION job_search_updated();
