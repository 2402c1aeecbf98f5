-- The search index (0021) no longer merges its segments inside whatever write touched it. FTS5 writes a
-- segment per transaction that changed it, and its automerge then merged segments in that transaction:
-- a purge of 10 jobs from a 300,000-job store (their text deleted by 0021's trigger) took up to 139 ms
-- and its commit up to 461 ms when a merge fell on it, against 7 and 17 ms with no text index at all,
-- and each such transaction held every claim and submit behind it (bench scale: 842 ms between two
-- claims while old jobs were archived). Merges are the store's indexer's work now, a few pages a write
-- with pauses between (core/store/_sqlite_search.py merge_step); crisismerge (a whole level at once when
-- it holds that many segments) is out of reach.
INSERT INTO job_search (job_search, rank) VALUES ('automerge', 0);
INSERT INTO job_search (job_search, rank) VALUES ('crisismerge', 1000)
