"""`python -m bench`: flags, the run, and the printed figures."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.auth import auth_overhead
from bench.console_lag import console_lag
from bench.context import RunContext, Scale
from bench.flow import drain_with_limits, fair_share
from bench.flow_claim import claim_cost
from bench.io_drain import io_drain
from bench.kafka import consumer_lag, relay_throughput
from bench.latency import due_later, due_now
from bench.lists import job_lists
from bench.notify import delivery_latency, hook_submits
from bench.observability import observability_cost, retention_cost
from bench.pickup_history import pickup_history_cost
from bench.python_tasks import calls as python_calls
from bench.python_tasks import jobs as python_jobs
from bench.ratelimit import rate_limit_cost
from bench.recovery import recovery
from bench.remote import noop_remote, sleepers
from bench.report import (
    AGENT_NOOP_FLOOR,
    AGENT_RSS_FLOOR,
    Figure,
    load_average,
    machine_facts,
    render_columns,
    render_facts,
    render_table,
)
from bench.scale import scale_run, scale_sleepers
from bench.schedule_firing import firing_split
from bench.schedules import schedules_at_scale
from bench.server import BenchError, ProcessReport, ServerOptions
from bench.store import DEFAULT_PG_URL, DEFAULT_REDIS_URL, SQLITE, Backend, Floors
from bench.submit import batch_submit, single_submit
from bench.throughput import resumed, streamed
from bench.web import web_lag
from bench.workflows import fan_out_in, resolution
from core.config import masked_url
from core.errors import JobDeckError

# A case starts its own server(s) and returns its figures; a benchmark is a few cases. A case
# that fails is reported in the table and the next one still runs.
Case = Callable[[RunContext], Awaitable[list[Figure]]]
# The last item: whether the benchmark also runs on two nodes sharing a PostgreSQL store.
BENCHMARKS: dict[str, tuple[str, tuple[Case, ...], bool]] = {
    "batch": ("batch submit over HTTP, with the raw SQLite baseline", (batch_submit,), True),
    "single": ("single submit over HTTP, sequential and concurrent, with GET /healthz", (single_submit,), False),
    "auth": ("what sign-in costs: requests with a static token vs without sign-in", (auth_overhead,), False),
    "ratelimit": (
        "what the rate limit shared through Redis costs per request vs the in-memory bucket",
        (rate_limit_cost,),
        False,
    ),
    "e2e": ("end-to-end no-op throughput with the local agent", (streamed, resumed), True),
    "io": (
        "drain of jobs doing one Redis PING each (32 local slots): jobs/s, mean claim and result batch, CPU per "
        "job, beside the plain-SQL drain floor of the same run",
        (io_drain,),
        True,
    ),
    "schedules": (
        "schedules at scale: N schedules firing every minute, the lateness of each fire time and the CPU "
        "of the firing minute beside an idle stretch of the same run",
        (schedules_at_scale,),
        True,
    ),
    "schedule-firing": (
        "where a fire time's lateness goes: the firing pass in-process (one SQLite store, a fake clock), each "
        "transaction's start and commit, the Python share, and the cheapest write at T, beside 100 schedules",
        (firing_split,),
        False,
    ),
    "flow": (
        "what flow control costs the claim: a no-op backlog drained from a queue without limits vs with each "
        "limit set (too high to hold anything back), in alternating turns; ratios to the same run's baseline",
        (drain_with_limits,),
        True,
    ),
    "flow-claim": (
        "one claim_jobs in process (no server): a queue of no-ops without keys vs one with 100 fairness keys, "
        "claims of 4, 32 and 256, alternating rounds on one store; fair / plain",
        (claim_cost,),
        False,
    ),
    "fairness": (
        "the starvation scenario: tenant A floods 50,000 jobs, tenant B then submits 100; B's wait p50/p99 "
        "with fair share off (FIFO) and on",
        (fair_share,),
        False,
    ),
    "pickup": ("pick-up latency at a steady submit rate", (due_now, due_later), True),
    "agent": (
        "one remote agent process: no-op throughput (local agent as baseline), 10,000 sleeping jobs and its RSS",
        (noop_remote, sleepers),
        False,
    ),
    "python": (
        "sync python tasks in worker processes vs a thread per call (old path) and vs async tasks; worker start",
        (python_calls, python_jobs),
        False,
    ),
    "console": (
        "terminal console: lag from commit to the Jobs table at 1,000 events/s over 100,000 jobs",
        (console_lag,),
        False,
    ),
    "lists": ("job lists at 1,000,000 stored jobs: sorted pages, deep cursors, counts, search", (job_lists,), False),
    "scale": (
        "a million stored jobs: drain with a 500,000 backlog vs a small one, idle CPU, every list the UIs ask "
        "(p95), stats and queues p95, a bulk dry run over 70 %, a follower's lag over a 10,000-job batch, the "
        "longest claim gap and submit while old events and jobs are pruned and archived, WAL and RSS after, "
        "each beside a small store's or a quiet run's figure; then 10,000 async jobs at once in one agent",
        (scale_run, scale_sleepers),
        False,
    ),
    "kafka": (
        "the Kafka relay: events/s to the broker, and commit -> consumer lag at 1,000 events/s, each beside the "
        "raw aiokafka producer on the same broker",
        (relay_throughput, consumer_lag),
        False,
    ),
    "obs": (
        "what metrics and tracing cost (drain rate, server CPU per job, pick-up p99, each on vs both off, "
        "alternating turns, --obs-rounds of them; tracing at its default sampling: every job traced); "
        "retention: purge rate and pick-up p99 during a purge vs without",
        (observability_cost, retention_cost),
        False,
    ),
    "pickup-history": (
        "what the pick-up latency history costs the claim: drain rate with it kept vs off, alternating turns",
        (pickup_history_cost,),
        False,
    ),
    "notify": (
        "notifications: commit -> webhook receiver at 100 events/s to 10 channels (beside direct POSTs, and with an "
        "11th receiver that hangs); incoming hook submits beside POST /v1/jobs",
        (delivery_latency, hook_submits),
        False,
    ),
    "recovery": (
        "recovery after SIGKILL on two PostgreSQL nodes with two agents: an agent restarted at once vs never "
        "back (its runs wait for their leases: the same-run baseline), and a node (agents reattached, work flowing)",
        (recovery,),
        False,
    ),
    "workflows": (
        "job dependencies: result committed -> child queued, parent end -> child start beside plain pick-up; "
        "a 10,000-job fan-out/fan-in workflow beside a 10,000-job batch",
        (resolution, fan_out_in),
        False,
    ),
    "web": (
        "the web dashboard in chromium: commit -> DOM lag at 1,000 events/s; pages with 100,000 jobs stored",
        (web_lag,),
        False,
    ),
}
LOG_LINES_SHOWN = 8
# What a benchmark may fail with when the server misbehaves: reported, and the next one runs.
EXPECTED_FAILURES = (BenchError, JobDeckError, httpx.HTTPError, OSError, TimeoutError)


def _first_cause(exc: BaseException) -> BaseException:
    """The first real error inside (possibly nested) exception groups from a TaskGroup."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


