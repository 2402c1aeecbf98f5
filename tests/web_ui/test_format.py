"""The Jobs table's row of a job (web_ui.format.job_row), without a browser."""

from __future__ import annotations

from web_ui.format import NOTE_CHARS, job_row


def test_a_long_waiting_for_is_cut_with_an_ellipsis_and_shown_whole_on_hover() -> None:
    why = ("queue 'reports' is at its concurrency limit: 1 of 1 running; fairness key 'zed' is next of the 2 "
           "fairness keys with jobs waiting in queue 'reports'")  # fmt: skip
    row = job_row({"id": 55, "state": "queued", "waiting_for": why}, "")
    assert len(row["note"]) == NOTE_CHARS and row["note"].endswith("…"), row["note"]
    assert why.startswith(row["note"][:-1]) and row["note_title"] == why, row
    short = job_row({"id": 56, "state": "queued", "waiting_for": "queue 'reports' is paused"}, "")
    assert (short["note"], short["note_title"]) == ("queue 'reports' is paused", ""), short
