"""JSON as kvscope reads and writes it: plain finite numbers only (no NaN, Infinity or 1e400), nesting at most ``MAX_DEPTH`` deep.

Python's ``json`` accepts ``NaN`` and ``Infinity`` (which are not JSON), turns
``1e400`` into infinity, and raises ``RecursionError`` on deeply nested input;
``loads`` turns each into a ``ValueError`` whose message says what was wrong,
so the reader can name the file and line. ``dumps`` writes a non-finite number
as null, as the runs database (msgspec) and FastAPI's SSE messages do, so that
nothing kvscope writes breaks a strict reader (a browser's ``JSON.parse``).
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 64  # a measurement line, a trace line, a cost profile or a model config is 1-3 levels deep


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# One decoder for every call: ``json.loads`` with hooks builds a new one each time, a third of a trace line's parse.
DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant)


def loads(text: str | bytes) -> Any:
    """The parsed value; ``ValueError`` for malformed JSON, a non-finite number or nesting deeper than ``MAX_DEPTH``."""
    try:
        if isinstance(text, bytes):  # as json.loads reads bytes: UTF-8, -16 or -32, told apart by the first bytes
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        value = DECODER.decode(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg}, line {exc.lineno} column {exc.colno}") from None
    # Nesting deeper than MAX_DEPTH needs more than MAX_DEPTH opening brackets: a line of a trace (one object, one
    # list of millions of ids) is cleared by counting them, without walking the ids.
    opening = (b"[", b"{") if isinstance(text, bytes) else ("[", "{")
    if text.count(opening[0]) + text.count(opening[1]) > MAX_DEPTH and _depth(value) > MAX_DEPTH:  # type: ignore[arg-type]
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    return value


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:
            stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps(value, **options)``, with NaN and infinities written as null (at no cost when there are none)."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:  # a non-finite number somewhere (or a circular reference, which raises again below)
        return json.dumps(_finite_only(value), allow_nan=False, **options)


def _finite_only(value: Any) -> Any:
    """``value`` with every non-finite float as None (lists, tuples and dicts rebuilt; anything else as it is)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_only(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_only(v) for v in value]
    return value
