"""Prometheus metrics of one node, and the store-wide gauges of the cluster.

Two kinds of series, on two paths, so a sum over nodes is never a double count:

- `/metrics`: what this node did (counters and histograms: submissions and outcomes it committed,
  pick-up latency of the jobs it claimed, run durations of the results it recorded, HTTP requests
  it served, its store commits) and what it holds (agents and slots connected to it). Every event
  commits on exactly one node, so `sum()` over the nodes is the cluster's figure.
- `/metrics/cluster`: what the shared store holds (jobs by queue and state, queue depth and
  running, relay lag, schedules). Every node answers it with the same numbers; scrape it once,
  through the load balancer, or aggregate it with `max without (instance)` (the shipped dashboard
  and alert rules do, so scraping it on every node is harmless).
"""

from __future__ import annotations

import bisect
import collections
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from core.model import Job
    from core.store.base import Event

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PICKUP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
RUN_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
LATENESS_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 3600.0)
OUTCOMES = {"job.succeeded": "succeeded", "job.failed": "failed", "job.dead": "dead", "job.cancelled": "cancelled"}


class AgentsView(Protocol):
    """What the agent gauges read: the sessions connected to this node."""

    sessions: dict[str, Any]


class NodeMetrics:
    """The node's own series in its own registry (two nodes in one process keep apart)."""

    enabled = True

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.submitted = Counter("jobdeck_jobs_submitted", "Jobs created (committed by this node)", ["queue"],
                                 registry=r)  # fmt: skip
        self.finished = Counter("jobdeck_jobs_finished", "Attempts that ended, by outcome (failed: a retry "
                                "follows; dead: no attempts left)", ["queue", "outcome"], registry=r)  # fmt: skip
        self.pickup = Histogram("jobdeck_pickup_latency_seconds", "From the time a job was due to its claim by an "
                                "agent", ["queue"], buckets=PICKUP_BUCKETS, registry=r)  # fmt: skip
        self.run = Histogram("jobdeck_run_duration_seconds", "From an attempt's start to its end on the agent",
                             ["queue", "outcome"], buckets=RUN_BUCKETS, registry=r)  # fmt: skip
        self.lease_expiries = Counter("jobdeck_lease_expiries", "Runs lost because their agent stopped "
                                      "heartbeating", ["queue"], registry=r)  # fmt: skip
        self.schedule_fires = Counter("jobdeck_schedule_fires", "Jobs made by schedules at their fire time",
                                      registry=r)  # fmt: skip
        self.schedule_misses = Counter("jobdeck_schedule_misses", "Fire times not run (catch-up policy after "
                                       "downtime, or overlap)", registry=r)  # fmt: skip
        self.schedule_lateness = Histogram("jobdeck_schedule_lateness_seconds", "From a fire time to the moment "
                                           "its job was made", buckets=LATENESS_BUCKETS, registry=r)  # fmt: skip
        self.http = Histogram("jobdeck_http_request_duration_seconds", "HTTP requests by route template",
                              ["method", "route", "status"], buckets=HTTP_BUCKETS, registry=r)  # fmt: skip
        self.commit = Histogram("jobdeck_store_commit_seconds", "One store transaction (a group commit of many "
                                "operations)", buckets=COMMIT_BUCKETS, registry=r)  # fmt: skip
        self.archived = Counter("jobdeck_retention_archived", "Finished jobs written to the archive", registry=r)
        self.purged = Counter("jobdeck_retention_purged", "Archived jobs deleted from the store", registry=r)
        self._agents: AgentsView | None = None
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        r.register(_AgentCollector(self))

    def watch_agents(self, hub: AgentsView) -> None:
        """Report the agents (and their slots) connected to this node."""
        self._agents = hub

    # -- hooks on the hot path (each a few dict look-ups and a lock)

    def _child(self, metric: Any, *labels: str) -> Any:
        # labels() validates and locks on every call; the hot path keeps each child it made
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def committed(self, events: Sequence[Event]) -> None:
        """Count submissions and outcomes in a batch of events this node committed."""
        counts: dict[tuple[str, str], int] = {}
        for e in events:
            t = e.type
            if t == "job.created" or t in OUTCOMES:
                key = (e.queue or "", t)
                counts[key] = counts.get(key, 0) + 1
        for (queue, t), n in counts.items():
            if t == "job.created":
                self._child(self.submitted, queue).inc(n)
            else:
                self._child(self.finished, queue, OUTCOMES[t]).inc(n)

    def _observe_all(self, metric: Any, values: dict[tuple[str, ...], list[float]]) -> None:
        """Observe a batch (values by label values) bucket by bucket: one increment of the sum and of
        each bucket hit per batch, where `observe` locks the sum and a bucket once per value."""
        for labels, xs in values.items():
            child = self._child(metric, *labels)
            bounds = child._upper_bounds  # prometheus-client's own (pinned): what `observe` walks
            hits = collections.Counter(bisect.bisect_left(bounds, x) for x in xs)  # the first bound >= x
            child._sum.inc(sum(xs))
            for i, n in hits.items():
                child._buckets[i].inc(n)

    def claimed(self, jobs: Iterable[Job], now: float) -> None:
        """Pick-up latency of jobs just claimed (one claim's batch): from when each was due to now."""
        waits: dict[tuple[str, ...], list[float]] = {}
        for j in jobs:
            waits.setdefault((j.queue,), []).append(max(0.0, now - j.run_at))
        self._observe_all(self.pickup, waits)

    def ran(self, runs: Iterable[tuple[str, str, float | None, float | None]]) -> None:
        """Run times of attempts (queue, outcome, started_at, finished_at) as their agent reported them
        (one batch of results)."""
        times: dict[tuple[str, ...], list[float]] = {}
        for queue, outcome, started_at, finished_at in runs:
            if started_at is not None and finished_at is not None:
                times.setdefault((queue, outcome), []).append(max(0.0, finished_at - started_at))
        self._observe_all(self.run, times)

    def lease_expired(self, queue: str) -> None:
        self._child(self.lease_expiries, queue).inc()

    def schedule_fired(self, made: int, lateness: Iterable[float], missed: int) -> None:
        """A due schedule's pass: jobs made, how late each fire time ran, fire times missed."""
        self.schedule_fires.inc(made)
        for late in lateness:
            self.schedule_lateness.observe(max(0.0, late))
        if missed:
            self.schedule_misses.inc(missed)

    def retained(self, archived: int, purged: int) -> None:
        self.archived.inc(archived)
        self.purged.inc(purged)

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        self._child(self.http, method, route, str(status)).observe(seconds)

    def store_commit(self, seconds: float) -> None:
        """Called from the store's writer (a thread for SQLite): prometheus_client is thread-safe."""
        self.commit.observe(seconds)

    def text(self, sees: Any = None) -> bytes:
        """The exposition text; `sees(queue)` filters series of queues the caller may not see."""
        return generate_latest(_Visible(self.registry, sees) if sees is not None else self.registry)


