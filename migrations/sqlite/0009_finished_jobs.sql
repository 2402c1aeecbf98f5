-- Retention (core/retention.py) reads finished jobs oldest first, in small batches: an index on
-- their finish time, over finished jobs only, so a batch never scans the jobs still waiting or running.
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state IN ('succeeded', 'dead', 'cancelled');
