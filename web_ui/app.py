"""The JobDeck web dashboard: a Reflex app that talks to the core only through core.client."""

from __future__ import annotations

import reflex as rx
from starlette.applications import Starlette
from starlette.routing import Mount

from web_ui import sessions
from web_ui.hub import HUB, run_hub
from web_ui.pages.fleet import AgentsState, QueuesState, agents_page, queues_page
from web_ui.pages.job_detail import ROUTE as JOB_ROUTE
from web_ui.pages.job_detail import JobDetailState, job_detail_page
from web_ui.pages.jobs import JobsState, jobs_page
from web_ui.pages.notifications import NotificationsState, notifications_page
from web_ui.pages.overview import OverviewState, overview_page
from web_ui.pages.records import AuditState, DeadState, audit_page, dead_page
from web_ui.pages.schedules import SchedulesState, schedules_page
from web_ui.pages.workflows import DETAIL_ROUTE as WORKFLOW_ROUTE
from web_ui.pages.workflows import (
    WorkflowDetailState,
    WorkflowsState,
    workflow_detail_page,
    workflows_page,
)
from web_ui.state import AppState


def _with_auth_routes(asgi: object) -> Starlette:
    """Mount the sign-in routes (/auth/done, /auth/logout) in front of Reflex's own app."""
    return Starlette(routes=[*sessions.ROUTES, Mount("/", app=asgi)])  # type: ignore[arg-type]


app = rx.App(
    api_transformer=_with_auth_routes,
    stylesheets=["/dashboard.css"],
    head_components=[rx.el.meta(name="description", content="JobDeck: live jobs, queues and agents")],
)
app.register_lifespan_task(run_hub)
HUB.app = app

PAGES = (
    (overview_page, "/", "Overview", OverviewState),
    (jobs_page, "/jobs", "Jobs", JobsState),
    (job_detail_page, JOB_ROUTE, "Job", JobDetailState),
    (queues_page, "/queues", "Queues", QueuesState),
    (agents_page, "/agents", "Agents", AgentsState),
    (schedules_page, "/schedules", "Schedules", SchedulesState),
    (workflows_page, "/workflows", "Workflows", WorkflowsState),
    (workflow_detail_page, WORKFLOW_ROUTE, "Workflow", WorkflowDetailState),
    (dead_page, "/dead", "Dead letters", DeadState),
    (audit_page, "/audit", "Audit log", AuditState),
    (notifications_page, "/notifications", "Notifications", NotificationsState),
)
for page, route, title, state in PAGES:
    app.add_page(page, route=route, title=f"{title} · JobDeck", on_load=[AppState.on_page_load, state.load])
