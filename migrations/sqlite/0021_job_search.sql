-- A text index for job searches (q=): each job's name, task and tags as trigrams (FTS5, contentless,
-- no positions). core/store/_sqlite_search.py fills it after the commit, up to job_search_upto's id
-- (the ids of new jobs only grow), and checks every candidate with the search's LIKE; the triggers keep the indexed
-- jobs right when one is deleted or its text changes (a contentless FTS5 row is deleted by giving
-- its indexed text again). Trigger bodies stay on one line: the migration runner splits at ";" + newline.
CREATE VIRTUAL TABLE job_search USING fts5(body, tokenize = 'trigram', content = '', detail = none);
CREATE TABLE job_search_upto (upto INTEGER NOT NULL);
INSERT INTO job_search_upto (upto) VALUES (0);
CREATE TRIGGER job_search_delete AFTER DELETE ON jobs WHEN old.id <= (SELECT upto FROM job_search_upto)
BEGIN INSERT INTO job_search (job_search, rowid, body) VALUES ('delete', old.id, old.name || ' ' || old.task || ' ' || old.tags); END;
CREATE TRIGGER job_search_update AFTER UPDATE OF name, task, tags ON jobs WHEN old.id <= (SELECT upto FROM job_search_upto) AND (old.name IS NOT new.name OR old.task IS NOT new.task OR old.tags IS NOT new.tags)
BEGIN INSERT INTO job_search (job_search, rowid, body) VALUES ('delete', old.id, old.name || ' ' || old.task || ' ' || old.tags); INSERT INTO job_search (rowid, body) VALUES (new.id, new.name || ' ' || new.task || ' ' || new.tags); END;
-- an insert below upto (archived jobs put back with their ids) is indexed at once
CREATE TRIGGER job_search_insert AFTER INSERT ON jobs WHEN new.id <= (SELECT upto FROM job_search_upto)
BEGIN INSERT INTO job_search (rowid, body) VALUES (new.id, new.name || ' ' || new.task || ' ' || new.tags); END
