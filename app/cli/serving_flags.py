"""Serving flags (``--concurrency``, ``--rate``, vLLM's scheduler flags by their own names), ``--steps FILE`` and the
line that reports a run under load.

Each flag is a ``sim.sched.serving.Serving`` field in kebab case, with its
help; a boolean is a ``--x/--no-x`` pair as ``vllm serve`` spells it. A bad
value exits 2 naming the flag and the limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from pydantic import ValidationError

from sim.numeric.figures import ms_text
from sim.sched.serving import Serving

if TYPE_CHECKING:
    from sim.bounds.budget import Cost
    from sim.workloads.scenario import Scenario

OVERLOAD = 1.05  # arrivals this much faster than the run served them: say the queue grew


def flag_of(field: str) -> str:
    return "--" + field.replace("_", "-")


def _kind(model: type[Serving], field: str) -> Any:
    annotation = model.model_fields[field].annotation
    return {int | None: int, float | None: float, int: int}.get(annotation, annotation)


def options_of(model: type[Serving], *, steps: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator adding every field of ``model`` (``Serving`` or a subclass) as a flag, and ``--steps`` unless the
    command writes no step ledger (``advise``): a ``bool | None`` field is a ``--x/--no-x`` pair, a ``bool`` one a
    plain switch."""

    def add(func: Callable[..., Any]) -> Callable[..., Any]:
        if steps:
            func = click.option(
                "--steps", "steps_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                help="write the step ledger (JSONL, one line per step and run) to this file; must not exist",
            )(func)
        for name, info in reversed(model.model_fields.items()):
            if info.annotation == bool | None:
                func = click.option(f"{flag_of(name)}/--no-{name.replace('_', '-')}", name, default=None, help=info.description)(func)
            elif info.annotation is bool:
                func = click.option(flag_of(name), name, is_flag=True, default=None, help=info.description)(func)
            else:
                func = click.option(flag_of(name), name, type=_kind(model, name), default=None, help=info.description)(func)
        return func

    return add


serving_options = options_of(Serving)


def take_serving(flags: dict[str, Any], model: type[Serving] = Serving) -> Any:
    """The serving settings (a ``model``) the flags give, taken out of ``flags``; exits 2 naming the flag on bad input."""
    given = {name: value for name in model.model_fields if (value := flags.pop(name, None)) is not None}
    try:
        return model(**given)
    except ValidationError as exc:
        raise usage_error(exc, flag_of, model.model_fields) from None


def usage_error(exc: ValidationError, flag: Callable[[str], str], fields: Container[str] = ()) -> click.UsageError:
    """Exit 2 with one line per problem, each led by the flag of its field; a check over several fields names them in
    its message, and those of ``fields`` are given as flags there too."""
    lines = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        message = re.sub(r"\b[a-z]+(?:_[a-z]+)*\b", lambda m: flag(m[0]) if m[0] in fields else m[0],
                         err["msg"].removeprefix("Value error, "))
        lines.append(f"{flag(field)}: {message}" if field else message)
    return click.UsageError("\n".join(lines))


def cli_limit(serving: Serving, arrivals_ms: Any = ()) -> Any:
    """The work budget a command's runs under load stop at (the CLI's, ``app.budgets.cli_budget``), step by step."""
    from app import budgets
    from sim.sched.limit import step_limit

    return step_limit(budgets.cli_budget().work_steps, serving, arrivals_ms)


def refused(exc: ValueError) -> click.UsageError:
    """A run the stepped engine refused or stopped: exit 2, naming the flag when it stopped at the work budget."""
    from sim.sched.limit import OverWorkBudget

    if isinstance(exc, OverWorkBudget):
        return click.UsageError(f"{flag_of(exc.field)}: {exc}")
    return click.UsageError(str(exc))


def check_new(steps_file: Path | None) -> None:
    """``--steps`` never overwrites: checked before anything runs."""
    if steps_file is not None and steps_file.exists():
        raise click.BadParameter(f"{steps_file} exists; nothing is overwritten, choose another name", param_hint="--steps")


def run_served(
    scenario: Scenario, serving: Serving, steps_file: Path | None, cost: Cost,
    serve: Callable[[Scenario, Serving, Any], tuple[dict[str, Any], dict[str, list[Any]]]],
) -> dict[str, Any]:
    """``serve`` the scenario under load (given the CLI's step-by-step work limit), checked first (``--steps`` new,
    what the stepped engine can serve, the work within budget), its refusals as usage errors naming the flag; each
    run's ledger into ``--steps``. Returns the JSON result."""
    from app.cli.scenario_flags import FIELD_TO_FLAG, within_budget
    from sim.sched.simulate import refusal

    check_new(steps_file)
    if (cannot := refusal(scenario, serving)) is not None:
        raise click.BadParameter(cannot[1], param_hint=FIELD_TO_FLAG.get(cannot[0], flag_of(cannot[0])))
    within_budget(cost)
    try:
        result, ledgers = serve(scenario, serving, cli_limit(serving))
    except ValueError as exc:  # a workload the scheduler cannot serve (a request larger than the GPU pool), or one
        raise refused(exc) from None  # that outgrew the work budget as it ran
    write_ledgers(steps_file, ledgers)
    return result


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
