"""The agent's state folder keeps unacknowledged results a file per batch, and reads them back
after a restart (agents/state.py)."""

from __future__ import annotations

from pathlib import Path

import orjson

from agents.state import AgentStateDir


def _report(job_id: int, attempt: int = 1) -> dict[str, object]:
    return {"job_id": job_id, "attempt": attempt, "outcome": "succeeded", "result": job_id}


def _folder(path: Path) -> AgentStateDir:
    state = AgentStateDir(path)
    state.acquire()
    return state


def test_a_batch_is_one_file_kept_until_every_result_in_it_is_acknowledged(tmp_path: Path) -> None:
    state = _folder(tmp_path)
    state.keep_results([_report(i) for i in range(1, 33)])
    state.keep_results([_report(40)])
    files = sorted(p.name for p in state.results.glob("*.json"))
    assert files == ["1-1.json", "40-1.json"], files
    for i in range(1, 32):
        state.drop_result(i, 1)
    assert (state.results / "1-1.json").exists(), "one result of the batch is not acknowledged yet"
    state.release()

    again = _folder(tmp_path)  # a restart: the batch's results are sent again, all of them
    kept = again.kept_results()
    assert sorted(int(r["job_id"]) for r in kept) == [*range(1, 33), 40], kept  # type: ignore[call-overload]
    for i in range(1, 33):
        again.drop_result(i, 1)
    assert sorted(p.name for p in again.results.glob("*.json")) == ["40-1.json"]
    again.drop_result(40, 1)
    again.drop_result(40, 1)  # acknowledged twice (sent again): nothing left to forget
    assert not list(again.results.glob("*")), list(again.results.glob("*"))


def test_a_result_file_of_an_older_agent_is_read_and_forgotten(tmp_path: Path) -> None:
    """Agents before batch files wrote one report (a JSON object) per file."""
    state = _folder(tmp_path)
    (state.results / "7-2.json").write_bytes(orjson.dumps(_report(7, 2)))
    assert state.kept_results() == [_report(7, 2)]
    state.drop_result(7, 2)
    assert not list(state.results.glob("*.json"))
