-- A queue may limit how many of its jobs start per second (core/flow.py): a token bucket of
-- rate_burst starts refilled at rate_limit per second; rate_tokens were left at rate_at. The
-- bucket lives in the row, so every node claiming from the queue shares it.
ALTER TABLE queues ADD COLUMN rate_limit double precision;
ALTER TABLE queues ADD COLUMN rate_burst integer;
ALTER TABLE queues ADD COLUMN rate_tokens double precision;
ALTER TABLE queues ADD COLUMN rate_at double precision;