ALIASES = {"notifications": "notify"}  # the issue's word for it


def _names(values: Sequence[str] | None) -> list[str]:
    if not values:
        return list(BENCHMARKS)
    names = [ALIASES.get(n.strip(), n.strip()) for v in values for n in v.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHMARKS)}")
    return list(dict.fromkeys(names))


def _batch_size(text: str) -> int:
    n = int(text)
    if not 1 <= n <= 10_000:
        raise argparse.ArgumentTypeError("a batch holds 1..10000 jobs (the API's limit)")
    return n


def build_parser() -> argparse.ArgumentParser:
    d = Scale()
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Start real JobDeck servers and print how fast they go. Figures, not a test.",
        epilog="benchmarks: " + "; ".join(f"{k}: {title}" for k, (title, *_) in BENCHMARKS.items()),
    )
    p.add_argument("--only", action="append", metavar="NAME[,NAME]", help=f"run only these ({', '.join(BENCHMARKS)})")
    p.add_argument("--quick", action="store_true", help="a short smoke run of each benchmark (flags below still apply)")
    g = p.add_argument_group("store")
    g.add_argument("--store", choices=("sqlite", "postgres", "both"), default="sqlite",
                   help="where the nodes keep their jobs; both: the SQLite and PostgreSQL figures side by side "
                        "(default sqlite)")  # fmt: skip
    g.add_argument("--nodes", default="1,2", metavar="N[,N]",
                   help="PostgreSQL: run with this many nodes sharing the store, each N a column; batch, e2e "
                        "and pickup run on every N, the others on the first (default 1,2)")  # fmt: skip
    g.add_argument("--pg-url", default=os.environ.get("JOBDECK_BENCH_PG_URL", DEFAULT_PG_URL),
                   help="the database each case makes a fresh schema in (env JOBDECK_BENCH_PG_URL; "
                        f"default {DEFAULT_PG_URL})")  # fmt: skip
    g.add_argument(
        "--redis-url",
        default=os.environ.get("JOBDECK_BENCH_REDIS_URL", DEFAULT_REDIS_URL),
        help=f"the event bus of 2+ nodes (env JOBDECK_BENCH_REDIS_URL; default {DEFAULT_REDIS_URL})",
    )
    g = p.add_argument_group("scale (defaults keep a whole run under ~3 minutes; PostgreSQL columns: "
                             f"--jobs {d.postgres().e2e_jobs:,} and --pickup-seconds {d.postgres().pickup_seconds:.0f} "
                             "unless given)")  # fmt: skip
    g.add_argument("--jobs", type=int, dest="e2e_jobs",
                   help=f"jobs of each e2e and agent no-op run (default {d.e2e_jobs:,})")  # fmt: skip
    g.add_argument("--slots", type=int, dest="e2e_slots",
                   help=f"agent slots in e2e and agent no-op (default {d.e2e_slots})")  # fmt: skip
    g.add_argument("--batch-size", type=_batch_size, help=f"jobs per batch call (default {d.batch_size:,})")
    g.add_argument("--batches", type=int, help=f"timed batch calls (default {d.batches})")
    g.add_argument("--seconds", type=float, dest="single_seconds",
                   help=f"seconds of each single-submit measurement (default {d.single_seconds})")  # fmt: skip
    g.add_argument("--concurrency", type=int, help=f"concurrent single-submit clients (default {d.concurrency})")
    g.add_argument(
        "--rate", type=float, dest="pickup_rate", help=f"pick-up submit rate, jobs/s (default {d.pickup_rate:.0f})"
    )
    g.add_argument("--pickup-seconds", type=float, help=f"seconds of each pick-up run (default {d.pickup_seconds:.0f})")
    g.add_argument(
        "--lead",
        type=float,
        dest="pickup_lead",
        help=f"run_at lead of the 2nd pick-up run, s (default {d.pickup_lead})",
    )
    g.add_argument("--flow-turns", type=int,
                   help=f"turns of the flow benchmark, each draining every limit once between unlimited drains "
                        f"(default {d.flow_turns})")  # fmt: skip
    g.add_argument(
        "--obs-rounds", type=int, help=f"rounds of the obs benchmark's alternating turns (default {d.obs_rounds})"
    )
    g.add_argument("--obs-parts", type=_parts("obs_parts"), metavar="PARTS",
                   help=f"what the obs benchmark measures, of {','.join(d.obs_parts)} (default all)")  # fmt: skip
    g.add_argument("--scale-jobs", type=int, metavar="N",
                   help="scale: jobs stored besides the backlog, which is 5/9 of them (default 900,000; quick 100,000)")  # fmt: skip
    g.add_argument("--scale-parts", type=_parts("scale_parts"), metavar="PARTS",
                   help=f"what the scale benchmark measures, of {','.join(d.scale_parts)} (default all; "
                        "maintenance alone is the smallest run that shows its stall)")  # fmt: skip
    g.add_argument("--sleepers", type=int, help=f"sleeping jobs at once in one agent (default {d.sleepers:,})")
    g.add_argument("--sleep", type=float, dest="sleep_seconds",
                   help=f"seconds each sleeper sleeps; must outlast starting them all (default {d.sleep_seconds:g})")  # fmt: skip
    g = p.add_argument_group("output")
    g.add_argument("--profile", type=Path, metavar="DIR",
                   help="record every server and agent process with py-spy into DIR and print its hot spots "
                        "(pip install py-spy)")  # fmt: skip
    g.add_argument(
        "--keep", action="store_true", help="keep the data dirs and logs of servers and agents (kept anyway on errors)"
    )
    g.add_argument("--tmp", type=Path, help="where the data dirs go (default: the system temp dir)")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def _node_counts(text: str) -> list[int]:
    try:
        counts = [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--nodes takes node counts like 1,2, not {text!r}")
    return list(dict.fromkeys(counts))


def _parts(field: str) -> Callable[[str], tuple[str, ...]]:
    """The parser of a comma list of parts of a benchmark, each one of Scale.<field>'s default."""
    known: tuple[str, ...] = getattr(Scale, field)

    def parse(text: str) -> tuple[str, ...]:
        parts = tuple(x.strip() for x in text.split(",") if x.strip())
        if not parts or set(parts) - set(known):
            raise argparse.ArgumentTypeError(f"{text!r}: a comma list of {', '.join(known)}")
        return parts

    return parse


def build_backends(args: argparse.Namespace) -> list[Backend]:
    """The columns of the run, in order."""
    backends = [SQLITE] if args.store in ("sqlite", "both") else []
    if args.store in ("postgres", "both"):
        backends += [Backend("postgres", n, args.pg_url, args.redis_url) for n in _node_counts(args.nodes)]
    return backends


def build_scale(args: argparse.Namespace, backend: Backend = SQLITE) -> Scale:
    scale = Scale().quick() if args.quick else Scale()
    if backend.kind == "postgres":
        scale = scale.postgres()
    given = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(Scale) if getattr(args, f.name, None) is not None
    }
    return dataclasses.replace(scale, **given)


