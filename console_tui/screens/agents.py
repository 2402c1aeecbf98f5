"""The Agents view: slots used / total, heartbeat age, labels, current jobs; drain."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text

from console_tui.actions import bindings_for
from console_tui.screens.base import Json
from console_tui.screens.dialogs import ConfirmScreen
from console_tui.screens.tables import TableView
from core.client import agent_queues_text


class AgentsView(TableView):
    view_name: ClassVar[str] = "agents"
    title: ClassVar[str] = "Agents"
    BINDINGS = bindings_for("agents")
    COLUMNS = (("name", "AGENT", 22), ("status", "STATUS", 9), ("slots", "SLOTS", 10), ("heartbeat", "HEARTBEAT", 10),
               ("queues", "QUEUES", 14), ("labels", "LABELS", 18), ("jobs", "RUNNING JOBS", 30))  # fmt: skip
    POLL_SECONDS = 2.0

    async def fetch(self) -> list[Json]:
        return await self.console.client.agents()

    def cells(self, a: Json) -> list[Any]:
        d = self.console.fmt
        running = a.get("running") or []
        jobs = ", ".join(str(j) for j in running[:8]) + (f" +{len(running) - 8}" if len(running) > 8 else "")
        name = a["name"] if not d.masked else a["name"].split("-")[0] + "-…"
        return [
            name,
            Text("draining", style="bold yellow") if a.get("draining") else Text("active", style="green"),
            Text(f"{a.get('slots_used', 0)}/{a.get('slots', 0)}", justify="right"),
            Text(d.duration(a.get("heartbeat_age")), justify="right"),
            agent_queues_text(a),
            ",".join(f"{k}={v}" for k, v in sorted((a.get("labels") or {}).items())) or "-",
            jobs or "-",
        ]

    def wants(self, event: Json) -> bool:
        return str(event.get("type", "")).startswith(("agent.", "job.started", "job.succeeded", "job.failed"))

    async def action_drain(self) -> None:
        a = self.current()
        if a is None:
            return

        async def confirmed(yes: bool | None) -> None:
            if yes:
                await self.call(self.console.client.drain_agent(a["name"]), f"agent {a['name']} is draining")
                await self.reload()

        self.console.push_screen(ConfirmScreen(f"Drain agent {a['name']}?",
                                               "It takes no new work and finishes what it runs.", yes="Drain"),
                                 confirmed)  # fmt: skip
