-- Unique jobs (POST /v1/jobs `unique`): at most one job holds a key at a time. The partial unique
-- index is the guard (a second insert of a held key is refused by the database, on any node); a
-- key lets go when unique_held turns false: as its job ends (scope active: the trigger below,
-- whichever statement ends it) or once unique_until passed (scope window: the next submit of the
-- key, or the retention sweep, clears it first).
ALTER TABLE jobs ADD COLUMN unique_key text COLLATE "C",
                 ADD COLUMN unique_until float8,
                 ADD COLUMN unique_held boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX jobs_unique ON jobs (unique_key) WHERE unique_held;

CREATE FUNCTION jobs_unique_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.unique_held := false;
    RETURN NEW;
END $$;
CREATE TRIGGER jobs_unique_release BEFORE UPDATE OF state ON jobs FOR EACH ROW
    WHEN (NEW.unique_held AND NEW.unique_until IS NULL AND NEW.state IN ('succeeded', 'dead', 'cancelled', 'skipped'))
    EXECUTE FUNCTION jobs_unique_release();