async def run(ctx: RunContext, names: Sequence[str]) -> tuple[list[Figure], list[str]]:
    """Run the benchmarks in turn; one that fails is reported and the others still run."""
    figures: list[Figure] = []
    errors: list[str] = []
    for name in names:
        title, cases, multi_node = BENCHMARKS[name]
        if ctx.backend.nodes > 1 and not multi_node:
            continue
        print(f"[{name}] {title} ({ctx.backend.label})", file=sys.stderr, flush=True)
        t = time.perf_counter()
        for case in cases:
            try:
                figures += await case(ctx)
            except Exception as exc:
                cause = _first_cause(exc)
                if not isinstance(cause, EXPECTED_FAILURES):
                    raise  # a bug in the benchmark itself: let its traceback show
                message = getattr(cause, "message", None) or str(cause) or type(cause).__name__
                errors.append(f"{name}/{case.__name__} ({ctx.backend.label}): {message}")
                figures.append(Figure(name, f"{case.__name__}: did not finish", None, "", note=message[:300]))
        ctx.progress(f"done in {time.perf_counter() - t:.0f} s")
    return figures, errors


async def run_columns(
    contexts: Sequence[RunContext], names: Sequence[str]
) -> list[tuple[str, list[Figure], list[str]]]:
    """`run` once per column (store and node count): (its label, its figures, its errors)."""
    return [(ctx.backend.label, *await run(ctx, names)) for ctx in contexts]


