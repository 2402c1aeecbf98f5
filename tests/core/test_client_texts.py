"""The people's texts core.client gives every front end (CLI, console, dashboard), so all three say the same."""

from __future__ import annotations

from core.client import agent_queues_text, breaker_window_text, key_limit_text


def test_a_per_key_limit_reads_in_the_singular_and_the_plural() -> None:
    assert key_limit_text(1) == "at most 1 job of one concurrency key runs at once"
    assert key_limit_text(3) == "at most 3 jobs of one concurrency key run at once"
    assert key_limit_text(None) == "no per-key limit"


def test_an_agents_queues_read_as_its_queues_flag_said_them() -> None:
    bulk = {"queues": ["*"], "queue_slots": {"reports": 2, "emails": 1}}
    assert agent_queues_text(bulk) == "reports:2,emails:1,*"
    assert agent_queues_text({"queues": ["a", "b"], "queue_slots": {"a": 4}}) == "a:4,b"
    assert agent_queues_text({"queues": None, "queue_slots": {}}) == "*"


def test_an_open_breaker_says_nothing_is_sent_not_that_nothing_failed() -> None:
    closed = {"state": "closed", "requests": 4.0, "failures": 1.0, "settings": {"window": 10.0}}
    assert breaker_window_text(closed) == "4 sent, 1 failed in 10 s"
    for state in ("open", "half_open"):
        assert breaker_window_text({**closed, "state": state, "requests": 0.0, "failures": 0.0}) == (
            "nothing sent while open"
        )
