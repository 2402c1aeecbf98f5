"""The JobDeck web dashboard: a Reflex app that talks to the core only through core.client."""

from __future__ import annotations

import reflex as rx
from starlette.applications import Starlette
from starlette.routing import Mount

from web_ui import sessions
from web_ui.hub import HUB, run_hub
from web_ui.pages.jobs import JobsState, jobs_page
from web_ui.state import AppState


def _with_auth_routes(asgi: object) -> Starlette:
    """Mount the sign-in routes (/auth/done, /auth/logout) in front of Reflex's own app."""
    return Starlette(routes=[*sessions.ROUTES, Mount("/", app=asgi)])  # type: ignore[arg-type]


app = rx.App(
    api_transformer=_with_auth_routes,
    head_components=[rx.el.meta(name="description", content="JobDeck: live jobs, queues and agents")],
)
app.register_lifespan_task(run_hub)
HUB.app = app

app.add_page(jobs_page, route="/jobs", title="Jobs · JobDeck", on_load=[AppState.on_page_load, JobsState.load])
