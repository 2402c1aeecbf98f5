"""/docs: Swagger UI served by the node itself (from the swagger-ui-bundle-v2 package), so the API's
documentation works without reaching any CDN (air-gapped clusters, offline laptops)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.requests import Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

ASSETS = "/docs/assets"


def mount_docs(app: FastAPI) -> None:
    """Serve /docs and its assets (public, like the document at /openapi.json)."""
    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    async def docs(_: Request) -> Response:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} - docs",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )

    app.add_route("/docs", docs, include_in_schema=False)
