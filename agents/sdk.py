"""The Python task SDK: declare a task once, run it on agents, enqueue it with type checking.

    from agents.sdk import task

    @task(queue="emails", max_attempts=5, timeout=30)
    async def send_welcome(user_id: int, *, lang: str = "en") -> None: ...

    # anywhere with a client (type-checked against the function's signature):
    await client.enqueue(send_welcome, 42, lang="fr")

Agents load tasks with `jobdeck agent --import myproject.tasks`; a task is named
`module:function` and that name is what a job carries. Inside a running task,
`current_job()` tells which job and attempt this is (to make side effects idempotent).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")

_REGISTRY: dict[str, Callable[..., Any]] = {}
_IMPORTED: list[str] = []  # the modules the agent was told to import (`--import`), in order


@dataclass(frozen=True)
class Task(Generic[P, R]):
    """A registered task: call it to run it here, `spec(...)` (or `client.enqueue`) to queue it."""

    fn: Callable[P, R]
    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """The job that runs this task with these arguments (JSON-able arguments only)."""
        return {"task": {"kind": "python", "function": self.name, "args": list(args), "kwargs": dict(kwargs)},
                "name": self.name.rsplit(":", 1)[-1], **self.options}  # fmt: skip


@overload
def task(fn: Callable[P, R], /) -> Task[P, R]: ...
@overload
def task(
    *,
    queue: str = ...,
    priority: int = ...,
    max_attempts: int = ...,
    timeout: float | None = ...,
    backoff: dict[str, float] | None = ...,
    labels: dict[str, str] | None = ...,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...


def task(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Register a function (sync or async) as a task, with job defaults: queue, priority,
    max_attempts, timeout, backoff ({"base", "cap"}), labels."""
    allowed = {"queue", "priority", "max_attempts", "timeout", "backoff", "labels"}
    unknown = set(options) - allowed
    if unknown:
        raise TypeError(f"unknown task option(s) {sorted(unknown)}; use {sorted(allowed)}")
    clean = {k: v for k, v in options.items() if v is not None}

    def wrap(f: Callable[..., Any]) -> Task[Any, Any]:
        name = f"{f.__module__}:{f.__qualname__}"
        _REGISTRY[name] = f
        return Task(f, name, clean)

    return wrap(fn) if fn is not None else wrap


def registered(name: str) -> Callable[..., Any] | None:
    """The function registered under `name`, if any."""
    return _REGISTRY.get(name)


def registered_names() -> list[str]:
    """Every registered task name."""
    return sorted(_REGISTRY)


def note_imported(module: str) -> None:
    """Remember that the agent imported `module` for its tasks (its worker processes import it too)."""
    if module not in _IMPORTED:
        _IMPORTED.append(module)


def task_modules() -> list[str]:
    """The modules a worker process imports before its first call: the agent's `--import` modules,
    then the module of every registered task, so every `@task` name resolves there as it does here."""
    found = list(_IMPORTED)
    for name in _REGISTRY:
        module = name.partition(":")[0]
        if module not in found and module != "__main__":
            found.append(module)
    return found


class CurrentJob(NamedTuple):
    """The job a task is running for: `id` and `attempt` (1, 2, ...), and the task's `env` with its
    secrets resolved (python tasks' own variables; sync tasks also find them in os.environ).
    A named tuple: made for every async call on the agent's hot path, it must cost next to nothing."""

    id: int
    attempt: int
    env: Mapping[str, str]


_CURRENT: ContextVar[CurrentJob | None] = ContextVar("jobdeck_current_job", default=None)


def current_job() -> CurrentJob:
    """The job this task runs for, e.g. `f"order-{current_job().id}"` as an idempotency key.
    Raises LookupError outside a task run by an agent (e.g. when a test calls the function itself)."""
    job = _CURRENT.get()
    if job is None:
        raise LookupError("current_job() is only known inside a task run by a JobDeck agent")
    return job


def enter_job(job: CurrentJob) -> Token[CurrentJob | None]:
    """Make `job` the current job of this context (the agent does this around each call)."""
    return _CURRENT.set(job)


def leave_job(token: Token[CurrentJob | None]) -> None:
    """Undo `enter_job`."""
    _CURRENT.reset(token)
