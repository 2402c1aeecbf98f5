-- Jobs may require agent labels ("gpu=true,region=eu", sorted; '' for none), as in SQLite's 0002.
ALTER TABLE jobs ADD COLUMN labels text NOT NULL DEFAULT '';
