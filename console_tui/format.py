"""How the console writes times, durations, states and sparklines: one place, so snapshot tests
can mask what changes from run to run (`Display.masked`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo

from rich.text import Text

from core import timetext

STATE_STYLES = {
    "queued": "cyan",
    "scheduled": "blue",
    "running": "bold yellow",
    "succeeded": "green",
    "failed": "red",
    "dead": "bold red",
    "cancelled": "dim",
    "paused": "magenta",
    "blocked": "dim cyan",
}
SPARK = "▁▂▃▄▅▆▇█"


def epoch(value: str | float | None) -> float | None:
    """An ISO 8601 time (as the API writes them) or Unix seconds, as Unix seconds."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(value).timestamp()


def state_text(state: str, cancel_requested: bool = False) -> Text:
    """A job state, coloured; a running job asked to stop says so."""
    label = "cancelling" if cancel_requested and state == "running" else state
    return Text(label, style=STATE_STYLES.get(state, ""))


def sparkline(values: Sequence[float]) -> str:
    """Values as block characters scaled to their maximum (an empty series is a flat line)."""
    top = max(values, default=0)
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))] for v in values)


@dataclass
class Display:
    """Formats what depends on the clock. `masked` writes a fixed placeholder instead, for
    snapshot tests that must not change from run to run."""

    masked: bool = False
    clock: Callable[[], float] = field(default=time.time)
    utc: bool = False  # times in UTC instead of this machine's zone (`z` toggles)

    @property
    def zone(self) -> tzinfo:
        """The zone times are shown in."""
        return timetext.zone("UTC" if self.utc else "local")

    def age(self, since: float | None) -> str:
        """How long ago `since` was."""
        if since is None:
            return "-"
        return "··" if self.masked else timetext.duration(self.clock() - since)

    def until(self, when: float | None) -> str:
        """How long until `when` ("in 4m05s"), or how long ago it was."""
        if when is None:
            return "-"
        if self.masked:
            return "··"
        delta = when - self.clock()
        return f"in {timetext.duration(delta)}" if delta >= 0 else f"{timetext.duration(-delta)} ago"

    def clock_time(self, when: float | None) -> str:
        """A wall-clock time to the second, in the viewer's zone, with its abbreviation."""
        if when is None:
            return "-"
        return "hh:mm:ss ZZZ" if self.masked else timetext.stamp(when, self.zone, date=False)

    def date_time(self, when: float | None, zone_name: str | None = None) -> str:
        """A date and time to the second with its zone's abbreviation: in `zone_name` (a schedule's
        zone) when given, else the viewer's."""
        if when is None:
            return "-"
        tz = timetext.zone(zone_name) if zone_name else self.zone
        return "yyyy-mm-dd hh:mm:ss ZZZ" if self.masked else timetext.stamp(when, tz)

    def other_zone(self, when: float | None, zone_name: str) -> str:
        """`when` in the viewer's zone, or in UTC when the viewer's zone shows it as `zone_name` does;
        with its date only when that differs from the date in `zone_name`."""
        if when is None or self.masked:
            return "-" if when is None else "hh:mm:ss ZZZ"
        tz = timetext.zone(zone_name)
        other = self.zone if timetext.stamp(when, tz) != timetext.stamp(when, self.zone) else timetext.zone("UTC")
        same_day = timetext.stamp(when, tz)[:10] == timetext.stamp(when, other)[:10]
        return timetext.stamp(when, other, date=not same_day)

    def duration(self, seconds: float | None) -> str:
        if seconds is None:
            return "-"
        return "··" if self.masked else timetext.duration(seconds)

    def spark(self, values: Sequence[float]) -> str:
        return SPARK[0] * len(values) if self.masked else sparkline(values)

    def number(self, value: float) -> str:
        """A rate or count that moves with time."""
        return "··" if self.masked else f"{value:g}"
