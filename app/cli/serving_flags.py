"""Serving flags (``--concurrency``, ``--rate``, vLLM's scheduler flags by their own names), ``--steps FILE`` and the
line that reports a run under load.

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

from sim.numeric.figures import ms_text
from sim.sched.serving import Serving

OVERLOAD = 1.05  # arrivals this much faster than the run served them: say the queue grew


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


def check_new(steps_file: Path | None) -> None:
    """``--steps`` never overwrites: checked before anything runs."""
    if steps_file is not None and steps_file.exists():
        raise click.BadParameter(f"{steps_file} exists; nothing is overwritten, choose another name", param_hint="--steps")


def write_ledgers(steps_file: Path | None, ledgers: dict[str, list[Any]]) -> None:
    """Each run's step ledger into ``--steps FILE`` (JSONL, each line led by its run's name)."""
    if steps_file is None:
        return
    from sim.sched.report import write_steps

    with steps_file.open("x") as fh:
        for name, steps in ledgers.items():
            write_steps(steps, fh, run=name)


def serving_line(run: str, s: dict[str, Any], open_loop: bool = False) -> str:
    """A run's figures under load in one line: TTFT percentiles (queueing included), throughput, preemptions; and for
    arrivals that do not wait for the server (``open_loop``: a rate, timestamps), a note when they outran it."""
    line = (
        f"{run}: TTFT p50 {ms_text(s['ttft_p50_ms'])} ms, p90 {ms_text(s['ttft_p90_ms'])} ms, "
        f"p99 {ms_text(s['ttft_p99_ms'])} ms; {s['requests_per_s']:,.2f} requests/s, {s['output_tokens_per_s']:,.1f} "
        f"output tokens/s over {s['span_ms'] / 1000:,.2f} s in {s['steps']:,} steps; {s['preemptions']:,} preemptions"
    )
    if s.get("store_refused"):  # vLLM's native offloading (sim.sched.offloading)
        line += f"; {s['store_refused']:,} stores refused, {s['store_dropped_tokens']:,} tokens never stored"
    offered = s.get("arrivals_per_s")
    if open_loop and offered and offered > OVERLOAD * s["requests_per_s"]:
        line += (f"\n{run}: requests arrived at {offered:.2f}/s, faster than the {s['requests_per_s']:.2f}/s served: "
                 "the queue grew and TTFT counts the wait")
    return line
