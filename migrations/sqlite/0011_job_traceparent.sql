-- The W3C trace context of a job's submit (core/obs/tracing.py): the spans of its wait, claim, run and
-- result are its children, on whichever node or agent they happen; the API shows its trace id.
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
