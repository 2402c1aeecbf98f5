"""The job state machine: the transition table, the pure `decide_*` functions, backoff and claim order."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import Conflict
from core.model import (
    ALL_STATES,
    FINAL_STATES,
    TRANSITIONS,
    WAITING_STATES,
    Change,
    Job,
    JobState,
    Policy,
    RunResult,
    backoff_delay,
    build_job,
    check_transition,
    decide_cancel,
    decide_claim,
    decide_finish,
    decide_hand_back,
    decide_lease_expired,
    decide_pause,
    decide_priority,
    decide_promote,
    decide_resume,
    decide_retry,
    sort_key,
    stale_run_reason,
)

POLICY = Policy(aging_seconds_per_priority=60.0, lease_seconds=30.0)
NOW = 10_000.0


class FixedRandom(random.Random):
    """An rng whose `random()` always returns `value`: makes the jitter predictable."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def make_job(**overrides: Any) -> Job:
    """A job with plain defaults: queued, priority 0, 3 attempts, backoff 1 s capped at 60 s."""
    fields: dict[str, Any] = dict(
        id=7,
        name="job",
        queue="default",
        state="queued",
        priority=0,
        sort_key=sort_key(NOW - 100, 0, POLICY),
        run_at=NOW - 100,
        created_at=NOW - 100,
        updated_at=NOW - 100,
        attempt=0,
        max_attempts=3,
        spec_max_attempts=3,
        backoff_base=1.0,
        backoff_cap=60.0,
        timeout=None,
        task={"kind": "shell", "command": "true"},
    )
    fields.update(overrides)
    return Job(**fields)


def running_job(**overrides: Any) -> Job:
    """A job an agent holds: attempt 1 of 3, a live lease."""
    base: dict[str, Any] = dict(state="running", attempt=1, agent="agent-a", lease_expires_at=NOW + 30)
    base.update(overrides)
    return make_job(**base)


def apply(job: Job, change: Change) -> Job:
    """The job as a store would write it after `change`."""
    return dataclasses.replace(job, **change.fields)


# ---------------------------------------------------------------- the transition table

EXPECTED_TRANSITIONS: dict[str, set[str]] = {
    # succeeded / dead: a scheduled workflow run's end job ends in place with its workflow's outcome
    "blocked": {"queued", "scheduled", "cancelled", "paused", "skipped", "succeeded", "dead"},
    "scheduled": {"queued", "cancelled", "paused"},
    "queued": {"running", "cancelled", "paused", "succeeded"},  # succeeded: a late result before the retry ran
    "running": {"succeeded", "failed", "dead", "cancelled", "queued", "scheduled"},  # scheduled: held by a breaker
    "failed": {"queued", "cancelled", "paused", "succeeded"},  # succeeded: a late result of a lost attempt
    "paused": {"queued", "scheduled", "failed", "blocked", "cancelled"},
    "succeeded": {"queued"},
    "dead": {"queued", "succeeded"},
    "cancelled": {"queued", "blocked"},  # blocked: a parent it was cancelled for is retried
    "skipped": {"queued", "blocked"},
}

ALL_PAIRS = [(a.value, b.value) for a in JobState for b in JobState]


def test_the_table_has_every_state_and_exactly_the_designed_moves() -> None:
    got = {s.value: {t.value for t in targets} for s, targets in TRANSITIONS.items()}
    assert got == EXPECTED_TRANSITIONS
    assert {s.value for s in ALL_STATES} == set(EXPECTED_TRANSITIONS)


@pytest.mark.parametrize(("source", "target"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS])
def test_every_pair_is_allowed_or_refused_naming_the_current_state(source: str, target: str) -> None:
    job = make_job(state=source)
    legal = target in EXPECTED_TRANSITIONS[source]
    if legal:
        check_transition(job, JobState(target), "move")
        return
    with pytest.raises(Conflict) as info:
        check_transition(job, JobState(target), "move")
    err = info.value
    assert err.status == 409
    assert f"it is {source}" in err.message, f"expected the message to name state {source!r}, got {err.message!r}"
    assert err.to_dict()["state"] == source, err.to_dict()
    assert err.to_dict()["job_id"] == job.id, err.to_dict()


