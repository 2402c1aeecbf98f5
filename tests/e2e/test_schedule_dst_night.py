"""A whole `jobdeck up` process under libfaketime (Debian `faketime`), its clock started just before
New York's fall-back night (2026-11-01, 02:00 EDT -> 01:00 EST) and run 30 times faster: real cron
firing, catch-up `all`, across the hour that happens twice."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.client import JobDeckClient
from tests.conftest import ServerProcess, fire_times, spawn_jobdeck, until

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
START = "2026-11-01 05:48:00"  # UTC: 01:48 EDT, twelve minutes before the clocks go back
SPEED = 30
BACK = datetime(2026, 11, 1, 6, 0, tzinfo=UTC).timestamp()  # 02:00 EDT = 01:00 EST
pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not LIBFAKETIME.exists(), reason="libfaketime missing (apt-get install faketime)"),
]


@pytest.fixture
def night(tmp_path: Path) -> Iterator[ServerProcess]:
    env = {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": f"@{START} x{SPEED}", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
           "JOBDECK_WEB": "0"}  # fmt: skip
    node = spawn_jobdeck(tmp_path / "data", "up", "--no-web", "--slots", "4", env=env)
    try:
        yield node
    finally:
        node.proc.terminate()
        try:
            node.proc.wait(15)
        except Exception:
            node.proc.kill()


async def test_a_set_hour_fires_once_and_every_minute_fires_straight_through_the_night(night: ServerProcess) -> None:
    job = {"task": {"kind": "python", "function": "agents.builtin:noop"}, "queue": "night"}
    async with JobDeckClient(night.url) as c:
        policy = {"timezone": "America/New_York", "overlap": "allow", "catch_up": "all", "catch_up_window": 3600}
        one_am = await c.create_schedule({"name": "one-am", "cron": "* 1 * * *", **policy, "job": job})
        minutely = await c.create_schedule({"name": "minutely", "cron": "* * * * *", **policy, "job": job})
        created = datetime.fromisoformat(one_am["created_at"]).timestamp()
        assert BACK - 900 < created < BACK - 60, f"the node's clock is not the faked one: {one_am['created_at']}"
        marks = (await c.preview(one_am["id"], n=3))["fire_times"]
        assert all("dst_overlap" in f["marks"] for f in marks[:2]), marks  # 01:5x EDT happens again as EST

        async def through_the_night() -> list[float] | None:
            got = await fire_times(c, minutely["id"])
            return got if got and max(got) >= BACK + 300 else None

        every = sorted(await until(through_the_night, 90, "the minutely schedule to fire 5 minutes past 06:00 UTC"))
        set_hour = sorted(await fire_times(c, one_am["id"]))
        stored = await c.get_schedule(one_am["id"])
    assert every == [every[0] + 60 * i for i in range(len(every))], f"minutes missing or twice: {every}"
    assert every[0] < BACK < every[-1], "the minutely schedule fired on both sides of the change"
    assert set_hour == [t for t in every if t < BACK], (
        f"'* 1 * * *' fires in the first 01:xx only (EDT), never in the repeated one (EST): {set_hour}"
    )
    next_fire = datetime.fromisoformat(stored["next_fire_at"])
    assert next_fire.isoformat() == "2026-11-02T06:00:00+00:00", f"next: 01:00 EST the next night, got {next_fire}"
