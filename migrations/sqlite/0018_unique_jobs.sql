-- Unique jobs (POST /v1/jobs `unique`): at most one job holds a key at a time. The partial unique
-- index is the guard (a second insert of a held key is refused by the database, whatever node or
-- task tries it); a key lets go when unique_held turns 0: as its job ends (scope active: the
-- trigger below, whichever statement ends it) or once unique_until passed (scope window: the next
-- submit of the key, or the retention sweep, clears it first).
ALTER TABLE jobs ADD COLUMN unique_key TEXT;
ALTER TABLE jobs ADD COLUMN unique_until REAL;
ALTER TABLE jobs ADD COLUMN unique_held INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX jobs_unique ON jobs (unique_key) WHERE unique_held = 1;
CREATE TRIGGER jobs_unique_release AFTER UPDATE OF state ON jobs
    WHEN NEW.unique_held = 1 AND NEW.unique_until IS NULL
     AND NEW.state IN ('succeeded', 'dead', 'cancelled', 'skipped')
BEGIN UPDATE jobs SET unique_held = 0 WHERE id = NEW.id; END;