def test_no_state_moves_to_itself_and_only_a_claim_or_a_result_touches_running() -> None:
    for state, targets in TRANSITIONS.items():
        assert state not in targets, f"{state} -> {state} should not be a transition"
    into_running = {s for s, targets in TRANSITIONS.items() if JobState.RUNNING in targets}
    assert into_running == {JobState.QUEUED}
    # blocked: a scheduled workflow run's end job, which no agent runs, ends with its workflow's outcome
    into_dead = {s for s, targets in TRANSITIONS.items() if JobState.DEAD in targets}
    assert into_dead == {JobState.RUNNING, JobState.BLOCKED}
    into_succeeded = {s for s, targets in TRANSITIONS.items() if JobState.SUCCEEDED in targets}
    assert into_succeeded == {JobState.RUNNING, JobState.FAILED, JobState.QUEUED, JobState.DEAD, JobState.BLOCKED}, (
        "a run, a late result of one, or a workflow run's end"
    )
    rearmed = (JobState.CANCELLED, JobState.SKIPPED)  # may wait again when the failed parent is retried
    for final in FINAL_STATES:
        late = {JobState.SUCCEEDED} if final == JobState.DEAD else set()
        again = {JobState.BLOCKED} if final in rearmed else set()
        assert TRANSITIONS[final] == {JobState.QUEUED} | late | again, (
            f"{final} leaves by retry only, got {TRANSITIONS[final]}"
        )


# ---------------------------------------------------------------- pause / resume


@pytest.mark.parametrize("state", ["queued", "scheduled", "blocked", "failed"])
def test_pause_remembers_where_the_job_was(state: str) -> None:
    job = make_job(state=state)
    change = decide_pause(job, NOW, POLICY)
    assert change.fields["state"] == "paused"
    assert change.fields["paused_from"] == state
    assert change.event == "job.paused"


@pytest.mark.parametrize(
    ("state", "word"), [("running", "running"), ("succeeded", "succeeded"), ("dead", "dead"), ("paused", "paused")]
)
def test_pause_of_a_job_that_is_not_waiting_is_refused(state: str, word: str) -> None:
    with pytest.raises(Conflict) as info:
        decide_pause(make_job(state=state), NOW, POLICY)
    assert word in info.value.message, info.value.message
    assert info.value.extra["state"] == state


@pytest.mark.parametrize(
    ("paused_from", "run_at", "expected"),
    [
        ("queued", NOW - 100, "queued"),
        ("scheduled", NOW + 600, "scheduled"),  # still in the future: waits for run_at again
        ("scheduled", NOW - 1, "queued"),  # came due while paused: ready at once
        ("failed", NOW + 600, "failed"),  # retry still pending
        ("failed", NOW - 1, "queued"),
        ("blocked", NOW - 100, "blocked"),
    ],
)
def test_resume_puts_the_job_back_where_it_was(paused_from: str, run_at: float, expected: str) -> None:
    job = make_job(state=paused_from, run_at=run_at)
    paused = apply(job, decide_pause(job, NOW - 50, POLICY))
    resumed = apply(paused, decide_resume(paused, NOW, POLICY))
    assert resumed.state == expected
    assert resumed.paused_from is None
    assert resumed.run_at == run_at, "resume must not move the job's due time"


def test_pause_then_resume_round_trip_keeps_attempts_and_priority() -> None:
    job = make_job(state="failed", attempt=2, priority=9, run_at=NOW + 600, last_error="boom")
    paused = apply(job, decide_pause(job, NOW, POLICY))
    resumed = apply(paused, decide_resume(paused, NOW + 1, POLICY))
    assert (resumed.attempt, resumed.priority, resumed.max_attempts, resumed.last_error) == (2, 9, 3, "boom")


@pytest.mark.parametrize("state", ["queued", "scheduled", "running", "succeeded"])
def test_resume_of_a_job_that_is_not_paused_is_refused_naming_its_state(state: str) -> None:
    with pytest.raises(Conflict) as info:
        decide_resume(make_job(state=state), NOW, POLICY)
    assert f"it is {state}" in info.value.message, info.value.message


# ---------------------------------------------------------------- cancel


@pytest.mark.parametrize("state", ["queued", "scheduled", "blocked", "failed", "paused"])
def test_cancel_of_a_waiting_job_is_immediate(state: str) -> None:
    job = make_job(state=state, paused_from="queued" if state == "paused" else None)
    done = apply(job, decide_cancel(job, NOW, POLICY))
    assert done.state == "cancelled"
    assert done.finished_at == NOW
    assert done.paused_from is None


