"""Checking a scenario input for the web: a JSON body's strict types, the errors of its fields, of their combination and of the stream's limits.

Errors are pydantic-style dicts (``loc``, ``msg``, ``type``) with ``loc``
naming the body field (empty for a problem of the combination), so the API can
answer 422 with them and the page can show each beside its field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, BeforeValidator, Field, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from app.costs_profile import served_costs
from app.scenario_input import ScenarioInput, with_serving
from sim.bounds.budget import Budget, Cost, OverBudget
from sim.workloads.scenario import MAX_DOCS, Scenario

# The step stream sends every tier's occupancy per request and the page draws
# every document as a tile: bounded far below what /api/simulate accepts.
MAX_STREAM_DOCS = 200
MAX_STREAM_REQUESTS = 1_000  # per run
MAX_PACE_MS = 10_000


def strict_json(model: type[BaseModel]) -> BeforeValidator:
    """A JSON body's types as JSON has them: ``body: Annotated[Model, strict_json(Model)]``.

    FastAPI validates the parsed body in pydantic's lax Python mode, which takes ``true`` for 1, ``"3"`` for 3 and
    ``3.0`` for an integer; here it is read as pydantic reads JSON in strict mode (where an array still makes a
    tuple), so each of those is a 422 at its field. Forms and links post text and keep the lax mode (their values
    are strings by nature). A string JSON can carry but Unicode cannot (a lone surrogate, ``"\\ud800"``) is a 422 at
    its field too: pydantic's JSON reader refuses it without naming one.
    """

    def validate(value: Any) -> Any:
        if isinstance(value, model):
            return value
        if isinstance(value, (bytes, str)):
            # A body FastAPI did not parse as JSON (sent as text/plain, say) reaches here as its bytes: refused as
            # lax validation refuses it, a 422 asking for an object (JSON's types need JSON's content type).
            return model.model_validate(value, strict=True)
        try:
            return model.model_validate_json(json.dumps(value), strict=True)
        except ValidationError as exc:
            if any(e["type"] == "json_invalid" for e in exc.errors()) and (found := _lone_surrogate(value)):
                path, text = found
                error = PydanticCustomError("string_unicode", "Input should be Unicode text; it has a lone surrogate (a \\ud800-\\udfff escape)")
                raise ValidationError.from_exception_data(model.__name__, [InitErrorDetails(type=error, loc=path, input=text)]) from None
            raise

    return BeforeValidator(validate)


_SURROGATE = re.compile("[\ud800-\udfff]")  # what is left of a surrogate escape that made no pair


def _lone_surrogate(value: Any) -> tuple[tuple[str | int, ...], str] | None:
    """(where, the string) of the first string in ``value`` holding a lone surrogate, or None."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return path, item
        elif isinstance(item, dict):
            stack.extend(((*path, k), v) for k, v in item.items())
            stack.extend(((*path, k), k) for k in item if isinstance(k, str))  # a key is a string too
        elif isinstance(item, list):
            stack.extend(((*path, i), v) for i, v in enumerate(item))
    return None


class StreamInput(with_serving(ScenarioInput)):  # type: ignore[misc]
    """A scenario to stream, how slowly, and how it is served (``/api/simulate``'s serving fields: with any of them,
    vLLM's scheduler loop, and a ``step`` event per step)."""

    pace_ms: int = Field(default=0, ge=0, le=MAX_PACE_MS, description="pause after each request of each run, in ms (0: as fast as possible)")


class InputErrors(Exception):
    """The input cannot be simulated; ``errors`` says why, field by field."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc'])) or 'scenario'}: {e['msg']}" for e in errors))
        self.errors = errors

    def __reduce__(self) -> tuple[type[InputErrors], tuple[list[dict[str, Any]]]]:
        return type(self), (self.errors,)

    def for_body(self) -> RequestValidationError:
        """As FastAPI's 422, located in the request body."""
        return RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in self.errors])


def errors_of(exc: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors, JSON-safe (its ``ctx`` may hold exception objects)."""
    out = []
    for err in exc.errors():
        item: dict[str, Any] = {"type": err["type"], "loc": tuple(err["loc"]), "msg": err["msg"].removeprefix("Value error, ")}
        if isinstance(err.get("input"), str | int | float | bool):
            item["input"] = err["input"]
        out.append(item)
    return out


def errors_by_field(errors: list[dict[str, Any]], fields: Container[str]) -> dict[str, str]:
    """Each form field's first error, by the first of ``fields`` its location names ("" for one that names none): what a
    panel's form shows beside each field when its post is refused."""
    out: dict[str, str] = {}
    for err in errors:
        name = next((str(part) for part in err.get("loc", ()) if part in fields), "")
        out.setdefault(name, str(err["msg"]).removeprefix("Value error, "))
    return out


def stream_limits(scenario: Scenario) -> list[dict[str, Any]]:
    errors = []
    if scenario.docs > MAX_STREAM_DOCS:
        errors.append(
            {
                "type": "less_than_equal",
                "loc": ("docs",),
                "msg": f"Input should be less than or equal to {MAX_STREAM_DOCS} to be streamed step by step "
                f"(/api/simulate takes up to {MAX_DOCS:,})",
                "input": scenario.docs,
            }
        )
    if scenario.total_requests > MAX_STREAM_REQUESTS:
        errors.append(
            {
                "type": "value_error",
                "loc": (),
                "msg": f"the step stream is limited to {MAX_STREAM_REQUESTS:,} requests per run; this scenario has "
                f"{scenario.total_requests:,} (documents x passes); /api/simulate has no such limit",
            }
        )
    return errors


def within(budget: Budget, cost: Cost, field: str = "docs", fix: str = "fewer documents, passes or tokens") -> None:
    """Raises ``InputErrors`` at ``field`` when the estimate of a call exceeds the budget."""
    try:
        budget.check(cost, field, fix)
    except OverBudget as exc:
        raise InputErrors([{"type": "value_error", "loc": (exc.field,), "msg": str(exc)}]) from None


def check(body: ScenarioInput, *, streamed: bool = False) -> Scenario:
    """The body's scenario; raises ``InputErrors`` when its fields do not combine (or, streamed, exceed the stream's limits)."""
    if body.costs is None and (served := served_costs()) is not None:
        body = body.model_copy(update={"costs": served})  # kvscope serve --costs
    try:
        scenario = body.to_scenario()
    except ValidationError as exc:
        raise InputErrors(errors_of(exc)) from None
    if streamed and (limits := stream_limits(scenario)):
        raise InputErrors(limits)
    return scenario
