-- Schedule policies (core/schedule/policy.py): overlap, catch-up and the rest, as one JSON value
-- (new policies need no migration), and what they did: runs skipped, fire times missed, the
-- consecutive failures that pause a schedule and the reason it paused itself.
ALTER TABLE schedules ADD COLUMN policy json NOT NULL DEFAULT '{}';
ALTER TABLE schedules ADD COLUMN failures integer NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN paused_reason text;
ALTER TABLE schedules ADD COLUMN skipped integer NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN missed integer NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN last_skipped_at double precision;

-- The runs of a schedule that have not ended: read on every fire time and whenever one ends.
CREATE INDEX jobs_schedule_active ON jobs (schedule_id, fire_time)
    WHERE schedule_id IS NOT NULL AND state IN ('blocked', 'scheduled', 'queued', 'running', 'failed', 'paused');
