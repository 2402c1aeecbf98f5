"""The agent's pool of worker processes for sync python tasks: a call that must stop can be stopped.

A sync function cannot be interrupted on a thread, so each call runs in a worker process
(agents/worker.py), one call at a time per worker. Workers start when first needed and are kept
for the next call; one that times out or is cancelled is terminated like a shell command (SIGTERM
to its process group, SIGKILL after the kill grace) and a fresh one takes its place next time; one
that crashes is a failed attempt. At most `size` (the agent's slots) run at once, and a worker idle
for `idle_seconds` exits. Workers are exec'd (`python -m agents.worker`), never forked from the
agent's event loop, and die with the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from agents import sdk, tasknames
from agents.process import describe_exit, stop_group
from agents.secrets import task_environ

log = logging.getLogger("jobdeck.agent")

IDLE_SECONDS = 60.0
START_TIMEOUT = 60.0  # importing the task modules may take a while
REPLY_LIMIT = 8 * 1024 * 1024  # the worker caps a reply at about 1 MiB
STRAY_BYTES = 4096  # what a worker printed outside a call, kept for the error if it dies starting


class WorkerFailed(Exception):
    """A worker died (or could not start); the message says how."""


@dataclass(slots=True)
class Reply:
    """How a call ended in the worker."""

    ok: bool
    result: Any = None
    error: str | None = None
    retryable: bool = True


class Worker:
    """One worker process: its pipes, and where its output goes during a call."""

    def __init__(self, proc: asyncio.subprocess.Process, output_fd: int) -> None:
        self.proc = proc
        self.output_fd = output_fd
        self.sink: Callable[[bytes], None] | None = None
        self.stray = b""
        self.calls = 0
        self.start_seconds = 0.0
        self.retire: asyncio.TimerHandle | None = None
        self._open = True
        self.exited: asyncio.Future[int] = asyncio.ensure_future(proc.wait())
        asyncio.get_running_loop().add_reader(output_fd, self._read_output)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read_output(self) -> None:
        while self._take_output():
            pass

    def _take_output(self) -> bool:
        """Read once from the output pipe; False when nothing more is there now."""
        if not self._open:
            return False
        try:
            data = os.read(self.output_fd, 65536)
        except (BlockingIOError, InterruptedError):
            return False
        if not data:  # the worker (and any child of it) closed the pipe
            asyncio.get_running_loop().remove_reader(self.output_fd)
            return False
        if self.sink is not None:
            self.sink(data)
        else:
            self.stray = (self.stray + data)[-STRAY_BYTES:]
            log.info("python worker %d: %s", self.pid, data.decode("utf-8", "replace").rstrip())
        return True

    def drain(self) -> None:
        """Take what the worker wrote so far (it writes a call's output before the call's reply)."""
        self._read_output()

    async def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps(message) + b"\n")
        await self.proc.stdin.drain()

    async def receive(self) -> dict[str, Any]:
        """The next reply, or WorkerFailed if the process ends first."""
        assert self.proc.stdout is not None
        reading: asyncio.Future[bytes] = asyncio.ensure_future(self.proc.stdout.readline())
        try:
            either: list[asyncio.Future[Any]] = [reading, self.exited]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            line = await reading if reading.done() else b""
        except (ValueError, ConnectionError) as exc:
            raise WorkerFailed(f"the worker process sent an unreadable reply ({exc})") from None
        finally:
            reading.cancel()
        if not line:
            code = await self.exited
            raise WorkerFailed(f"the worker process {self.pid} died ({describe_exit(code)})")
        reply: dict[str, Any] = orjson.loads(line)
        return reply

    def close_pipes(self) -> None:
        """Collect the last output, then close the output pipe (once)."""
        self.drain()
        if self._open:
            self._open = False
            asyncio.get_running_loop().remove_reader(self.output_fd)
            os.close(self.output_fd)
        if self.retire is not None:
            self.retire.cancel()
        self.sink = None


class WorkerPool:
    """Up to `size` worker processes running sync python calls, each call in a worker of its own."""

    def __init__(self, size: int, idle_seconds: float = IDLE_SECONDS) -> None:
        self.size = size
        self.idle_seconds = idle_seconds
        self._slots = asyncio.Semaphore(size)
        self._idle: list[Worker] = []
        self._busy: set[Worker] = set()
        self._stopping: set[asyncio.Task[None]] = set()
        self.started = 0  # workers started so far (for tests and benchmarks)
        self.start_seconds: list[float] = []  # how long each took to be ready, the last 100

    def pids(self) -> list[int]:
        """The process ids of the live workers, idle and busy."""
        return [w.pid for w in [*self._idle, *self._busy]]

    async def call(
        self,
        request: dict[str, Any],
        write: Callable[[bytes], None],
        kill_grace: float,
    ) -> Reply:
        """Run `request` ({function, args, kwargs, env, job_id, attempt}) in a worker; its output goes
        to `write`. Cancelling the call terminates the worker (SIGTERM, SIGKILL after `kill_grace`)."""
        async with self._slots:
            try:
                worker = await self._take()
            except WorkerFailed as exc:
                return Reply(False, error=f"cannot start a python worker process: {exc}")
            worker.sink = write
            self._busy.add(worker)
            try:
                await worker.send({"type": "call", **request})
                reply = await worker.receive()
            except asyncio.CancelledError:
                self._busy.discard(worker)
                await asyncio.shield(self._stop(worker, kill_grace))
                raise
            except (WorkerFailed, ConnectionError) as exc:
                self._busy.discard(worker)
                await asyncio.shield(self._stop(worker, 0.0))
                return Reply(False, error=f"{exc} while running this task; a new worker takes its place")
            worker.drain()
            worker.sink = None
            self._busy.discard(worker)
            self._idle.append(worker)
            worker.calls += 1
            if worker.retire is not None:
                worker.retire.cancel()
            worker.retire = asyncio.get_running_loop().call_later(self.idle_seconds, self._retire, worker)
        return Reply(bool(reply.get("ok")), reply.get("result"), reply.get("error"), bool(reply.get("retryable", True)))

    async def _take(self) -> Worker:
        while self._idle:
            worker = self._idle.pop()  # the most recently used: the others grow idle and retire
            if not worker.exited.done():
                return worker
            worker.close_pipes()
        return await self._start()

    async def _start(self) -> Worker:
        began = time.monotonic()
        output_r, output_w = os.pipe()
        os.set_blocking(output_r, False)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-u", "-m", "agents.worker", str(os.getpid()),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=output_w,
                env=task_environ(), start_new_session=True, limit=REPLY_LIMIT,
            )  # fmt: skip
        except OSError as exc:
            os.close(output_r)
            raise WorkerFailed(str(exc)) from None
        finally:
            os.close(output_w)
        worker = Worker(proc, output_r)
        self.started += 1
        try:
            modules = list(dict.fromkeys([*sdk.task_modules(), *tasknames.resolved_modules()]))
            await worker.send({"type": "init", "sys_path": sys.path, "modules": modules})
            async with asyncio.timeout(START_TIMEOUT):
                ready = await worker.receive()
        except BaseException as exc:
            await asyncio.shield(self._stop(worker, 0.0))
            if isinstance(exc, WorkerFailed | TimeoutError | ConnectionError):
                said = worker.stray.decode("utf-8", "replace").strip()[-1000:]
                raise WorkerFailed(f"{exc or 'no answer in time'}{': ' + said if said else ''}") from None
            raise
        for problem in ready.get("problems") or []:
            log.warning("python worker %d: %s", worker.pid, problem)
        worker.start_seconds = time.monotonic() - began
        self.start_seconds = [*self.start_seconds[-99:], worker.start_seconds]
        return worker

    async def _stop(self, worker: Worker, grace: float) -> None:
        """Terminate the worker and anything it started, then collect what it wrote."""
        if worker.exited.done():  # it died by itself: what it started dies too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(worker.pid, signal.SIGKILL)
        else:
            await stop_group(worker.proc, grace)
        worker.close_pipes()

    def _retire(self, worker: Worker) -> None:
        """A worker idle for `idle_seconds` exits (closing its stdin asks it to)."""
        if worker in self._idle:
            self._idle.remove(worker)
            self._spawn_stop(worker)

    def _spawn_stop(self, worker: Worker) -> None:
        async def stop() -> None:
            if worker.proc.stdin is not None:
                worker.proc.stdin.close()
            try:
                await asyncio.wait_for(asyncio.shield(worker.exited), 5.0)
            except TimeoutError:
                await stop_group(worker.proc, 1.0)
            worker.close_pipes()

        task = asyncio.create_task(stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def close(self) -> None:
        """Stop every worker: idle ones are asked to exit, busy ones are terminated."""
        for worker in self._idle:
            self._spawn_stop(worker)
        self._idle.clear()
        busy, self._busy = list(self._busy), set()
        await asyncio.gather(*(self._stop(w, 1.0) for w in busy), *list(self._stopping), return_exceptions=True)