def test_cancel_of_a_running_job_only_asks_the_agent_to_stop() -> None:
    job = running_job()
    change = decide_cancel(job, NOW, POLICY)
    after = apply(job, change)
    assert after.state == "running", "the job stays running until its agent reports it stopped"
    assert after.cancel_requested is True
    assert change.event == "job.cancel_requested"
    assert (after.attempt, after.agent, after.lease_expires_at) == (job.attempt, job.agent, job.lease_expires_at)
    # asking twice changes nothing more
    again = decide_cancel(after, NOW + 1, POLICY)
    assert again.fields == {}


def test_a_running_job_whose_cancel_was_requested_ends_cancelled_not_retried() -> None:
    job = apply(running_job(), decide_cancel(running_job(), NOW, POLICY))
    res = RunResult(job.id, job.attempt, "failed", error="terminated")
    after = apply(job, decide_finish(job, res, NOW + 1, POLICY))
    assert after.state == "cancelled", f"expected cancelled (no retry after a cancel), got {after.state}"
    assert after.finished_at is not None


@pytest.mark.parametrize("state", ["succeeded", "dead", "cancelled"])
def test_cancel_of_a_finished_job_is_refused(state: str) -> None:
    with pytest.raises(Conflict) as info:
        decide_cancel(make_job(state=state), NOW, POLICY)
    assert f"it is {state}" in info.value.message, info.value.message


def test_a_job_handed_back_after_its_cancel_was_requested_does_not_run_again() -> None:
    job = running_job()
    job = apply(job, decide_cancel(job, NOW, POLICY))
    after = apply(job, decide_hand_back(job, job.attempt, NOW + 1, POLICY))
    assert after.state == "cancelled", f"expected cancelled (the user cancelled it), got {after.state}"


# ---------------------------------------------------------------- retry


@pytest.mark.parametrize("state", ["succeeded", "dead", "cancelled", "failed"])
def test_retry_queues_the_job_now_with_a_fresh_set_of_attempts(state: str) -> None:
    job = make_job(state=state, attempt=3, max_attempts=3, finished_at=NOW - 5, cancel_requested=True)
    after = apply(job, decide_retry(job, NOW, POLICY))
    assert after.state == "queued"
    assert after.run_at == NOW
    assert after.max_attempts - after.attempt == job.spec_max_attempts, (after.attempt, after.max_attempts)
    assert after.finished_at is None
    assert after.cancel_requested is False


def test_a_replayed_dead_job_gets_exactly_its_attempts_again_before_dying() -> None:
    job = make_job(state="dead", attempt=3, max_attempts=3, finished_at=NOW)
    job = apply(job, decide_retry(job, NOW, POLICY))
    t, runs = NOW, 0
    while job.state != "dead":
        assert runs < 10, "the job never became dead again"
        if job.state == "failed":
            t = job.run_at
            job = apply(job, decide_promote(job, t, POLICY))
        job = apply(job, decide_claim(job, "agent-a", t, POLICY))
        runs += 1
        job = apply(job, decide_finish(job, RunResult(job.id, job.attempt, "failed", error="boom"), t, POLICY))
    assert runs == 3, f"expected 3 more attempts after the replay, got {runs}"
    assert job.attempt == 6


@pytest.mark.parametrize("state", ["queued", "scheduled", "running", "paused", "blocked"])
def test_retry_of_an_unfinished_job_is_refused(state: str) -> None:
    with pytest.raises(Conflict) as info:
        decide_retry(make_job(state=state), NOW, POLICY)
    assert f"it is {state}" in info.value.message, info.value.message


# ---------------------------------------------------------------- priority


def _enqueued(at: float, priority: int = 0, **kw: Any) -> Job:
    return make_job(run_at=at, priority=priority, sort_key=sort_key(at, priority, POLICY), **kw)


def test_a_priority_change_keeps_the_jobs_place_in_time() -> None:
    older, newer = _enqueued(100.0, id=1), _enqueued(200.0, id=2)
    newer = apply(newer, decide_priority(newer, 5, NOW, POLICY))
    older = apply(older, decide_priority(older, 5, NOW, POLICY))
    assert older.sort_key < newer.sort_key, "same priority: the job enqueued first must still be claimed first"
    assert older.sort_key == sort_key(100.0, 5, POLICY)
    assert newer.sort_key == sort_key(200.0, 5, POLICY)


