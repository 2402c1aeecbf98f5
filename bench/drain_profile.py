"""One I/O drain, and optionally its py-spy profile: `python -m bench.drain_profile [--store postgres]
[--jobs N] [--py-spy FILE]`.

The drain of bench/io_drain.py (Redis-PING jobs stored in a paused queue, then resumed; 32 slots) on
a fresh `jobdeck up` node (SQLite), or a `jobdeck server` with one remote `jobdeck agent` on a fresh
PostgreSQL schema. With --py-spy the node is recorded from the resume to the last success only (the
bench's --profile records a process's whole life, its start and the submits included), as raw
stacks in FILE, summarised by bench/profile.py. It is a diagnosis, not a figure for the table: one
run, no floor, no spread; run the bench for those.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from bench.io_drain import QUEUE, ping_job
from bench.profile import RATE, py_spy_path, summarize
from bench.report import load_average
from bench.server import CpuMeter, Process, Server, ServerOptions, jobdeck_agent, jobdeck_server
from bench.store import DEFAULT_PG_URL, DEFAULT_REDIS_URL, Backend
from bench.workload import BenchClient, open_paused_queue, submit_spread, wait_for_state

SLOTS = 32


@contextlib.asynccontextmanager
async def _node(store: str, opts: ServerOptions) -> AsyncIterator[tuple[Server, Process | None]]:
    if store == "sqlite":
        async with jobdeck_server("drain-profile", SLOTS, opts) as srv:
            yield srv, None
        return
    async with (
        Backend(kind="postgres", database_url=DEFAULT_PG_URL).fresh("drain-profile") as env,
        jobdeck_server("drain-profile", 0, opts, command="server", env=env) as srv,
        jobdeck_agent("drain-profile-agent", srv.url, SLOTS, opts) as agent,
    ):
        yield srv, agent


async def main(store: str, jobs: int, spy: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="drain-profile-") as tmp:
        async with _node(store, ServerOptions(Path(tmp))) as (srv, agent), BenchClient(srv.url) as client:
            await open_paused_queue(client, QUEUE)
            await submit_spread([client], [ping_job(DEFAULT_REDIS_URL)] * jobs, 1000)
            await wait_for_state(client, QUEUE, "queued", jobs, poll=0.2, stall=60)
            recorder = None
            if spy is not None and (exe := py_spy_path()) is not None:
                cmd = [exe, "record", "--pid", str(srv.pid), "--rate", str(RATE), "--format", "raw", "--output",
                       str(spy), "--threads", "--nolineno", "--full-filenames", "--nonblocking"]  # fmt: skip
                recorder = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                await asyncio.sleep(1.0)  # py-spy attaches
            load = load_average()
            meter = CpuMeter(srv, agent)
            began = time.monotonic()
            await client.queue_action(QUEUE, "resume")
            await wait_for_state(client, QUEUE, "succeeded", jobs, poll=0.05, stall=60)
            seconds = time.monotonic() - began
            cpu = meter.stop()
            if recorder is not None:
                recorder.send_signal(signal.SIGINT)
                await asyncio.to_thread(recorder.wait, 20)
            d = (await client.stats())["dispatch"]
    where = "jobdeck up" if store == "sqlite" else "jobdeck server + 1 remote agent"
    print(
        f"{store} ({where}, {SLOTS} slots), load {load}: {jobs:,} jobs in {seconds:.2f} s = {jobs / seconds:,.0f} jobs/s"
    )
    print(f"  {cpu.note()}")
    print(f"  claims {d['claims']:,} (mean {d['jobs_claimed'] / max(d['claims'], 1):.1f} jobs), result batches "
          f"{d['result_batches']:,} (mean {d['results'] / max(d['result_batches'], 1):.1f})")  # fmt: skip
    if spy is not None:
        print(summarize(spy, seconds) if spy.exists() else "  py-spy wrote nothing (pip install py-spy)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m bench.drain_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--py-spy", type=Path, metavar="FILE", help="record the node during the drain into FILE")
    a = p.parse_args()
    asyncio.run(main(a.store, a.jobs, a.py_spy))
