"""The steady stream of tests/obs/test_retention_load.py, in a process of its own as a node's clients
are: `python -m tests.obs.retention_stream URL RATE FILE` submits RATE jobs a second, each at its own time
(a slow answer delays no other), to the queue named by the last line read on stdin; an empty line
(or the end of stdin) stops it, and once every submit is answered it writes FILE (job id -> the
time.time() its submit was sent, JSON) and prints `done N`. In the node's
process, a client this busy cost the node's event loop more than the purge did: once answers queue
up, httpcore's pool scans every waiting request against every connection (quadratic)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import orjson

from core.client import JobDeckClient

NOOP = {"kind": "python", "function": "agents.builtin:noop"}


async def submit(c: JobDeckClient, queue: str) -> tuple[int, float]:
    sent = time.time()
    return (await c.submit({"queue": queue, "task": NOOP}))["id"], sent


async def main(url: str, rate: float, out: Path) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    queue = (await reader.readline()).decode().strip()
    tasks: list[asyncio.Task[tuple[int, float]]] = []

    async def follow() -> None:
        nonlocal queue
        while queue:
            queue = (await reader.readline()).decode().strip()

    switches = asyncio.create_task(follow())
    async with JobDeckClient(url, timeout=120) as c:
        start = loop.time()
        while queue:
            await asyncio.sleep(
                max(0.0, start + len(tasks) / rate - loop.time())
            )  # behind time too: stdin has its turn
            if queue:
                tasks.append(asyncio.create_task(submit(c, queue)))
        await switches
        sent = dict(await asyncio.gather(*tasks))
    out.write_bytes(orjson.dumps({str(k): v for k, v in sent.items()}))
    print(f"done {len(tasks)}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])))
