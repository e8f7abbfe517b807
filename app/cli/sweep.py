"""``kvscope sweep``: the capacities at which a same-order re-read starts to hit the GPU, and to be served from CPU."""

from __future__ import annotations

from typing import Any

import click

from app.cli.save_run import keeps_nothing
from app.cli.scenario_flags import build_scenario, scenario_options, within_budget
from app.cli.serving_flags import cli_limit, refused, serving_options, take_serving
from sim.analysis.sweep import sweep, sweep_cost
from sim.bounds import jsontext


@click.command("sweep")
@keeps_nothing
@scenario_options
@serving_options
@click.option("--json", "as_json", is_flag=True, help="print the thresholds as JSON")
def command(as_json: bool, steps_file: Any, **flags: Any) -> None:
    """Find (a) the smallest GPU capacity at which pass 2 of a same-order re-read gets any hit, at block and
    document granularity, and (b) the CPU capacity below which pass 2 stops being served from CPU.

    One request at a time unless --concurrency, --rate or a scheduler flag is given: then every probe is served by
    vLLM's scheduler loop (block granularity only: whole documents are one request at a time)."""
    if steps_file is not None:
        raise click.UsageError("--steps: a sweep runs many simulations; write a ledger with kvscope simulate")
    serving = take_serving(flags)
    scenario = build_scenario(**flags)
    stepped = serving.stepped
    within_budget(sweep_cost(scenario, serving if stepped else None))
    try:
        found = sweep(scenario, serving, cli_limit(serving)).to_dict() if stepped else sweep(scenario).to_dict()
    except ValueError as exc:  # the stepped engine's refusals, or a run past the work budget
        raise refused(exc) from None
    if as_json:
        click.echo(jsontext.dumps(found, indent=1))
        return
    gpu, cpu = found["gpu"], found["cpu"]
    prompt = scenario.prompt_tokens

    def tok(value: int | None) -> str:
        return "never (within the range searched)" if value is None else f"{value:,} tokens"

    click.echo(f"{scenario.docs} documents of {scenario.doc_tokens:,} tokens ({prompt:,}-token prompts), read forward twice")
    click.echo(f"GPU, block granularity: pass 2 first hits at {tok(gpu['block_granularity_tokens'])}")
    docs = gpu["doc_granularity_docs"]
    if stepped:
        click.echo("GPU, whole documents:   one request at a time only (vLLM's scheduler serves blocks)")
    else:
        click.echo(f"GPU, whole documents:   pass 2 first hits at {tok(gpu['doc_granularity_tokens'])}" + (f" ({docs} documents)" if docs else ""))
    for label, key in (("any pass-2 CPU hit", "any_hit"), ("all of pass 2 served from CPU", "all_served")):
        tokens = cpu[f"{key}_tokens"]
        extra = "" if tokens is None else f" = {cpu[f'{key}_gib']:.3f} GiB at {found['kv_bytes_per_token']:,} B/token"
        click.echo(f"CPU, {label}: needs {tok(tokens)}{extra}")
