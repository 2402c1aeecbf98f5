-- Per-key flow control (core/flow.py). A job may carry a concurrency_key (the queue's key_concurrency
-- caps how many jobs of one key run at once) and a fairness_key (claims rotate between the keys of a
-- queue marked fair, which a job with a fairness key marks). fair_vtime and fair_shares hold the
-- rotation: how much each key was served (starts / weight), the queue's virtual time.
ALTER TABLE jobs ADD COLUMN concurrency_key TEXT;
ALTER TABLE jobs ADD COLUMN fairness_key TEXT;
ALTER TABLE queues ADD COLUMN key_concurrency INTEGER;
ALTER TABLE queues ADD COLUMN fairness_weights TEXT;
ALTER TABLE queues ADD COLUMN fair INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queues ADD COLUMN fair_vtime REAL NOT NULL DEFAULT 0;
-- Running jobs per key (the per-key limit's count), and the queued jobs of each key in claim order
-- (a claim walks each key's head: a key with 100,000 waiting is not read past). They cover what a claim
-- reads of a candidate (core/flow.py CANDIDATE_COLUMNS, and labels): a wide job row is read only once picked.
CREATE INDEX jobs_running_key ON jobs (queue, concurrency_key) WHERE state = 'running' AND concurrency_key IS NOT NULL;
CREATE INDEX jobs_claim_fair ON jobs (queue, fairness_key, sort_key, id, priority, concurrency_key, labels) WHERE state = 'queued' AND fairness_key IS NOT NULL;
CREATE INDEX jobs_claim_key ON jobs (queue, concurrency_key, sort_key, id, priority, fairness_key, labels) WHERE state = 'queued' AND concurrency_key IS NOT NULL;
CREATE TABLE fair_shares (
    queue   TEXT NOT NULL,
    key     TEXT NOT NULL,
    served  REAL NOT NULL,
    last_at REAL NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;
