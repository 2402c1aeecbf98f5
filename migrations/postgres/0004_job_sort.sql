-- Sorted job lists (GET /v1/jobs?sort=priority|duration): the index gives the order a page at a
-- time (keyset on (value, id)), so a sorted first page is as fast at a million jobs as at ten.
-- `created` sorts by id (ids are given in submit order); state and queue have their indexes.
CREATE INDEX jobs_priority ON jobs (priority, id);
-- How long the last attempt ran; jobs that have not finished one count as -1 (last when longest first).
CREATE INDEX jobs_duration ON jobs ((coalesce(finished_at - started_at, -1)), id);
