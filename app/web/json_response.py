"""JSON answers as strict clients read them: a non-finite number is written null (``sim.bounds.jsontext.dumps``), never
``NaN`` (a browser's ``JSON.parse`` refuses it) and never a 500 (Starlette's ``JSONResponse`` refuses to write it);
a lone surrogate (``"\\ud800"`` in a body, repeated by its 422) is written as JSON's own escape, never a 500 either."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse as _StarletteJSON

from sim.bounds import jsontext


class JSONResponse(_StarletteJSON):
    """Starlette's JSON answer (compact, UTF-8), every number finite; the app's default response class too."""

    def render(self, content: Any) -> bytes:
        text = jsontext.dumps(content, ensure_ascii=False, separators=(",", ":"))
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate has no UTF-8 form; JSON writes it \ud800 (RFC 8259 section 7), and so does ensure_ascii.
            return jsontext.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")
