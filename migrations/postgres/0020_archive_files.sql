-- The archive's files as the store knows them, whichever node wrote them (core/retention.py): each
-- node archives into its own folder, and `jobdeck archive ls` on any node lists every node's files.
-- Written in the transaction that purges the jobs just appended to the file.
CREATE TABLE archive_files (
    node TEXT NOT NULL,        -- archive_node of the node that wrote it (default: its host name)
    folder TEXT NOT NULL,      -- its archive_dir there
    file TEXT NOT NULL,        -- jobs-YYYY-MM-DD.jsonl.gz
    day TEXT NOT NULL,
    jobs bigint NOT NULL,      -- records appended to it (a job archived again after a crash counts twice)
    bytes bigint NOT NULL,    -- its size after the last append
    first_job bigint NOT NULL,  -- the lowest and highest job id in it: where `archive show ID` looks
    last_job bigint NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (node, folder, file)
);
