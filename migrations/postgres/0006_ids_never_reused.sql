-- Nothing to change here; the file keeps both engines' numbering in step with
-- migrations/sqlite/0006_ids_never_reused.sql (SQLite had no AUTOINCREMENT on jobs and schedules).
-- PostgreSQL never hands an id out twice already: jobs.id and schedules.id are identity columns
-- whose sequences only grow (the writer takes job ids with nextval, never max(id) + 1),
-- audit_log.id is GENERATED ALWAYS AS IDENTITY, and event seqs come from the event_seq counter
-- row, which a prune never lowers. tests/store/test_ids.py checks each on both stores.
SELECT 1;
