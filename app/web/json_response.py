"""JSON answers as strict clients read them: a non-finite number is written null (``sim.bounds.jsontext.dumps``), never
``NaN`` (a browser's ``JSON.parse`` refuses it) and never a 500 (Starlette's ``JSONResponse`` refuses to write it)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse as _StarletteJSON

from sim.bounds import jsontext


class JSONResponse(_StarletteJSON):
    """Starlette's JSON answer (compact, UTF-8), every number finite; the app's default response class too."""

    def render(self, content: Any) -> bytes:
        return jsontext.dumps(content, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