def test_raising_the_priority_moves_a_job_ahead_of_older_lower_priority_ones() -> None:
    older, newer = _enqueued(100.0, 0, id=1), _enqueued(200.0, 0, id=2)
    change = decide_priority(newer, 10, NOW, POLICY)
    assert change.event == "job.priority" and change.data == {"from": 0}
    assert apply(newer, change).sort_key < older.sort_key


@pytest.mark.parametrize("state", sorted(WAITING_STATES))
def test_priority_of_any_waiting_job_can_change(state: str) -> None:
    assert apply(make_job(state=state), decide_priority(make_job(state=state), 3, NOW, POLICY)).priority == 3


@pytest.mark.parametrize("state", ["running", "succeeded", "dead", "cancelled"])
def test_priority_of_a_running_or_finished_job_is_refused(state: str) -> None:
    with pytest.raises(Conflict) as info:
        decide_priority(make_job(state=state), 3, NOW, POLICY)
    assert f"it is {state}" in info.value.message, info.value.message


# ---------------------------------------------------------------- claim and finish


def test_a_claim_starts_a_new_attempt_with_a_lease() -> None:
    job = make_job(attempt=1)
    change = decide_claim(job, "agent-a", NOW, POLICY)
    after = apply(job, change)
    assert (after.state, after.attempt, after.agent) == ("running", 2, "agent-a")
    assert after.lease_expires_at == NOW + POLICY.lease_seconds
    assert change.attempt is not None and change.attempt["attempt"] == 2


def test_finish_success() -> None:
    job = running_job()
    res = RunResult(job.id, 1, "succeeded", output="hello\n", exit_code=0, result={"n": 1}, started_at=NOW - 2)
    change = decide_finish(job, res, NOW, POLICY)
    after = apply(job, change)
    assert after.state == "succeeded"
    assert after.finished_at == NOW
    assert after.lease_expires_at is None
    assert after.result == {"n": 1}
    assert change.attempt is not None
    assert (change.attempt["outcome"], change.attempt["output"], change.attempt["exit_code"]) == (
        "succeeded",
        "hello\n",
        0,
    )


@pytest.mark.parametrize(("attempt", "ceiling"), [(1, 2.0), (2, 4.0), (3, 8.0)])
def test_a_failed_attempt_with_attempts_left_is_retried_after_a_backoff(attempt: int, ceiling: float) -> None:
    job = running_job(attempt=attempt, max_attempts=5, backoff_base=2.0, backoff_cap=100.0)
    res = RunResult(job.id, attempt, "failed", error="exit code 1: nope", exit_code=1)
    change = decide_finish(job, res, NOW, POLICY, rng=FixedRandom(0.5))
    after = apply(job, change)
    expected_delay = ceiling / 2 + 0.5 * ceiling / 2
    assert after.state == "failed"
    assert after.run_at == pytest.approx(NOW + expected_delay), f"expected a retry {expected_delay} s later"
    assert change.data["retry_in"] == pytest.approx(expected_delay)
    assert after.last_error == "exit code 1: nope"
    assert after.finished_at is None, "a job waiting for its retry is not finished"
    # and it becomes due exactly then
    with pytest.raises(Conflict):
        decide_promote(after, after.run_at - 0.001, POLICY)
    assert apply(after, decide_promote(after, after.run_at, POLICY)).state == "queued"


@pytest.mark.parametrize("outcome", ["failed", "timeout", "lost"])
def test_the_last_failed_attempt_makes_the_job_dead(outcome: str) -> None:
    job = running_job(attempt=3, max_attempts=3)
    after = apply(job, decide_finish(job, RunResult(job.id, 3, outcome, error="boom"), NOW, POLICY))
    assert after.state == "dead"
    assert after.finished_at == NOW
    assert after.last_error == "boom"


def test_a_cancelled_outcome_ends_cancelled() -> None:
    job = running_job()
    after = apply(job, decide_finish(job, RunResult(job.id, 1, "cancelled"), NOW, POLICY))
    assert after.state == "cancelled"
    assert after.finished_at == NOW


