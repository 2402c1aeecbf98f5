"""`python -m bench.console_load URL RATE SECONDS QUEUE`: submit RATE jobs a second for SECONDS in
batches every 50 ms (one job.created event each). A separate process, so the load does not
share the console's CPU or event loop."""

from __future__ import annotations

import asyncio
import sys

from core.client import JobDeckClient

TICK = 0.05


async def load(url: str, rate: float, seconds: float, queue: str) -> None:
    per_tick = max(1, round(rate * TICK))
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with JobDeckClient(url) as client:
        for i in range(round(seconds / TICK)):
            if (wait := start + i * TICK - loop.time()) > 0:
                await asyncio.sleep(wait)
            jobs = [{"task": {"kind": "shell", "command": "true"}, "queue": queue, "delay": 3600,
                     "name": f"lag-{i}-{k}"} for k in range(per_tick)]  # fmt: skip
            await client.submit_batch(jobs)


if __name__ == "__main__":
    asyncio.run(load(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]))
