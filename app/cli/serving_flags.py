"""Serving flags (``--concurrency``, ``--rate``, vLLM's scheduler flags by their own names) and ``--steps FILE``.

Each flag is a ``sim.sched.serving.Serving`` field in kebab case, with its
help; a boolean is a ``--x/--no-x`` pair as ``vllm serve`` spells it. A bad
value exits 2 naming the flag and the limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from sim.sched.serving import Serving


def flag_of(field: str) -> str:
    return "--" + field.replace("_", "-")


def _kind(field: str) -> Any:
    annotation = Serving.model_fields[field].annotation
    return {int | None: int, float | None: float, int: int}.get(annotation, annotation)


def serving_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add every ``Serving`` field as a flag, and ``--steps``."""
    func = click.option(
        "--steps", "steps_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help="write the step ledger (JSONL, one line per step and run) to this file; must not exist",
    )(func)
    for name, info in reversed(Serving.model_fields.items()):
        if info.annotation == bool | None:
            func = click.option(f"{flag_of(name)}/--no-{name.replace('_', '-')}", name, default=None, help=info.description)(func)
        else:
            func = click.option(flag_of(name), name, type=_kind(name), default=None, help=info.description)(func)
    return func


def take_serving(flags: dict[str, Any]) -> Serving:
    """The serving settings the flags give, taken out of ``flags``; exits 2 naming the flag on bad input."""
    given = {name: value for name in Serving.model_fields if (value := flags.pop(name, None)) is not None}
    try:
        return Serving(**given)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else ""
            message = err["msg"].removeprefix("Value error, ")
            if not field:  # a check over several fields names them in the message: as flags here
                message = re.sub(r"\b[a-z]+(?:_[a-z]+)*\b", lambda m: flag_of(m[0]) if m[0] in Serving.model_fields else m[0], message)
            lines.append(f"{flag_of(field)}: {message}" if field else message)
        raise click.UsageError("\n".join(lines)) from None