def _floor_text(floors: Floors) -> str:
    e2e = f"e2e no-op {floors.e2e} jobs/s; " if floors.e2e is not None else ""
    return (f"batch submit {floors.batch_submit} jobs/s; {e2e}single submits {floors.single_submit} req/s (1 client), "
            f"{floors.concurrent_submit} (16); pick-up p99 {floors.pickup_p99} ms at 200 jobs/s")  # fmt: skip


def _distinct_floors(backends: Sequence[Backend]) -> list[tuple[str, Backend]]:
    """One backend per set of floors, labelled with the columns it covers."""
    groups: dict[Floors, list[Backend]] = {}
    for b in backends:
        groups.setdefault(b.floors, []).append(b)
    return [(" and ".join(b.label for b in bs), bs[0]) for bs in groups.values()]


def _server_section(reports: Sequence[ProcessReport]) -> list[str]:
    out = []
    for r in reports:
        where = f"  (kept: {r.data_dir})" if r.kept else ""
        status = "" if r.exit_code in (0, None) else f", exit code {r.exit_code}"
        if r.issues or status:
            out.append(f"{r.kind} {r.name!r}: {len(r.issues)} warning/error line(s) in its log{status}{where}")
            out += [f"    {line[:220]}" for line in r.issues[:LOG_LINES_SHOWN]]
            if len(r.issues) > LOG_LINES_SHOWN:
                out.append(f"    ... {len(r.issues) - LOG_LINES_SHOWN} more in {r.log_path}")
        elif r.kept:
            out.append(f"{r.kind} {r.name!r}: clean log{where}")
    return out or ["every log was clean (no WARNING / ERROR / Traceback lines) and every process exited 0"]


