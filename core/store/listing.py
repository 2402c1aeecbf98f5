"""Sorting, searching and counting job lists: the parts both stores share (each writes its own SQL
with these pieces). Pages are keyset pages on (sort value, id), never OFFSET, so the hundredth page
of a sorted million-job list costs what the first does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.errors import InvalidInput
from core.model import Job

# sort name -> the SQL expression it orders by (an index of the same expression serves each).
# `created` is the id order: ids are given in submit order, and jobs_* indexes end with id.
SORTS: dict[str, str] = {
    "id": "id",
    "created": "id",
    "priority": "priority",
    "state": "state",
    "queue": "queue",
    "duration": "coalesce(finished_at - started_at, -1)",
}
_KINDS: dict[str, Callable[[str], Any]] = {"priority": int, "state": str, "queue": str, "duration": float}


@dataclass(frozen=True, slots=True)
class JobOrder:
    """How a job list is ordered, and where the page starts: after (value, id) of the last row seen."""

    sort: str = "id"
    descending: bool = True
    after: tuple[Any, int] | None = None

    @property
    def by_id(self) -> bool:
        return SORTS[self.sort] == "id"


def parse_order(sort: str, order: str, cursor: str | None) -> JobOrder:
    """The order a request asks for; a 422 naming the field for an unknown sort, order or cursor."""
    if sort not in SORTS:
        raise InvalidInput(f"sort: {sort!r} is not one of {', '.join(SORTS)}", field="sort")
    if order not in ("asc", "desc"):
        raise InvalidInput(f"order: {order!r} is not asc or desc", field="order")
    after: tuple[Any, int] | None = None
    if cursor not in (None, ""):
        after = _parse_cursor(sort, str(cursor))
    return JobOrder(sort, order == "desc", after)


def _parse_cursor(sort: str, raw: str) -> tuple[Any, int]:
    try:
        if SORTS[sort] == "id":
            return (int(raw), int(raw))
        value, _, last_id = raw.rpartition(":")
        return (_KINDS[sort](value), int(last_id))
    except ValueError:
        raise InvalidInput(
            f"cursor: {raw!r} is not a cursor of a sort={sort} list; pass the next_cursor of the page before",
            field="cursor",
        ) from None


def next_cursor(jobs: list[Job], limit: int, order: JobOrder) -> int | str | None:
    """The cursor of the page after `jobs` (None when this was the last): the last id for id order
    (as before sorting existed), else "value:id"."""
    if len(jobs) < limit or not jobs:
        return None
    last = jobs[-1]
    if order.by_id:
        return last.id
    return f"{sort_value(last, order.sort)}:{last.id}"


def sort_value(job: Job, sort: str) -> Any:
    """A job's value for a sort, as the SQL expression computes it."""
    if sort == "duration":
        if job.finished_at is None or job.started_at is None:
            return -1.0
        return job.finished_at - job.started_at
    return getattr(job, SORTS[sort])


def order_sql(order: JobOrder, arg: Callable[[Any], str]) -> tuple[str | None, str]:
    """(the keyset condition or None, the ORDER BY clause) for `order`; `arg` adds a parameter."""
    expr = SORTS[order.sort]
    direction = "DESC" if order.descending else "ASC"
    cmp = "<" if order.descending else ">"
    where = None
    if order.after is not None:
        value, last_id = order.after
        where = f"id {cmp} {arg(last_id)}" if order.by_id else f"({expr}, id) {cmp} ({arg(value)}, {arg(last_id)})"
    by = f"id {direction}" if order.by_id else f"{expr} {direction}, id {direction}"
    return where, by


def search_sql(text: str, arg: Callable[[Any], str], *, like: str, task: str, tags: str) -> str:
    """A condition matching jobs whose id is `text`, or whose name, task (command, URL, function,
    args, kwargs, env) or tags contain it, case-insensitively. Alone it scans; each store's text index
    (job_search) finds a search's candidates, and this checks them."""
    pattern = search_pattern(text)
    # one parameter per use, in the order they appear: SQLite's ? placeholders are positional
    parts = [f"id = {arg(job_id)}"] if (job_id := searched_id(text)) is not None else []
    parts += [f"{column} {like} {arg(pattern)} ESCAPE '\\'" for column in ("name", task, tags)]
    return "(" + " OR ".join(parts) + ")"


def searched_id(text: str) -> int | None:
    """The job id a search's text also names (search_sql matches it), else None."""
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 19 else None


def search_pattern(text: str) -> str:
    """The LIKE pattern of a search: `text` anywhere, its wildcards and the escape taken literally."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
