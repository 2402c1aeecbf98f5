"""The SQLite store's text index for job searches (`q=`): an FTS5 table of trigrams (migration 0021).

A search matched every row of `jobs` with LIKE, newest first, until it had a page: behind a backlog
of 500,000 jobs that do not match, a page read all of them (0.35-5 s at 1.4 M). `job_search` holds
each job's name, task and tags as trigrams (contentless, no positions: the smallest FTS5 index), so
a search reads the jobs having every trigram of the text, newest first, and checks each with the
same LIKE as before (the index only finds candidates; the result is what LIKE says).

The index is filled after the commit, not in the job's transaction: FTS5 costs 10-50 us a row
(a 10,000-job batch took 220-530 ms more, measured beside 24 ms without), a price the submit path
must not pay. `job_search_upto` says up to which job id it is filled; ids only grow, so a search
reads the index up to there and checks the few newer jobs one by one. The store's indexer fills it
`SLICE` jobs a write, as the writer has time; the triggers keep what is indexed right when a job is
deleted (retention) or its name, task or tags change, and a restore indexes the archived jobs it puts
back below `upto` itself (index_restored: no insert trigger, migration 0023). Each of those writes adds
a segment to the index; the indexer merges them a few pages a write (merge_step), never a purge or a
submit (migration 0024).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

SLICE = 500  # jobs indexed per write: about 10 ms of the writer, so other writes go between slices
MERGE_PAGES = 8  # pages of segment merging per write (FTS5 'merge'): 17 ms median, 89 ms at most at load 8
BODY = "name || ' ' || task || ' ' || tags"  # what the triggers of migration 0021 index, the same text

UPTO = "SELECT upto FROM job_search_upto"
STATE = "SELECT (SELECT upto FROM job_search_upto), (SELECT max(id) FROM jobs)"


def index_slice(conn: sqlite3.Connection, limit: int = SLICE) -> tuple[int, int]:
    """Index the next `limit` jobs after `upto` (inside the caller's transaction): (how many, the new upto)."""
    upto = conn.execute(UPTO).fetchone()[0]
    row = conn.execute(
        "SELECT count(*), max(id) FROM (SELECT id FROM jobs WHERE id > ? ORDER BY id LIMIT ?)", (upto, limit)
    ).fetchone()
    if not row[0]:
        return 0, int(upto)
    conn.execute(
        f"INSERT INTO job_search (rowid, body) SELECT id, {BODY} FROM jobs WHERE id > ? AND id <= ?", (upto, row[1])
    )
    conn.execute("UPDATE job_search_upto SET upto = ?", (row[1],))
    return int(row[0]), int(row[1])


def merge_step(conn: sqlite3.Connection) -> bool:
    """Merge MERGE_PAGES pages of the index's segments (inside the caller's transaction): whether there
    was any to merge. FTS5 writes a segment per transaction that changed the index and never merges
    them itself (automerge 0, migration 0024): a search reads every segment, so the indexer merges."""
    before = conn.total_changes
    conn.execute("INSERT INTO job_search (job_search, rank) VALUES ('merge', ?)", (MERGE_PAGES,))
    return conn.total_changes - before >= 2  # FTS5's sign that the merge did some work


def segments(conn: sqlite3.Connection) -> int | None:
    """How many segments the index has, read from FTS5's structure record without writing: row 10 of
    job_search_data is a 4-byte change cookie, FTS5's 4-byte v2 marker (newer versions), then
    varints: levels, segments. None if it cannot be read (the caller then merges to find out)."""
    row = conn.execute("SELECT block FROM job_search_data WHERE id = 10").fetchone()
    if row is None:
        return 0  # nothing indexed yet
    block = row[0]
    if not isinstance(block, bytes) or len(block) < 6:
        return None
    at = 8 if block[4:8] == b"\xff\x00\x00\x01" else 4
    values: list[int] = []
    value = 0
    while len(values) < 2 and at < len(block):
        value = (value << 7) | (block[at] & 0x7F)
        if not block[at] & 0x80:
            values.append(value)
            value = 0
        at += 1
    return values[1] if len(values) == 2 else None


def index_restored(conn: sqlite3.Connection, ids: Sequence[int]) -> None:
    """Index the jobs just inserted with ids up to `upto` (archived jobs put back): the indexer only
    reads ids after it. New jobs' ids are all above it, so a submit pays one look-up."""
    if not ids:
        return
    upto = conn.execute(UPTO).fetchone()[0]
    below = [i for i in ids if i <= upto]
    for k in range(0, len(below), 500):
        chunk = below[k : k + 500]
        conn.execute(f"INSERT INTO job_search (rowid, body) SELECT id, {BODY} FROM jobs WHERE id IN "
                     f"({', '.join('?' * len(chunk))})", chunk)  # fmt: skip


def index_all(conn: sqlite3.Connection) -> None:
    """Index every job not yet indexed, merged into one segment, as the indexer of a store that ran
    would leave it (a store filled in SQL, outside the store: benches, tests)."""
    conn.execute("BEGIN")
    while index_slice(conn, 100_000)[0]:
        pass
    conn.execute("INSERT INTO job_search (job_search) VALUES ('optimize')")
    conn.execute("COMMIT")


def match_query(text: str) -> str | None:
    """The FTS5 query finding the candidates of a search for `text`: each of its trigrams (every
    third, and the last), quoted; None when the text has none (under 3 characters: LIKE scans)."""
    text = text.strip()
    if len(text) < 3:
        return None
    starts = sorted({*range(0, len(text) - 2, 3), len(text) - 3})
    return " ".join('"' + text[i : i + 3].replace('"', '""') + '"' for i in starts)


def search_rows(
    c: sqlite3.Connection,
    select: str,
    where: list[str],
    params: list[Any],
    query: str,
    descending: bool,
    after: int | None,
    limit: int,
    id_of: Any,
    job_id: int | None = None,
) -> list[Any]:
    """A page in id order of a search: the jobs newer than the index's `upto` checked one by one,
    the rest from the index's candidates in rowid order (both read lazily, `limit` at most each).
    `where`/`params` hold the whole filter, the search's LIKE included (the check)."""
    upto = c.execute(UPTO).fetchone()[0]
    cmp, direction = ("<", "DESC") if descending else (">", "ASC")
    cursor = [f"jobs.id {cmp} ?"] if after is not None else []
    cursor_params = [after] if after is not None else []
    tail = f"{select} WHERE jobs.id > ? AND {' AND '.join([*where, *cursor])} ORDER BY jobs.id {direction} LIMIT ?"
    source = select.replace(" FROM jobs", " FROM job_search CROSS JOIN jobs ON jobs.id = job_search.rowid")
    indexed = (
        f"{source} WHERE job_search MATCH ? AND job_search.rowid <= ? "
        + "".join(f"AND {w} " for w in [*where, *(f"job_search.rowid {cmp} ?" for _ in cursor)])
        + f"ORDER BY job_search.rowid {direction} LIMIT ?"
    )
    parts: list[list[Any]] = [
        c.execute(tail, [upto, *params, *cursor_params, limit]).fetchall(),
        c.execute(indexed, [query, upto, *params, *cursor_params, limit]).fetchall(),
    ]
    if job_id is not None:  # the search's text is also an id: that job, whatever its text
        one = f"{select} WHERE jobs.id = ? AND {' AND '.join([*where, *cursor])}"
        parts.append(c.execute(one, [job_id, *params, *cursor_params]).fetchall())
    rows = {id_of(r): r for part in parts for r in part}
    return [rows[i] for i in sorted(rows, reverse=descending)[:limit]]


def search_count_sql(where: list[str], params: list[Any], query: str) -> tuple[str, list[Any]]:
    """A count of a search's matches (a text that is no id): the jobs newer than the index checked,
    plus the index's candidates checked."""
    terms = " AND ".join(where)
    sql = (
        f"SELECT (SELECT count(*) FROM jobs WHERE jobs.id > (SELECT upto FROM job_search_upto) AND {terms}) + "
        f"(SELECT count(*) FROM job_search CROSS JOIN jobs ON jobs.id = job_search.rowid WHERE job_search MATCH ? "
        f"AND job_search.rowid <= (SELECT upto FROM job_search_upto) AND {terms})"
    )
    return sql, [*params, query, *params]
