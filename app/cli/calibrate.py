"""``kvscope calibrate FILE``: fit the cost model to measurements and save a cost profile for ``--costs``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli.save_run import save_options, save_run
from app.cli.scenario_flags import build_scenario, scenario_options, within_budget
from app.cli.serving_flags import serving_options, take_serving
from app.cli.table import format_table
from app.costs_profile import profile_name, profile_text
from sim.bounds import jsontext, textfile
from sim.calibration.calibrate import Calibration, calibrate_file, repeat_of
from sim.calibration.longdocqa_files import find_pair
from sim.calibration.measurements import Measurement, MeasurementError
from sim.calibration.readers import kind_of, read_measurements
from sim.workloads.estimate import simulation_cost
from sim.workloads.scenario import Scenario

if TYPE_CHECKING:
    from app.runs.store import RunStore  # imported only when a run is kept (app.cli.save_run)


def _status(calibration: Any, name: str) -> str:
    """`` +/- s.e.``, or why the constant has no such figure."""
    if name in calibration.undetermined:
        return " (not in the data)"
    identified = calibration.identifiability
    if identified is None or name not in identified.names:
        return " (derived from the CPU cost)" if name == "load_disk_ms_per_token" else ""
    if name in identified.confounded:
        return " NOT DETERMINED (see the warning)"
    se = identified.std_errors[name]
    return "" if se is None else f" +/- {se:.2g}"


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


@click.command("calibrate")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="where to save the cost profile (default: FILE with .costs.json)",
)
@click.option("--force", is_flag=True, help="overwrite an existing profile")
@scenario_options
@serving_options
@click.option("--json", "as_json", is_flag=True, help="print the profile as JSON")
@save_options
def command(
    file: Path, out: Path | None, force: bool, as_json: bool, costs_file: Path | None, db: str | None, no_save: bool,
    steps_file: Path | None, **flags: Any,
) -> None:
    """Fit overhead, prefill, CPU-load and store costs to FILE: a per-request measurement file (CSV or JSONL) or a
    table of p50_ms and mean_ms per config and pass. A file without hit-token columns, and a table, are fitted by
    re-simulating the scenario the run used (--preset and the scenario flags); a long_doc_qa run (a round's CSV,
    with its sibling, or their folder) is read with --repeat-mode and the other long_doc_qa flags. Reports each
    cell's error, R^2, each constant's standard error, and warns when the measurements do not determine a constant
    (too few request shapes), saying which measurements would.

    With --concurrency N (and the run's scheduler flags) the measurements are of N requests in flight: the fit
    re-simulates the run step by step under vLLM's scheduler loop and fits the step constants (sim.sched.step_costs:
    the fixed cost of a step, prefill, loads and stores, and what overlapping decodes add), saying which the data
    determine."""
    if costs_file is not None:
        raise click.UsageError("--costs is what calibrate produces; give the measurements as FILE")
    if steps_file is not None:
        raise click.UsageError("--steps: calibrate writes no step ledger; use kvscope simulate --steps")
    serving = take_serving(flags)
    out = out or (file / profile_name(file.name) if file.is_dir() else file.with_name(profile_name(file.name)))
    if out.exists() and not force:
        raise click.UsageError(f"{out} exists; give --force to replace it or --out for another file")
    scenario = build_scenario(**flags)
    # The fit re-simulates the run's scenario (as the web's calibrate does, with the web's budget).
    within_budget(simulation_cost(scenario, records=False), "a smaller scenario (the one the measurements ran)")
    try:
        calibration = calibrate_file(file, scenario) if not serving.stepped else _steps(file, scenario, serving)
    except MeasurementError as exc:
        if flags.get("repeat_mode") is None and _long_doc_qa(file):
            raise click.UsageError(f"{file}: {LDQ_FLAGS_TEXT} (read as the preset's run: {exc})") from None
        raise click.UsageError(f"{file}: {exc}") from None
    except ValueError as exc:  # e.g. the data cannot tell two costs apart
        raise click.UsageError(f"{file}: cannot fit the cost model ({exc})") from None
    profile = calibration.profile()
    out.write_text(profile_text(profile))
    _print(calibration, profile, out, as_json)
    save_run(db, no_save, lambda store: _save(store, file, scenario, profile))


# A long_doc_qa round holds TTFTs only: the fit re-simulates the run, which its flags describe (long_doc_qa's own names
# in brackets).
LDQ_FLAGS_TEXT = (
    "a long_doc_qa run is read with the flags it ran with: --repeat-mode, --docs (its --num-documents), --doc-tokens "
    "(its --document-length) and, as it ran, --repeat-count, --shuffle-seed, --hit-miss-ratio"
)


def _steps(file: Path, scenario: Scenario, serving: Any) -> Calibration:
    from sim.calibration.steps import calibrate_steps_file
    from sim.sched.simulate import stepped_cost

    # Every constant's run of the scenario step by step, and one with all at 0: eight served runs.
    within_budget(stepped_cost(scenario, serving).times(8), "a smaller scenario (the one the measurements ran)")
    return calibrate_steps_file(file, scenario, serving)


def _long_doc_qa(file: Path) -> bool:
    """A long_doc_qa run's folder holding its two rounds, or one of the rounds (told by its columns)."""
    if file.is_dir():
        return all(p.is_file() for p in find_pair(file))
    try:
        return file.suffix != ".jsonl" and kind_of(textfile.read_text(file)) == "long_doc_qa"
    except textfile.FileProblem:
        return False


