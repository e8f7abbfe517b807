"""One module per feature; each exposes ``router(*, web: Web) -> APIRouter``, listed in ``app.web.app.ROUTERS``."""
