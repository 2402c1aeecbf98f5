from __future__ import annotations

from tests.conftest import RunningNode


async def test_a_shell_job_runs_and_keeps_its_output(running: RunningNode) -> None:
    job = await running.client.submit({"task": {"kind": "shell", "command": "echo hello; echo oops >&2"}})
    done = await running.client.wait_for(job["id"], timeout=10)
    assert done["state"] == "succeeded", done
    attempts = await running.client.attempts(job["id"])
    assert "hello" in attempts[0]["output"] and "oops" in attempts[0]["output"], attempts
