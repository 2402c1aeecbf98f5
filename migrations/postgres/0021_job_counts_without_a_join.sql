-- The update trigger of job_counts (0010) joined the statement's old and new rows on id to find the
-- rows whose state or queue moved. plpgsql keeps that query's plan for the session: a connection that
-- had run small updates (claims, results) kept a nested loop, and one statement moving 10,000 jobs
-- (a fan-out root's result releasing its children, a bulk cancel) then compared 10,000 x 10,000 rows,
-- twice: 30-90 s inside the transaction, everything behind it waiting. Counting the old rows out and
-- the new rows in, without a join, gives the same deltas (a row whose state and queue did not move adds
-- -1 and +1 to one group, which nets to 0 and is not written) in one pass whatever the plan.
CREATE OR REPLACE FUNCTION job_counts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_counts (queue, state, n)
    SELECT queue, state, sum(d) FROM (
        SELECT queue, state, -1 AS d FROM old_rows
        UNION ALL
        SELECT queue, state, 1 FROM new_rows
    ) moved GROUP BY queue, state HAVING sum(d) <> 0;
    RETURN NULL;
END $$;
