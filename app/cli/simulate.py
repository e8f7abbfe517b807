"""``kvscope simulate``: run a scenario and print the seed-style table, or the JSON result."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli.save_run import save_options, save_run
from app.cli.scenario_flags import build_scenario, scenario_options, within_budget
from app.cli.serving_flags import run_served, serving_line, serving_options, take_serving
from app.cli.table import render_table
from sim.bounds import jsontext
from sim.calibration import measurements
from sim.simulation.run import simulate
from sim.workloads.estimate import simulation_cost

if TYPE_CHECKING:
    from app.runs.store import RunStore  # imported only when a run is kept (app.cli.save_run)
    from sim.sched.serving import Serving
    from sim.workloads.scenario import Scenario


@click.command("simulate")
@scenario_options
@click.option("--json", "as_json", is_flag=True, help="print the whole result as JSON")
@click.option("--no-explain", is_flag=True, help="leave out each miss's cause (gpu_miss, computed): a little faster")
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="also write a per-request measurement file (.csv or .jsonl)",
)
@serving_options
@save_options
def command(
    as_json: bool, no_explain: bool, out: Path | None, db: str | None, no_save: bool, steps_file: Path | None,
    **flags: Any,
) -> None:
    """Simulate the scenario with the GPU tier alone and with a CPU tier, and compare them; the run is kept in the
    runs database (kvscope runs) unless --no-save.

    One request at a time unless --concurrency, --rate, a scheduler flag or --steps is given: then vLLM's
    scheduler loop serves overlapping requests step by step (sim.sched)."""
    serving = take_serving(flags)
    scenario = build_scenario(**flags)
    if serving.stepped or steps_file is not None:
        result = _stepped(scenario, serving, steps_file)
    else:
        within_budget(simulation_cost(scenario, explain=not no_explain))
        result = simulate(scenario, explain=not no_explain)
    if out is not None:
        measurements.write(out, measurements.from_result(result, model=scenario.model))
    if as_json:
        click.echo(jsontext.dumps(result, indent=1))  # NaN and Infinity (not JSON) as null
    else:
        click.echo(render_table(result))
        for run in result["runs"]:
            if "serving" in run:
                click.echo(serving_line(run["name"], run["serving"], open_loop=run_open(result)))
        if out is not None:
            click.echo(f"\nwrote {sum(len(r['requests']) for r in result['runs'])} requests to {out}")
    save_run(db, no_save, lambda store: _save(store, scenario, result))


def _stepped(scenario: Scenario, serving: Serving, steps_file: Path | None) -> dict[str, Any]:
    from sim.sched.simulate import simulate_stepped, stepped_cost

    return run_served(scenario, serving, steps_file, stepped_cost(scenario, serving), simulate_stepped)


def run_open(result: dict[str, Any]) -> bool:
    return "rate" in result["scenario"].get("serving", {})


def _save(store: RunStore, scenario: Scenario, result: dict[str, Any]) -> int:
    from app.runs.recording import save_simulation  # with the store: only when the run is kept

    return save_simulation(store, scenario, result)

