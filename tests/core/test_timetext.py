"""Durations read the same in the CLI, the console and the dashboard (core.timetext.duration)."""

from __future__ import annotations

import pytest

from core.timetext import duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, ""),
        (-3, "0ms"),  # a clock step backwards is not a negative duration
        (0.0423, "42ms"),
        (0.9996, "1.0s"),  # rounds into the next unit, never "1000ms"
        (4.24, "4.2s"),
        (9.96, "10s"),
        (59.4, "59s"),
        (59.6, "1m00s"),  # never "60s" or "0m59s"
        (245, "4m05s"),
        (3599.9, "1h00m"),
        (11_520, "3h12m"),
        (86_399, "1d00h"),
        (2 * 86_400 + 4 * 3600 + 59, "2d04h"),
    ],
)
def test_a_duration_is_written_in_its_largest_two_units_without_spilling(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text