def _rows(file: Path, scenario: Scenario) -> list[Measurement]:
    """The per-request rows the fit read (a table of p50 and mean per cell has none: it is kept as the file and the fit)."""
    try:
        return read_measurements(file, repeat=repeat_of(scenario)).rows
    except MeasurementError:
        return []


def _save(store: RunStore, file: Path, scenario: Scenario, profile: dict[str, Any]) -> int:
    """The rows, the file (or a long_doc_qa folder's two rounds; whole only up to the runs' upload size), the fit."""
    from app.runs.recording import save_rows  # with the store: only when the run is kept

    paths = list(find_pair(file)) if file.is_dir() else [file]
    files = [(p.name, p.read_bytes()) for p in paths if p.is_file()]
    rows = _rows(file, scenario)
    return save_rows(store, "calibration", files, rows, result=profile, costs=profile["costs"], scenario=scenario)


def _print(calibration: Calibration, profile: dict[str, Any], out: Path, as_json: bool) -> None:
    if as_json:
        click.echo(jsontext.dumps(profile, indent=1))
        return
    costs = profile["costs"]
    unknown = len(calibration.identifiability.confounded) if calibration.identifiability else 0
    caveat = f", but {unknown} constant{'s are' if unknown != 1 else ' is'} not determined (warnings below)" if unknown else ""
    click.echo(f"fit: {calibration.method}, {calibration.requests or len(calibration.cells)} "
               f"{'requests' if calibration.requests else 'cells'}, R^2 = {calibration.r2:.4f}{caveat}")
    identified = calibration.identifiability
    if identified is not None:
        condition = "inf" if identified.condition == float("inf") else f"{identified.condition:.3g}"
        click.echo(
            f"design: {identified.shapes} request shape{'s' if identified.shapes != 1 else ''}, rank {identified.rank} "
            f"of {len(identified.names)} fitted "
            f"constants, condition {condition}"
        )
    values = {**costs, **profile.get("step_costs", {})}
    names = list(profile["step_costs"]) if "step_costs" in profile else [
        "overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "store_ms_per_token", "load_disk_ms_per_token"
    ]
    for name in names:
        click.echo(f"  {name:<24} {values[name]:.6g}{_status(calibration, name)}")
    for line in identified.warnings() if identified is not None else []:
        click.echo(f"warning: {line}", err=True)
    click.echo("")
    rows = [
        [c["config"], f"{c['pass']} {c['order']}", c["p50_ms"], c["p50_pred_ms"], _pct(c["p50_error"]),
         c["mean_ms"], c["mean_pred_ms"], _pct(c["mean_error"])]
        for c in calibration.cells
    ]
    headers = ["config", "pass", "p50 ms", "p50 fit", "error", "mean ms", "mean fit", "error"]
    click.echo(format_table(headers, rows, [False, False, True, True, True, True, True, True]))
    click.echo(f"\nwrote {out}; use it with --costs {out}")
