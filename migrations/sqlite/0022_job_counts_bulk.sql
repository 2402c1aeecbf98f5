-- A big insert (a batch, a workflow: 100 jobs or more) counts its jobs itself, one upsert per
-- (queue, state), instead of the insert trigger's upsert per row (150-250 ms of CPU in a 10,000-job
-- insert of ~600). The writer sets `counting` to 0 for that INSERT and back to 1 after it, in the same
-- transaction (core/store/sqlite.py _insert_jobs), so a commit always leaves it at 1 and every other
-- insert (archive restore, a future writer) is counted by the trigger as before.
-- Trigger bodies stay on one line: the migration runner splits statements at ";" + newline.
CREATE TABLE job_counts_by_trigger (counting INTEGER NOT NULL);
INSERT INTO job_counts_by_trigger (counting) VALUES (1);
DROP TRIGGER job_counts_insert;
CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs WHEN (SELECT counting FROM job_counts_by_trigger) = 1
BEGIN INSERT INTO job_counts (queue, state, n) VALUES (new.queue, new.state, 1) ON CONFLICT (queue, state) DO UPDATE SET n = n + 1; END
