"""Reading /metrics as Prometheus does: the official text parser, samples by name and labels."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """{(sample name, labels): value} of an exposition text (the parser raises on a malformed one)."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 when there are none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in found.items() if n == name and want <= set(ls))


async def scrape(url: str, path: str = "/metrics", **kw: Any) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    async with httpx.AsyncClient(base_url=url) as http:
        resp = await http.get(path, **kw)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4"), resp.headers
    return samples(resp.text)
