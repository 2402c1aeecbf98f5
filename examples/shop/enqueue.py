"""Enqueue the example tasks from Python, type-checked against their signatures.

python -m examples.shop.enqueue http://127.0.0.1:8640
"""

from __future__ import annotations

import asyncio
import sys

from core.client import JobDeckClient
from examples.shop.tasks import flaky_webhook, nightly_report, send_receipt


async def main(server: str) -> None:
    async with JobDeckClient(server) as client:
        receipt = await client.enqueue(send_receipt, 1001, "ada@example.org")
        report = await client.enqueue(nightly_report, "2026-11-29", region="us")
        hook = await client.enqueue(flaky_webhook, "https://example.org/hook")
        for job in (receipt, report, hook):
            print(f"job {job['id']} {job['name']} on queue {job['queue']}: {job['state']}")
        done = await client.wait_for(report["id"], timeout=60)
        print(f"report: {done['state']}: {done['result']}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8640"))
