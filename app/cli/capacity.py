"""``kvscope capacity``: hit tokens and predicted TTFT per pass against GPU or CPU capacity, thresholds marked."""

from __future__ import annotations

import csv
import io
from typing import Any

import click

from app.cli.save_run import keeps_nothing
from app.cli.scenario_flags import build_scenario, scenario_options, within_budget
from app.cli.serving_flags import cli_limit, refused, serving_options, take_serving
from app.cli.table import format_table
from sim.analysis.capacity import (
    CSV_COLUMNS,
    MAX_POINTS,
    CurveTooLarge,
    Served,
    cpu_curve,
    csv_rows,
    gpu_curve,
    load_curve_cost,
)
from sim.bounds import jsontext
from sim.engine.events import tier_label


@click.command("capacity")
@keeps_nothing
@click.option("--tier", type=click.Choice(["gpu", "cpu"]), default="gpu", show_default=True, help="whose capacity to vary")
@click.option("--points", type=click.IntRange(1, MAX_POINTS), default=40, show_default=True, help="capacities on the grid")
@click.option("--min-tokens", type=click.IntRange(min=1), default=None, help="smallest capacity (default: the smallest that runs)")
@click.option("--max-tokens", type=click.IntRange(min=1), default=None, help="largest capacity (default: every document fits)")
@scenario_options
@serving_options
@click.option("--csv", "as_csv", is_flag=True, help="print one row per capacity and pass as CSV")
@click.option("--json", "as_json", is_flag=True, help="print the curves as JSON")
def command(
    tier: str, points: int, min_tokens: int | None, max_tokens: int | None, as_csv: bool, as_json: bool,
    steps_file: Any, **flags: Any,
) -> None:
    """Simulate the scenario at many capacities of one tier: the GPU tier alone at block and whole-document
    granularity (--tier gpu), or the CPU tier from none upwards (--tier cpu). The scenario's own capacity and the
    thresholds of kvscope sweep are on the grid and marked.

    One request at a time unless --concurrency, --rate or a scheduler flag is given: then every point is served
    by vLLM's scheduler loop (block granularity only; mean ms is TTFT with queueing)."""
    if as_csv and as_json:
        raise click.UsageError("give --csv or --json, not both")
    if steps_file is not None:
        raise click.UsageError("--steps: a curve runs many simulations; write a ledger with kvscope simulate")
    serving = take_serving(flags)
    scenario = build_scenario(**flags)
    load = Served(serving, cli_limit(serving)) if serving.stepped else Served()
    if tier == "cpu" and scenario.cpu_capacity_tokens is None and flags.get("no_cpu"):
        raise click.UsageError("--tier cpu varies the CPU tier; drop --no-cpu")
    within_budget(load_curve_cost(scenario, tier, points, load), "fewer --points or a smaller scenario")
    try:
        curve = (gpu_curve if tier == "gpu" else cpu_curve)(scenario, points, min_tokens, max_tokens, load)
    except CurveTooLarge as exc:
        raise click.BadParameter(str(exc), param_hint="--points") from None
    except ValueError as exc:  # the stepped engine's refusals, or a run past the work budget
        raise refused(exc) from None
    if as_json:
        click.echo(jsontext.dumps(curve, indent=1))
        return
    if as_csv:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(csv_rows(curve))
        click.echo(buffer.getvalue(), nl=False)
        return
    labels = {m["key"]: m["label"] for m in curve["marks"]}
    for m in curve["marks"]:
        click.echo(f"{m['key']:>15}: {m['label']} at {m['capacity_tokens']:,} tokens")
    for c in curve["curves"]:
        passes = c["points"][0]["passes"]
        headers = ["capacity tok", "GiB"]
        for p in passes:
            headers += [f"p{p['pass']} {tier_label(tier)} hit", f"p{p['pass']} mean ms"]
        headers.append("mark")
        rows = []
        for point in c["points"]:
            row: list[Any] = [point["capacity_tokens"], f"{point['capacity_gib']:.3f}"]
            for p in point["passes"]:
                row += [p["gpu_hit_tokens"] if tier == "gpu" else p["cpu_hit_tokens"], p["mean_ms"]]
            row.append(", ".join(k for k in point["marks"] if k in labels))
            rows.append(row)
        click.echo(f"\n{curve['run']} run, {c['granularity']} granularity, passes: "
                   + ", ".join(f"{p['pass']} {p['order']}" for p in passes))
        click.echo(format_table(headers, rows, [True] * (len(headers) - 1) + [False]))
