-- Why a job was cancelled or skipped, when a dependency did it: the parent whose failure ended it
-- (NULL: a person or the system ended it). Retrying that parent re-arms only such jobs, so a job a
-- person cancelled stays cancelled ("clear downstream" in core/workflow.py).
ALTER TABLE jobs ADD COLUMN ended_by_parent bigint;
UPDATE jobs SET ended_by_parent = dep_failed
 WHERE state IN ('cancelled', 'skipped') AND dep_failed IS NOT NULL
   AND (last_error LIKE 'parent job % ended dead or cancelled' OR last_error LIKE 'skipped: parent job %');
