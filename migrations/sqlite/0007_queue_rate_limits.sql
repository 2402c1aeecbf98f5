-- A queue may limit how many of its jobs start per second (core/flow.py): a token bucket of
-- rate_burst starts refilled at rate_limit per second; rate_tokens were left at rate_at.
ALTER TABLE queues ADD COLUMN rate_limit REAL;
ALTER TABLE queues ADD COLUMN rate_burst INTEGER;
ALTER TABLE queues ADD COLUMN rate_tokens REAL;
ALTER TABLE queues ADD COLUMN rate_at REAL;
