"""The job actions every screen that points at a job shares (the Jobs and Dead lists, a job's
detail, a workflow's node): pause, resume, retry, run now, cancel after a question, and priority +1 / -1.
A screen says what they act on (`_act`, `_nudge`) and what to ask before a cancel."""

from __future__ import annotations

from console_tui.screens.base import ConsoleMixin
from console_tui.screens.dialogs import ConfirmScreen


class JobActions(ConsoleMixin):
    """Mixed into a screen or view before its Textual base class."""

    async def _act(self, action: str, verb: str) -> None:
        """Run `action` (pause, resume, retry, run-now, cancel) on what the screen points at; `verb` for the notice."""
        raise NotImplementedError

    def cancel_question(self) -> tuple[str, str] | None:
        """The question and the detail line asked before a cancel; None: nothing to cancel."""
        raise NotImplementedError

    async def _nudge(self, step: int) -> None:
        """Move the priority of what the screen points at by `step`."""
        raise NotImplementedError

    async def action_pause(self) -> None:
        await self._act("pause", "paused")

    async def action_resume(self) -> None:
        await self._act("resume", "resumed")

    async def action_retry(self) -> None:
        await self._act("retry", "retried")

    async def action_run_now(self) -> None:
        """A scheduled job (or a failed one waiting for its retry) is queued now (POST /v1/jobs/{id}/run-now)."""
        await self._act("run-now", "queued now")

    async def action_cancel(self) -> None:
        question = self.cancel_question()
        if question is None:
            return

        async def confirmed(yes: bool | None) -> None:
            if yes:
                await self._act("cancel", "cancelled")

        self.console.push_screen(ConfirmScreen(*question, yes="Cancel"), confirmed)

    async def action_priority_up(self) -> None:
        await self._nudge(+1)

    async def action_priority_down(self) -> None:
        await self._nudge(-1)
