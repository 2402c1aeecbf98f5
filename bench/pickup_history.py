"""What the pick-up latency history costs the claim (core/store/pickup.py: one upsert per claim batch,
and held_at written for queues a limit cut short): the e2e bench's resumed drain on a node with the
history kept (the default) vs one with JOBDECK_PICKUP_HISTORY=false, in alternating turns of one run,
each turn a fresh node on a fresh store. The ratio is the figure: 1.00 is free.
"""

from __future__ import annotations

from bench.context import RunContext
from bench.report import Figure, load_average
from bench.throughput import run_resumed

ROUNDS = 3
MODES = {"off": {"JOBDECK_PICKUP_HISTORY": "false"}, "on": {"JOBDECK_PICKUP_HISTORY": "true"}}


async def pickup_history_cost(ctx: RunContext) -> list[Figure]:
    """Drain rate with the history off and on (ROUNDS turns each, alternating), and on / off."""
    drain: dict[str, list[float]] = {m: [] for m in MODES}
    kept = 0
    for r in range(ROUNDS):
        for mode, env in MODES.items():
            async with ctx.server(f"pickup-history-{mode}-{r}", ctx.scale.e2e_slots, env) as (srv, client):
                rate, *_ = await run_resumed(ctx, [srv], [client])
                drain[mode].append(rate)
                if mode == "on":  # the history counted every job the drain claimed
                    pickup = (await client.stats_history("15m"))["pickup"]
                    kept += sum(pickup["held"]["jobs"]) + sum(pickup["slot"]["jobs"])
            ctx.progress(f"pick-up history {mode}, round {r + 1}: drain {drain[mode][-1]:,.0f} jobs/s")
    mean = {m: sum(v) / len(v) for m, v in drain.items()}
    figures = [
        Figure("pick-up history cost", f"drain, history {m}", mean[m], "jobs/s", None,
               f"{ctx.scale.e2e_jobs:,} jobs a turn; turns {', '.join(f'{x:,.0f}' for x in drain[m])}")
        for m in MODES
    ]  # fmt: skip
    figures.append(Figure("pick-up history cost", "drain: history on / off", mean["on"] / mean["off"], "ratio", None,
                          f"1.00 = free; {kept:,} of {ROUNDS * ctx.scale.e2e_jobs:,} jobs in the history; "
                          f"load {load_average()}"))  # fmt: skip
    return figures
