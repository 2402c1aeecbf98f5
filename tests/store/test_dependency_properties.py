"""Hypothesis over random DAGs with random outcomes, run on each real store: a child never starts
before every parent succeeded (or ended, for `run`), never runs after a failed parent unless its
policy says so, and every job ends in a final state. Cycle detection against a reference (Kahn)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import InvalidInput
from core.model import FINAL_STATES, RunResult, build_job, decide_finish, utcnow
from core.store.base import ClaimRequest
from core.workflow import Deps, find_cycle, validate_workflow
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import NOOP

OK = {"succeeded", "skipped"}


@st.composite
def dags(draw: Any) -> tuple[list[list[int]], list[str], list[str]]:
    """(parents of each job, by index, always earlier ones: a DAG), policies, outcomes."""
    n = draw(st.integers(1, 12))
    parents = [sorted(set(draw(st.lists(st.integers(0, i - 1), max_size=3)))) if i else [] for i in range(n)]
    policies = draw(st.lists(st.sampled_from(["cancel", "run", "skip"]), min_size=n, max_size=n))
    outcomes = draw(st.lists(st.sampled_from(["succeeded", "succeeded", "failed"]), min_size=n, max_size=n))
    return parents, policies, outcomes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dag=dags())
async def test_random_dags_run_in_order_and_every_job_ends(kit: StoreKit, dag: Any) -> None:
    parents, policies, outcomes = dag
    s = kit.store
    jobs = [build_job({"task": NOOP, "queue": "dag", "max_attempts": 1, "on_parent_failure": p}, utcnow(), POLICY)
            for p in policies]  # fmt: skip
    for i, j in enumerate(jobs):
        j.ref = f"j{i}"
    wf = await s.submit_workflow("random", jobs, [Deps(index=p) if p else None for p in parents])
    ids = [j.id for j in jobs]
    started: dict[int, dict[int, str]] = {}  # job index -> its parents' states when it was claimed
    for _ in range(len(jobs) + 2):
        claimed = await s.claim_jobs(ClaimRequest("a", 100, queues=frozenset({"dag"})), utcnow())
        if not claimed:
            break
        for c in claimed:
            i = ids.index(c.id)
            started[i] = {p: (await s.get_job(ids[p])).state for p in parents[i]}
        decisions = {}
        for c in claimed:
            res = RunResult(c.id, c.attempt, outcomes[ids.index(c.id)], error="boom")
            decisions[c.id] = lambda j, r=res: decide_finish(j, r, utcnow(), POLICY)
        await s.change_jobs(decisions)
    final = [await s.get_job(i) for i in ids]
    assert all(j.state in FINAL_STATES for j in final), [(j.ref, j.state) for j in final]
    for i, j in enumerate(final):
        pstates = [final[p].state for p in parents[i]]
        if i in started:
            seen = started[i]
            if policies[i] == "run":
                assert all(st_ in FINAL_STATES for st_ in seen.values()), f"j{i} started before its parents ended"
            else:
                assert all(st_ in OK for st_ in seen.values()), f"j{i} ({policies[i]}) started with parents {seen}"
        elif all(p in OK for p in pstates):
            raise AssertionError(f"j{i}: every parent succeeded ({pstates}) but it never ran: {j.state}")
        else:
            expected = {"cancel": "cancelled", "skip": "skipped"}.get(policies[i])
            assert j.state == expected, f"j{i} ({policies[i]}) with parents {pstates} ended {j.state}"
    got, counts = await s.get_workflow(wf.id)
    failed = any(j.state in ("dead", "cancelled") for j in final)
    assert got.state == ("failed" if failed else "succeeded"), (got.state, counts)


def _acyclic_kahn(graph: dict[str, list[str]]) -> bool:
    indegree = {n: 0 for n in graph}
    for deps in graph.values():
        for d in deps:
            indegree[d] += 1
    ready = [n for n, k in indegree.items() if k == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for d in graph[n]:
            indegree[d] -= 1
            if indegree[d] == 0:
                ready.append(d)
    return seen == len(graph)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 15).flatmap(lambda n: st.lists(st.lists(st.integers(0, n - 1), max_size=4), min_size=n,
                                                     max_size=n)))  # fmt: skip
def test_cycle_detection_agrees_with_a_reference(edges: list[list[int]]) -> None:
    graph = {f"n{i}": [f"n{d}" for d in dict.fromkeys(ds)] for i, ds in enumerate(edges)}
    cycle = find_cycle(graph)
    assert (cycle is None) == _acyclic_kahn(graph), (graph, cycle)
    if cycle is not None:
        assert cycle[0] == cycle[-1] and len(cycle) >= 2
        for a, b in itertools.pairwise(cycle):
            assert b in graph[a], f"{a} -> {b} is not an edge of {graph}"


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 15).flatmap(lambda n: st.lists(st.lists(st.integers(0, n - 1), max_size=4), min_size=n,
                                                     max_size=n)))  # fmt: skip
def test_a_workflow_is_refused_for_a_cycle_exactly_when_the_reference_finds_one(edges: list[list[int]]) -> None:
    # validate_workflow counts the jobs that could start (Kahn) before it asks find_cycle to spell one out
    specs = [
        {"ref": f"n{i}", "depends_on": [f"n{d}" for d in dict.fromkeys(ds) if d != i]} for i, ds in enumerate(edges)
    ]
    graph = {s["ref"]: s["depends_on"] for s in specs}
    try:
        validate_workflow(specs)
        refused = None
    except InvalidInput as exc:
        refused = exc.message
    assert (refused is None) == _acyclic_kahn(graph), (graph, refused)
    if refused is not None:
        cycle = find_cycle(graph)
        assert cycle is not None and refused.endswith(" -> ".join(reversed(cycle))), (refused, cycle)


def test_a_10000_deep_chain_is_checked_without_recursion() -> None:
    chain = {f"n{i}": [f"n{i - 1}"] if i else [] for i in range(10_000)}
    assert find_cycle(chain) is None
    chain["n0"] = ["n9999"]
    cycle = find_cycle(chain)
    assert cycle is not None and len(cycle) == 10_001
