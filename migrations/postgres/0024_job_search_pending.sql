-- A job's search text is written after its commit, not in it: 0023's insert trigger wrote job_search
-- and its trigram index in the insert's transaction, a third of a bulk submit's time. Now the insert's
-- transaction writes one row here per INSERT statement into jobs, the new jobs' ids (a 10,000-job batch:
-- one row), and each node's search indexer (core/store/_pg_search.py fill_pending) moves pending rows
-- into job_search, oldest first, one transaction for both, so a job is always in one of the two. Ids
-- commit out of order across nodes and transactions: a cursor over job ids would skip a job committed
-- late below it; a row per transaction cannot be skipped. A search reads job_search's candidates plus
-- the pending jobs, checked one by one, so it never misses a job just submitted.
CREATE TABLE job_search_pending (
    id  bigserial PRIMARY KEY,
    ids bigint[]  NOT NULL
);

CREATE OR REPLACE FUNCTION job_search_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_search_pending (ids) SELECT array_agg(id) FROM new_rows HAVING count(*) > 0;
    RETURN NULL;
END $$;