@pytest.mark.parametrize(
    ("state", "attempt", "why"),
    [
        ("running", 1, "attempt 2 has started since"),
        ("running", 3, "the job is at attempt 2"),
        ("queued", 2, "the attempt's result is recorded already (the job is queued)"),
        ("failed", 2, "the attempt's result is recorded already (the job is failed)"),
        ("succeeded", 2, "the attempt's result is recorded already (the job is succeeded)"),
    ],
)
def test_a_stale_result_is_refused_saying_why(state: str, attempt: int, why: str) -> None:
    job = make_job(state=state, attempt=2, agent="agent-b", started_at=NOW - 5,
                   lease_expires_at=NOW + 30 if state == "running" else None)  # fmt: skip
    with pytest.raises(Conflict) as info:
        decide_finish(job, RunResult(job.id, attempt, "succeeded"), NOW, POLICY)
    assert info.value.message == f"result of job {job.id} attempt {attempt} not recorded: {why}"


@pytest.mark.parametrize(
    ("state", "attempt", "started_at", "why"),
    [
        ("running", 1, NOW - 5, "attempt 2 has started since"),
        ("running", 3, NOW - 5, "the job is at attempt 2"),
        ("succeeded", 2, NOW - 5, "the attempt's result is recorded already (the job is succeeded)"),
        ("failed", 2, None, "the attempt was recorded lost (lease expired) and the job is failed"),
        ("running", 2, None, "its lease is agent agent-b's"),
    ],
)
def test_a_run_an_agent_reports_that_is_not_its_own_is_refused_saying_why(
    state: str, attempt: int, started_at: float | None, why: str
) -> None:
    """The "started" side of the fence: a run an agent still reports (at a reconnect, in a heartbeat)
    whose lease is not its own any more is stopped with this reason, which the agent logs."""
    job = make_job(state=state, attempt=2, agent="agent-b", started_at=started_at, last_error="lease expired")
    assert (
        stale_run_reason(job, attempt, "agent-a")
        == f"job {job.id} attempt {attempt} is no longer agent agent-a's to run: {why}"
    )


@pytest.mark.parametrize("attempts_left", [True, False])
def test_a_late_success_of_an_attempt_recorded_lost_is_recorded(attempts_left: bool) -> None:
    """The run finished but its result came after the lease ran out: no newer attempt has started,
    so the success stands (failed or dead -> succeeded) instead of the job running again."""
    job = running_job(attempt=2, max_attempts=3 if attempts_left else 2, lease_expires_at=NOW - 1)
    lost = apply(job, decide_lease_expired(job, NOW, POLICY))
    assert lost.state == ("failed" if attempts_left else "dead")
    res = RunResult(job.id, 2, "succeeded", result=7, started_at=NOW - 9, finished_at=NOW - 2)
    change = decide_finish(lost, res, NOW + 1, POLICY)
    after = apply(lost, change)
    assert (after.state, after.result, after.attempt, after.last_error) == ("succeeded", 7, 2, None)
    assert change.data["late"] is True and change.attempt is not None and change.attempt["outcome"] == "succeeded"


def test_a_late_success_once_the_retry_is_queued_but_not_claimed_is_recorded() -> None:
    """The retry of the lost attempt came due (queued) but no agent took it yet: no newer attempt
    has started, so the late success stands and the job does not run again."""
    job = running_job(attempt=1, max_attempts=3, lease_expires_at=NOW - 1)
    lost = apply(job, decide_lease_expired(job, NOW, POLICY))
    queued = apply(lost, decide_promote(lost, lost.run_at, POLICY))
    assert (queued.state, queued.attempt) == ("queued", 1)
    change = decide_finish(queued, RunResult(job.id, 1, "succeeded", started_at=NOW - 9, finished_at=NOW - 2), NOW + 1,
                           POLICY)  # fmt: skip
    after = apply(queued, change)
    assert (after.state, after.attempt, change.data["late"]) == ("succeeded", 1, True)


def test_a_late_failure_and_a_result_after_a_newer_attempt_are_refused() -> None:
    job = running_job(attempt=1, max_attempts=3, lease_expires_at=NOW - 1)
    lost = apply(job, decide_lease_expired(job, NOW, POLICY))
    with pytest.raises(Conflict) as info:
        decide_finish(lost, RunResult(job.id, 1, "failed", error="boom", started_at=NOW - 3), NOW, POLICY)
    assert "the attempt was recorded lost (lease expired: agent agent-a stopped responding)" in info.value.message
    queued = apply(lost, decide_promote(lost, lost.run_at, POLICY))
    again = apply(queued, decide_claim(queued, "agent-b", lost.run_at, POLICY))
    with pytest.raises(Conflict) as info:
        decide_finish(again, RunResult(job.id, 1, "succeeded", started_at=NOW - 3), NOW, POLICY)
    assert "attempt 2 has started since" in info.value.message, info.value.message


