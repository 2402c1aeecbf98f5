-- No trigger on an insert into jobs: whatever its WHEN says, an AFTER INSERT trigger on jobs made every
-- inserted row cost ~25 % more (a 10,000-job workflow's INSERT: 203 -> 156 ms of CPU without the two,
-- 2 ms with either one alone). The store's one insert of jobs (core/store/sqlite.py insert_job_rows)
-- counts them in job_counts, one upsert per (queue, state), and indexes for search the ones below
-- job_search_upto (archived jobs put back with their ids), as the triggers did.
-- jobs_queue_state goes too: its one reader, the running count of a queue's `waiting_for`, reads
-- job_counts; every inserted row wrote it (11 ms of CPU in that INSERT).
DROP TRIGGER job_counts_insert;
DROP TABLE job_counts_by_trigger;
DROP TRIGGER job_search_insert;
DROP INDEX jobs_queue_state
