"""What a page's input shows of a field (its bounds and starting value), read from the pydantic model that validates
it, so that each limit and default has one definition: the model's.

Templates call ``number_attrs(Model, "field")``, which renders ``min``, ``max`` and ``value`` as HTML attributes;
a field whose default is None shows the first of its ``examples`` as its starting value, if it has one.
"""

from __future__ import annotations

from typing import Any

import annotated_types
from markupsafe import Markup, escape
from pydantic import BaseModel
from pydantic_core import PydanticUndefined


def bounds(model: type[BaseModel], name: str) -> tuple[float | None, float | None]:
    """(lowest, highest) the field accepts; a strict bound (gt, lt) is given as itself, the input's step refines it."""
    low = high = None
    for item in model.model_fields[name].metadata:
        if isinstance(item, annotated_types.Ge):
            low = item.ge
        elif isinstance(item, annotated_types.Gt):
            low = item.gt
        elif isinstance(item, annotated_types.Le):
            high = item.le
        elif isinstance(item, annotated_types.Lt):
            high = item.lt
    return low, high  # type: ignore[return-value]


def start_value(model: type[BaseModel], name: str) -> Any:
    """The field's default, or its first example when it has no default (None: the input starts empty)."""
    info = model.model_fields[name]
    if info.default not in (None, PydanticUndefined):
        return info.default
    return info.examples[0] if info.examples else None


def number_attrs(model: type[BaseModel], name: str, value: bool = True, high: float | None = None) -> Markup:
    """``min="1" max="65536" value="512"``: what the model allows and starts with; ``high``: a lower limit of the
    surface the input posts to (the step stream's, say), where the model's own is higher."""
    low, most = bounds(model, name)
    high = most if high is None else high if most is None else min(high, most)
    parts = []
    if low is not None:
        parts.append(f'min="{escape(_number(low))}"')
    if high is not None:
        parts.append(f'max="{escape(_number(high))}"')
    start = start_value(model, name) if value else None
    if start is not None:
        parts.append(f'value="{escape(_number(start))}"')
    return Markup(" ".join(parts))


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