def test_an_expired_lease_counts_as_a_failed_attempt() -> None:
    job = running_job(attempt=1, max_attempts=3, lease_expires_at=NOW - 1)
    change = decide_lease_expired(job, NOW, POLICY, rng=FixedRandom(0.0))
    after = apply(job, change)
    assert after.state == "failed"
    assert after.attempt == 1, "the lost attempt stays counted"
    assert "lease expired" in (after.last_error or "") and "agent-a" in (after.last_error or ""), after.last_error
    assert change.attempt is not None and change.attempt["outcome"] == "lost"


def test_an_expired_lease_on_the_last_attempt_makes_the_job_dead() -> None:
    job = running_job(attempt=3, max_attempts=3, lease_expires_at=NOW - 1)
    assert apply(job, decide_lease_expired(job, NOW, POLICY)).state == "dead"


def test_a_live_lease_is_not_reaped() -> None:
    with pytest.raises(Conflict):
        decide_lease_expired(running_job(lease_expires_at=NOW + 1), NOW, POLICY)


def test_hand_back_does_not_count_the_attempt() -> None:
    job = running_job(attempt=2)
    after = apply(job, decide_hand_back(job, 2, NOW, POLICY))
    assert (after.state, after.attempt, after.agent, after.lease_expires_at) == ("queued", 1, None, None)


# ---------------------------------------------------------------- backoff and claim order


def test_backoff_doubles_each_attempt_until_the_cap() -> None:
    floor = FixedRandom(0.0)  # jitter at its lowest: exactly half the ceiling
    got = [backoff_delay(a, 1.0, 10.0, floor) for a in range(1, 8)]
    assert got == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    top = FixedRandom(0.999999)
    assert backoff_delay(3, 1.0, 10.0, top) == pytest.approx(4.0, rel=1e-5)
    assert backoff_delay(30, 1.0, 10.0, top) == pytest.approx(10.0, rel=1e-5)


@given(
    attempt=st.integers(1, 200),
    base=st.floats(0.01, 3600.0),
    cap=st.floats(0.01, 86_400.0),
    seed=st.integers(0, 2**32),
)
def test_backoff_jitter_stays_within_half_to_full_ceiling(attempt: int, base: float, cap: float, seed: int) -> None:
    ceiling = min(cap, base * 2 ** (attempt - 1))
    delay = backoff_delay(attempt, base, cap, random.Random(seed))
    assert ceiling / 2 <= delay <= ceiling, f"expected a delay in [{ceiling / 2}, {ceiling}], got {delay}"


def test_backoff_is_capped_for_any_attempt_number() -> None:
    job = running_job(attempt=1030, max_attempts=2000, backoff_base=1.0, backoff_cap=3600.0)
    after = apply(job, decide_finish(job, RunResult(job.id, 1030, "failed", error="x"), NOW, POLICY))
    assert after.state == "failed"
    assert NOW + 1800 <= after.run_at <= NOW + 3600


def test_higher_priority_is_claimed_first() -> None:
    assert sort_key(100.0, 5, POLICY) < sort_key(100.0, 0, POLICY) < sort_key(100.0, -5, POLICY)


def test_fifo_within_one_priority() -> None:
    assert sort_key(100.0, 3, POLICY) < sort_key(100.5, 3, POLICY)


def test_waiting_ages_a_job_so_low_priority_is_not_starved() -> None:
    a = POLICY.aging_seconds_per_priority
    old_low = sort_key(0.0, 0, POLICY)
    assert sort_key(a - 1, 1, POLICY) < old_low, "a job one priority higher wins if the other waited less than A s"
    assert old_low < sort_key(a + 1, 1, POLICY), "a job that waited more than A s beats one a priority higher"
    assert old_low < sort_key(10 * a + 1, 10, POLICY)


def test_a_new_job_is_queued_or_scheduled_by_its_due_time() -> None:
    now_job = build_job({"task": {"kind": "shell", "command": "true"}}, NOW, POLICY)
    later = build_job({"task": {"kind": "shell", "command": "true"}, "delay": 30}, NOW, POLICY)
    assert (now_job.state, later.state, later.run_at) == ("queued", "scheduled", NOW + 30)