def _run_loop(coro: Coroutine[Any, Any, Any]) -> Any:
    # The client runs on uvloop when it can (as `jobdeck` does): less client CPU per request.
    # (The import alone is tried: an ImportError raised by the run itself must not start it twice.)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        names = _names(args.only)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    try:
        backends = build_backends(args)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    scales = [build_scale(args, b) for b in backends]
    if args.tmp is not None:
        args.tmp.mkdir(parents=True, exist_ok=True)
    tmp_root = Path(tempfile.mkdtemp(prefix="jobdeck-bench-", dir=args.tmp))
    options = ServerOptions(tmp_root, keep=args.keep, profile_dir=args.profile)
    contexts = [RunContext(scale, options, log_progress=not args.quiet, backend=b) for b, scale in zip(backends, scales, strict=True)]  # fmt: skip
    facts = machine_facts(tmp_root)
    started = time.perf_counter()
    try:
        columns = _run_loop(run_columns(contexts, names))
    except KeyboardInterrupt:
        print("interrupted; servers were stopped", file=sys.stderr)
        return 130
    finally:
        if not any(r.kept for r in options.reports):
            shutil.rmtree(tmp_root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    facts.append(("load after", load_average()))
    for b in backends:
        if b.kind == "postgres":
            facts.append(("postgres", f"{masked_url(b.database_url)} (a fresh schema per case); "
                                      f"2+ nodes share events via {masked_url(b.redis_url)}"))  # fmt: skip
            break
    floors = [f"{label}: " + _floor_text(b.floors) for label, b in _distinct_floors(backends)]
    floors.append(f"no-op through 1 agent process {AGENT_NOOP_FLOOR} jobs/s; 10,000 sleepers at once in 1 agent "
                  f"process, its RSS {AGENT_RSS_FLOOR} MB")  # fmt: skip
    runs = [f"{elapsed:.0f} s"] + [f"{ctx.backend.label}: {ctx.scale}" for ctx in contexts if ctx.scale != scales[0]]
    figures = [f for _, fs, _ in columns for f in fs]
    errors = [e for _, _, es in columns for e in es]
    shown = [(label, fs) for label, fs, _ in columns if fs]  # a column no benchmark ran in is left out
    table = render_table(figures) if len(shown) <= 1 else render_columns(shown)
    lines = [
        "",
        render_facts(
            "JobDeck benchmarks",
            [
                *facts,
                *(("floors", f) for f in floors),
                ("run", f"{runs[0]}, {scales[0]}"),
                *(("scale", r) for r in runs[1:]),
            ],
        ),
        "",
        table,
        "",
        *_server_section(options.reports),
    ]
    for r in options.reports:
        if r.profile:
            lines += ["", f"py-spy hot spots of {r.kind} {r.name!r}:", r.profile]
    print("\n".join(lines), flush=True)
    return 1 if errors else 0
