"""Tasks of the example shop: declared once, run by `jobdeck agent --import examples.shop.tasks`."""

from __future__ import annotations

import asyncio
import random

from agents.sdk import task


@task(queue="emails", max_attempts=5, timeout=30)
async def send_receipt(order_id: int, email: str) -> dict[str, object]:
    """Pretend to send an email (an async task: thousands can wait at once in one agent)."""
    await asyncio.sleep(0.2)
    print(f"receipt for order {order_id} sent to {email}")
    return {"order_id": order_id, "sent_to": email}


@task(queue="reports", timeout=120, backoff={"base": 2.0, "cap": 60.0})
def nightly_report(day: str, *, region: str = "eu") -> str:
    """A sync task: it runs in a worker process of the agent (stopped for real on timeout or cancel)."""
    total = sum(random.randint(1, 100) for _ in range(1000))
    return f"{day} {region}: {total} sales"


@task(queue="emails", max_attempts=3)
async def flaky_webhook(url: str) -> None:
    """Fails on purpose most of the time, to show retries and the dead-letter set."""
    if random.random() < 0.7:
        raise ConnectionError(f"{url} did not answer")
