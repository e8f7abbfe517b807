"""``make_app()``: the FastAPI app of ``kvscope serve``, built from a short explicit list of feature routers.

To add a feature, write ``app/web/routes/<feature>.py`` with
``def router(*, web: Web) -> APIRouter`` and append the module to ``ROUTERS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import version

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.middleware.gzip import GZipMiddleware

from app.web import errors
from app.web.context import STATIC_DIR, Web
from app.web.deadline import Deadlines
from app.web.disconnects import QuietDisconnects
from app.web.guard import RequestGuard, upload_paths
from app.web.headers import SecurityHeaders
from app.web.json_response import JSONResponse
from app.web.proxied import ProxyFirst
from app.web.routes import (
    advise,
    analysis,
    assets,
    calibrate,
    dashboard,
    docs,
    fleet,
    fleet_panel,
    health,
    live,
    replay,
    runs,
    simulate,
    watch,
)

ROUTERS = [health, simulate, fleet, fleet_panel, dashboard, live, replay, analysis, advise, calibrate, watch, docs, runs, assets]


def _lifespan(web: Web) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        web.workers.close()  # shutting down: running simulations stop at their next request

    return lifespan


def make_app(web: Web | None = None) -> FastAPI:
    web = web or Web()
    app = FastAPI(
        default_response_class=JSONResponse,  # non-finite numbers as null, never a 500 (app.web.json_response)
        title="kvscope",
        version=version("kvscope"),
        summary="What a GPU prefix cache and a CPU offload tier do to time-to-first-token, step by step.",
        openapi_url=docs.OPENAPI_URL,
        docs_url=None,  # FastAPI's own /docs and /redoc load their scripts from a CDN; routes/docs.py serves ours
        redoc_url=None,
        lifespan=_lifespan(web),
    )
    app.state.web = web
    errors.install(app)
    app.add_middleware(GZipMiddleware, minimum_size=1024)  # SSE (text/event-stream) is never compressed
    app.add_middleware(SecurityHeaders)
    app.add_middleware(QuietDisconnects)
    app.add_middleware(Deadlines, default_s=web.workers.budget.seconds)  # inside ProxyFirst: proxied paths skip it
    app.add_middleware(ProxyFirst, table=web.proxied)  # outside the above: proxied requests skip them
    routers = [feature.router(web=web) for feature in ROUTERS]
    for routes in routers:
        app.include_router(routes)
    # Outermost: a refused request reaches nothing, proxied paths included. Its upload routes are those marked so.
    app.add_middleware(RequestGuard, uploads=upload_paths(r for routes in routers for r in routes.routes))
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