# ---------------------------------------------------------------- property: random operator and agent actions

_FINISH = st.tuples(st.just("finish"), st.sampled_from(["succeeded", "failed", "failed", "timeout", "cancelled"]),
                   st.booleans() | st.just(True))  # fmt: skip
_TICK = st.tuples(st.just("tick"), st.floats(0.0, 200.0))
# The agent's side (claim, finish, time passing) is drawn more often than operator actions, so
# most sequences get jobs through several attempts instead of bouncing off refusals.
ACTIONS = st.one_of(
    st.just(("claim",)),
    st.just(("claim",)),
    _FINISH,
    _FINISH,
    _TICK,
    st.just(("promote",)),
    st.just(("pause",)),
    st.just(("resume",)),
    st.just(("cancel",)),
    st.just(("retry",)),
    st.tuples(st.just("priority"), st.integers(-1000, 1000)),
    st.just(("lease_expired",)),
    st.just(("hand_back",)),
)


def _decide(job: Job, action: tuple[Any, ...], now: float, rng: random.Random) -> Change:
    kind = action[0]
    if kind == "pause":
        return decide_pause(job, now, POLICY)
    if kind == "resume":
        return decide_resume(job, now, POLICY)
    if kind == "cancel":
        return decide_cancel(job, now, POLICY)
    if kind == "retry":
        return decide_retry(job, now, POLICY)
    if kind == "priority":
        return decide_priority(job, action[1], now, POLICY)
    if kind == "promote":
        return decide_promote(job, now, POLICY)
    if kind == "claim":
        return decide_claim(job, "agent-a", now, POLICY)
    if kind == "finish":
        attempt = job.attempt if action[2] else job.attempt - 1  # False: a stale result from an older attempt
        return decide_finish(job, RunResult(job.id, attempt, action[1], error="boom"), now, POLICY, rng)
    if kind == "lease_expired":
        return decide_lease_expired(job, now, POLICY, rng)
    assert kind == "hand_back"
    return decide_hand_back(job, job.attempt, now, POLICY)


@settings(max_examples=400, deadline=None)
@given(
    delay=st.sampled_from([0.0, 50.0]),
    max_attempts=st.integers(1, 4),
    actions=st.lists(ACTIONS, min_size=20, max_size=80),
    seed=st.integers(0, 2**16),
)
def test_random_action_sequences_keep_the_invariants(
    delay: float, max_attempts: int, actions: list[tuple[Any, ...]], seed: int
) -> None:
    rng = random.Random(seed)
    now = NOW
    spec = {"task": {"kind": "shell", "command": "true"}, "delay": delay, "max_attempts": max_attempts}
    job = dataclasses.replace(build_job(spec, now, POLICY), id=1)
    states = {s.value for s in ALL_STATES}
    history = [job.state]
    for action in actions:
        if action[0] == "tick":
            now += action[1]
            continue
        before = dataclasses.replace(job)
        try:
            change = _decide(job, action, now, rng)
        except Conflict as exc:
            assert job == before, f"a refused {action} changed the job"
            assert exc.extra.get("state") == job.state, f"the refusal must name state {job.state}: {exc.to_dict()}"
            continue
        assert job == before, f"decide for {action} mutated its input"
        job = apply(job, change)
        history.append(job.state)
        where = f"after {action} (states so far {history})"
        assert job.state in states, where
        if job.state != before.state:
            assert JobState(job.state) in TRANSITIONS[JobState(before.state)], f"illegal move {where}"
            assert change.event == f"job.{job.state}", where
        if job.state == "running":
            assert 1 <= job.attempt <= job.max_attempts, f"attempt {job.attempt}/{job.max_attempts} {where}"
            assert job.lease_expires_at is not None, where
        else:
            assert job.lease_expires_at is None, where
        if job.state in FINAL_STATES:
            assert job.finished_at is not None, f"a {job.state} job has no finished_at {where}"
        else:
            assert job.finished_at is None, f"a {job.state} job has finished_at {where}"
        if job.state == "dead":
            assert job.attempt >= job.max_attempts, f"dead with attempts left {where}"
        if job.state == "failed" and before.state == "running":
            assert job.attempt < job.max_attempts and job.run_at > now, where
        if job.state == "paused":
            assert job.paused_from in {s.value for s in WAITING_STATES} - {"paused"}, where
