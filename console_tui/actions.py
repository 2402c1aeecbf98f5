"""Every operator action of the console in one table: its key, where it applies, the permission
it needs and whether it asks first. Bindings, the help screen (`?`) and the command palette are
all made from it, so they cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding, BindingType


@dataclass(frozen=True)
class ActionSpec:
    """One action: `name` is the Textual action (`action_<name>` on the view that has it)."""

    name: str
    key: str
    title: str
    views: tuple[str, ...]
    permission: str | None = None  # None: anyone who can read
    destructive: bool = False
    show: bool = True  # in the footer
    help: str = ""


JOB_VIEWS = ("jobs", "dead", "detail")
NODE_VIEWS = (*JOB_VIEWS, "workflow")  # workflow: the selected node of a workflow's tree
ACTIONS: tuple[ActionSpec, ...] = (
    ActionSpec("new_job", "n", "New job", ("jobs", "dead"), "jobs.write", help="a form; the server checks it"),
    ActionSpec(
        "pause",
        "p",
        "Pause",
        (*NODE_VIEWS, "queues", "schedules", "workflows"),
        "jobs.write",
        help="a waiting job, a queue, a schedule or a workflow",
    ),
    ActionSpec(
        "resume",
        "u",
        "Resume",
        (*NODE_VIEWS, "queues", "schedules", "workflows"),
        "jobs.write",
        help="put a paused job, queue, schedule or workflow back",
    ),
    ActionSpec("priority_up", "plus", "Priority +1", JOB_VIEWS, "jobs.write", show=False, help="key +"),
    ActionSpec("priority_down", "minus", "Priority -1", JOB_VIEWS, "jobs.write", show=False, help="key -"),
    ActionSpec("priority_set", "equals_sign", "Priority", JOB_VIEWS, "jobs.write", help="set it: key =; -1000..1000"),
    ActionSpec(
        "cancel",
        "c",
        "Cancel",
        (*NODE_VIEWS, "workflows"),
        "jobs.write",
        destructive=True,
        help="a running job is stopped first; a workflow: every job not ended",
    ),
    ActionSpec(
        "retry",
        "R",
        "Retry",
        NODE_VIEWS,
        "jobs.write",
        help="run a finished job again, replay a dead one (in a workflow: what it cancelled waits again)",
    ),
    ActionSpec(
        "bulk_filter",
        "B",
        "Bulk",
        ("jobs", "dead"),
        "jobs.write",
        destructive=True,
        help="act on every job matching the filter (a dry-run count first)",
    ),
    ActionSpec(
        "new_schedule",
        "n",
        "New schedule",
        ("schedules",),
        "schedules.write",
        help="a form: cron, interval or once, zone, policies, exclusions; the fire times previewed as you type",
    ),
    ActionSpec(
        "edit_schedule",
        "e",
        "Edit",
        ("schedules",),
        "schedules.write",
        help="the cursor schedule in that form; only what changed is sent (from its next fire time on)",
    ),
    ActionSpec(
        "run_now",
        "x",
        "Run now",
        (*NODE_VIEWS, "schedules"),
        "jobs.write",
        help="a waiting job (delayed, a fire time's jitter, a retry's backoff) queued now, its priority kept; "
        "a schedule: one job from it now, outside its timetable and policies",
    ),
    ActionSpec(
        "backfill",
        "b",
        "Backfill",
        ("schedules",),
        "schedules.write",
        help="the runs of a past range's fire times: a dry-run count, then yes/no",
    ),
    ActionSpec("concurrency", "C", "Concurrency", ("queues",), "queues.configure", help="limit running jobs"),
    ActionSpec("rate_limit", "L", "Rate limit", ("queues",), "queues.configure", help="jobs started per second"),
    ActionSpec("key_limit", "K", "Key limit", ("queues",), "queues.configure", help="jobs of one concurrency key"),
    ActionSpec(
        "fair_share",
        "W",
        "Fair share",
        ("queues",),
        "queues.configure",
        show=False,  # the footer is full: in the help and the command palette
        help="claims rotate between fairness keys (on / off) and each key's weight",
    ),
    ActionSpec(
        "breaker_settings",
        "B",
        "Breakers",
        ("queues",),
        "queues.configure",
        help="its circuit breakers' numbers: failure ratio, window, reset time, min requests, wait or fail",
    ),
    ActionSpec(
        "reset_breaker",
        "X",
        "Reset breaker",
        ("queues",),
        "breakers.reset",
        help="close one of its circuit breakers now; the jobs it held go",
    ),
    ActionSpec(
        "drain",
        "d",
        "Drain agent",
        ("agents",),
        "agents.drain",
        destructive=True,
        help="no new work; it finishes what it runs",
    ),
    ActionSpec("toggle_select", "space", "Select", ("jobs", "dead"), show=False, help="mark rows for bulk actions"),
    ActionSpec("select_all", "a", "Select all", ("jobs", "dead"), show=False, help="mark every row shown"),
    ActionSpec("filter", "slash", "Filter", ("jobs", "dead", "events"), help="/ then state:… queue:… tag:… name"),
    ActionSpec("sort", "s", "Sort", ("jobs", "dead"), show=False, help="cycle the sort column (S reverses)"),
    ActionSpec("sort_reverse", "S", "Reverse sort", ("jobs", "dead"), show=False),
    ActionSpec("next_page", "right_square_bracket", "Next page", ("jobs", "dead", "alerts"), show=False, help="key ]"),
    ActionSpec(
        "prev_page", "left_square_bracket", "Previous page", ("jobs", "dead", "alerts"), show=False, help="key ["
    ),
    ActionSpec(
        "open",
        "enter",
        "Details",
        ("jobs", "dead", "workflows", "workflow"),
        help="the job's spec, attempts, output, events; a workflow's tree of jobs",
    ),
    ActionSpec("replay", "r", "Replay", ("alerts",), "notifications.manage", help="send the notification again"),
    ActionSpec("send_test", "t", "Send test", ("alerts",), "notifications.manage", help="a test to its channel"),
)
BY_NAME = {a.name: a for a in ACTIONS}
# Which permission an action needs depends on what it acts on.
PERMISSION_BY_VIEW = {"queues": {"pause": "queues.pause", "resume": "queues.pause"},
                      "schedules": {"pause": "schedules.write", "resume": "schedules.write",
                                    "run_now": "schedules.write", "backfill": "schedules.write",
                                    "new_schedule": "schedules.write", "edit_schedule": "schedules.write"}}  # fmt: skip

KEY_LABELS = {"plus": "+", "minus": "-", "equals_sign": "=", "space": "space", "slash": "/",
              "right_square_bracket": "]", "left_square_bracket": "[", "enter": "enter"}  # fmt: skip


def key_label(key: str) -> str:
    return KEY_LABELS.get(key, key)


def permission_of(action: str, view: str) -> str | None:
    """The permission `action` needs in `view`."""
    return PERMISSION_BY_VIEW.get(view, {}).get(action) or BY_NAME[action].permission


def bindings_for(view: str) -> list[BindingType]:
    """The key bindings of a view, from the table."""
    return [
        Binding(a.key, a.name, a.title, show=a.show, key_display=key_label(a.key)) for a in ACTIONS if view in a.views
    ]
