-- Jobs may require agent labels ("gpu=true,region=eu", sorted; '' for none).
ALTER TABLE jobs ADD COLUMN labels TEXT NOT NULL DEFAULT '';
