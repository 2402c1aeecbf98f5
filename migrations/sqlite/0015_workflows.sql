-- Job dependencies and workflows (core/workflow.py). A job may belong to a workflow (with its ref
-- there), says what a parent ending dead or cancelled does to it, and keeps the count of its
-- parents that have not ended and the first parent that failed (the release decision reads both).
ALTER TABLE jobs ADD COLUMN workflow_id INTEGER;
ALTER TABLE jobs ADD COLUMN ref TEXT;
ALTER TABLE jobs ADD COLUMN on_parent_failure TEXT NOT NULL DEFAULT 'cancel';
ALTER TABLE jobs ADD COLUMN deps_left INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN dep_failed INTEGER;
CREATE INDEX jobs_workflow ON jobs (workflow_id, state) WHERE workflow_id IS NOT NULL;

-- One row per edge: child waits on parent.
CREATE TABLE job_deps (
    parent_id INTEGER NOT NULL,
    child_id  INTEGER NOT NULL,
    PRIMARY KEY (parent_id, child_id)
) WITHOUT ROWID;
CREATE INDEX job_deps_child ON job_deps (child_id, parent_id);

CREATE TABLE workflows (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    name             TEXT    NOT NULL,
    state            TEXT    NOT NULL,            -- running | succeeded | failed | cancelled
    total            INTEGER NOT NULL,
    queues           TEXT    NOT NULL,            -- its jobs' queues, comma-separated (access checks)
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    paused           INTEGER NOT NULL DEFAULT 0,
    created_at       REAL    NOT NULL,
    updated_at       REAL    NOT NULL,
    finished_at      REAL
);
CREATE INDEX workflows_state ON workflows (state, id);
