"""How JobDeck writes a time for people: always with its zone's abbreviation ("2026-12-02 02:00:00
CET"), in the viewer's zone (local or UTC) or in a schedule's own zone. One place, so the CLI, the
console and the dashboard say the same thing; the API itself speaks ISO 8601 UTC."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def zone(name: str | None) -> tzinfo:
    """A zone by name: "UTC", an IANA name ("Europe/Paris"), or None / "local" for this machine's."""
    if not name or name == "local":
        local = datetime.now().astimezone().tzinfo
        return local if local is not None else UTC
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def epoch(value: str | float | None) -> float | None:
    """An ISO 8601 time (as the API writes them) or Unix seconds, as Unix seconds; None if neither."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def abbreviation(ts: float, tz: tzinfo) -> str:
    """The zone's abbreviation at that instant: CET or CEST, EST or EDT, UTC; "+0530" style if it has none."""
    d = datetime.fromtimestamp(ts, tz)
    name = d.tzname() or ""
    if name and not name.startswith(("+", "-")):
        return name
    offset = d.utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    return f"UTC{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"


def stamp(value: str | float | None, tz: tzinfo, *, date: bool = True, seconds: bool = True) -> str:
    """ "2026-12-02 02:00:00 CET" (or "02:00 CET" without date and seconds); "-" for no time."""
    ts = epoch(value)
    if ts is None:
        return "-"
    fmt = ("%Y-%m-%d " if date else "") + ("%H:%M:%S" if seconds else "%H:%M")
    return f"{datetime.fromtimestamp(ts, tz).strftime(fmt)} {abbreviation(ts, tz)}"


def in_two_zones(value: str | float | None, first: tzinfo, second: tzinfo, **kw: bool) -> str:
    """A time in `first` with `second` beside it when they differ: "02:00:00 CET (01:00:00 UTC)"."""
    one = stamp(value, first, **kw)
    ts = epoch(value)
    if ts is None:
        return one
    a, b = datetime.fromtimestamp(ts, first), datetime.fromtimestamp(ts, second)
    if a.utcoffset() == b.utcoffset() and a.tzname() == b.tzname():
        return one
    return f"{one} ({stamp(value, second, **kw)})"


def duration(seconds: float | None) -> str:
    """A duration people read at a glance, the same in every front end: 850ms, 4.2s, 12s, 4m05s,
    3h12m, 2d04h; '' for none."""
    if seconds is None:
        return ""
    s = max(0.0, seconds)
    if s < 0.9995:  # the thresholds are where the rounded text would spill into the next unit
        return f"{s * 1000:.0f}ms"
    if s < 9.95:
        return f"{s:.1f}s"
    if s < 59.5:
        return f"{s:.0f}s"
    if (r := round(s)) < 3600:
        return f"{r // 60}m{r % 60:02d}s"
    if (m := round(s / 60)) < 1440:
        return f"{m // 60}h{m % 60:02d}m"
    h = round(s / 3600)
    return f"{h // 24}d{h % 24:02d}h"
