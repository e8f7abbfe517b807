"""``kvscope analyze FILE``: p50, mean and p90 per configuration and pass of a measurement file, and speed-ups."""

from __future__ import annotations

import json
from pathlib import Path

import click

from app.cli.table import format_table
from sim import measurements


@click.command("analyze")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--baseline", default="gpu", show_default=True, help="configuration the speed-ups are measured against")
@click.option("--json", "as_json", is_flag=True, help="print cells and speed-ups as JSON")
def command(file: Path, baseline: str, as_json: bool) -> None:
    """Summarise a per-request measurement file (CSV or JSONL) into the seed-style table."""
    try:
        rows = measurements.read(file)
    except measurements.MeasurementError as exc:
        raise click.UsageError(f"{file}: {exc}") from None
    report = measurements.analyze(rows, baseline)
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    click.echo(
        format_table(
            ["config", "pass", "n", "p50 ms", "mean ms", "p90 ms"],
            [[c["config"], f"{c['pass']} {c['order']}", c["n"], c["p50_ms"], c["mean_ms"], c["p90_ms"]] for c in report["cells"]],
        )
    )
    if report["speedups"]:
        click.echo("")
        click.echo(
            format_table(
                ["pass", "baseline", "candidate", "p50 speed-up", "mean speed-up"],
                [[s["pass"], s["baseline"], s["candidate"], f"{s['p50_speedup']:.2f}x", f"{s['mean_speedup']:.2f}x"] for s in report["speedups"]],
                [True, False, False, True, True],
            )
        )