class NoMetrics(NodeMetrics):
    """Metrics off (JOBDECK_METRICS=false): the hooks do nothing and /metrics says so."""

    enabled = False

    def __init__(self) -> None:  # no registry, no series
        self._agents = None

    def committed(self, events: Sequence[Event]) -> None:
        return None

    def claimed(self, jobs: Iterable[Job], now: float) -> None:
        return None

    def ran(self, runs: Iterable[tuple[str, str, float | None, float | None]]) -> None:
        return None

    def lease_expired(self, queue: str) -> None:
        return None

    def schedule_fired(self, made: int, lateness: Iterable[float], missed: int) -> None:
        return None

    def retained(self, archived: int, purged: int) -> None:
        return None

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        return None

    def store_commit(self, seconds: float) -> None:
        return None


class _AgentCollector:
    def __init__(self, metrics: NodeMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        hub = self.metrics._agents
        sessions = list(hub.sessions.values()) if hub is not None else []
        agents = GaugeMetricFamily("jobdeck_agents", "Agents connected to this node", labels=["draining"])
        agents.add_metric(["false"], sum(1 for s in sessions if not s.draining))
        agents.add_metric(["true"], sum(1 for s in sessions if s.draining))
        slots = GaugeMetricFamily("jobdeck_agent_slots", "Slots of the agents connected to this node", labels=["use"])
        busy = sum(len(s.running) for s in sessions)
        slots.add_metric(["busy"], busy)
        # slots with no run, not `free` (what the next claim may take: with prefetch, beyond the slots)
        slots.add_metric(["free"], sum(s.slots_free for s in sessions))
        yield agents
        yield slots


class _Visible:
    """A registry seen by a caller of some queues only: samples of other queues are left out."""

    def __init__(self, registry: CollectorRegistry, sees: Any) -> None:
        self.registry = registry
        self.sees = sees

    def collect(self) -> Iterator[Metric]:
        for m in self.registry.collect():
            m.samples = [s for s in m.samples if "queue" not in s.labels or self.sees(s.labels["queue"])]
            yield m


def cluster_text(stats: dict[str, Any], relays: dict[str, Any], schedules: int, sees: Any = None) -> bytes:
    """The store-wide gauges (the same on every node) as exposition text."""
    jobs = GaugeMetricFamily("jobdeck_jobs", "Jobs in the store by queue and state", labels=["queue", "state"])
    depth = GaugeMetricFamily("jobdeck_queue_depth", "Jobs queued (due, waiting for a slot)", labels=["queue"])
    running = GaugeMetricFamily("jobdeck_queue_running", "Jobs running", labels=["queue"])
    for queue, states in sorted(stats.get("by_queue", {}).items()):
        if sees is not None and not sees(queue):
            continue
        for state, n in sorted(states.items()):
            jobs.add_metric([queue, state], n)
        depth.add_metric([queue], states.get("queued", 0))
        running.add_metric([queue], states.get("running", 0))
    lag_events = GaugeMetricFamily("jobdeck_relay_lag_events", "Committed events a relay has not delivered yet",
                                   labels=["relay"])  # fmt: skip
    lag_seconds = GaugeMetricFamily("jobdeck_relay_lag_seconds", "Age of the oldest event a relay has not "
                                    "delivered", labels=["relay"])  # fmt: skip
    for name, lag in sorted(relays.items()):
        lag_events.add_metric([name], float(lag.get("behind_events") or 0))
        lag_seconds.add_metric([name], float(lag.get("behind_seconds") or 0))
    sched = GaugeMetricFamily("jobdeck_schedules", "Schedules in the store")
    sched.add_metric([], schedules)
    scraped = GaugeMetricFamily("jobdeck_cluster_scrape_timestamp_seconds", "When these store-wide figures were read")
    scraped.add_metric([], time.time())
    families: list[Metric] = [jobs, depth, running, lag_events, lag_seconds, sched, scraped]

    class _Once:
        def collect(self) -> list[Metric]:
            return families

    return generate_latest(_Once())
