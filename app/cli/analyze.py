"""``kvscope analyze``: p50, mean and p90 per configuration and pass of measurement files, and speed-ups.

Reads kvscope's per-request files (CSV or JSONL) and LMCache long_doc_qa's
``warmup_round.csv`` + ``query_round.csv`` pairs, together: a simulated run and
a measured one land in the same table. FILE may be either kind (told apart by
its columns); failed long_doc_qa requests are counted and listed, not
tabulated.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli.save_run import save_options, save_run
from app.cli.table import format_table
from sim.bounds import jsontext
from sim.calibration import measurements
from sim.calibration.longdocqa_files import Failure, find_pair, read_run
from sim.calibration.readers import Repeat, read_measurements
from sim.workloads.questions import REPEAT_MODES

if TYPE_CHECKING:
    from app.runs.store import RunStore  # imported only when a run is kept (app.cli.save_run)


def _split_config(value: str) -> tuple[str | None, Path]:
    """``gpu+cpu=results/lmcache`` -> (``gpu+cpu``, path); a bare path has no configuration name."""
    name, sep, rest = value.partition("=")
    if sep and name and "/" not in name:
        return name, Path(rest)
    return None, Path(value)


@click.command("analyze")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--long-doc-qa", "runs", multiple=True, metavar="[CONFIG=]PATH",
    help="a long_doc_qa run: a folder holding warmup_round.csv and query_round.csv, or WARMUP.csv,QUERY.csv; "
    "CONFIG defaults to the folder's name (vllm reads as gpu, lmcache as gpu+cpu); repeatable",
)
@click.option(
    "--repeat-mode", type=click.Choice(REPEAT_MODES), default=None,
    help="long_doc_qa's --repeat-mode (without it the query round's documents are unknown; statistics do not need them)",
)
@click.option("--docs", type=click.IntRange(min=1), default=None, help="long_doc_qa's --num-documents (default: the warmup's row count)")
@click.option("--repeat-count", type=click.IntRange(min=1), default=None, help="long_doc_qa's --repeat-count (default: query rows / documents)")
@click.option("--shuffle-seed", type=click.IntRange(min=0), default=0, show_default=True, help="long_doc_qa's --shuffle-seed")
@click.option("--hit-miss-ratio", default=None, help="long_doc_qa's --hit-miss-ratio, e.g. 3:1 (labels the query pass)")
@click.option("--doc-tokens", type=click.IntRange(min=1), default=20_000, show_default=True, help="long_doc_qa's --document-length")
@click.option("--baseline", default="gpu", show_default=True, help="configuration the speed-ups are measured against")
@click.option("--json", "as_json", is_flag=True, help="print cells and speed-ups as JSON")
@save_options
def command(
    file: Path | None, runs: tuple[str, ...], repeat_mode: str | None, docs: int | None, repeat_count: int | None,
    shuffle_seed: int, hit_miss_ratio: str | None, doc_tokens: int, baseline: str, as_json: bool,
    db: str | None, no_save: bool,
) -> None:
    """Summarise a per-request measurement file (CSV or JSONL) and/or long_doc_qa runs into the seed-style table."""
    if file is None and not runs:
        raise click.UsageError("give a measurement FILE, --long-doc-qa runs, or both")
    rows: list[measurements.Measurement] = []
    failures: list[Failure] = []
    long_doc_qa = bool(runs)
    if file is not None:
        repeat = Repeat(repeat_mode, repeat_count, shuffle_seed, hit_miss_ratio, docs, doc_tokens)
        try:
            found = read_measurements(file, repeat=repeat)
        except measurements.MeasurementError as exc:
            raise click.UsageError(f"{file}: {exc}") from None
        rows += found.rows
        failures += found.failures
        long_doc_qa = long_doc_qa or found.kind == "long_doc_qa"
    for run in runs:
        config, path = _split_config(run)
        try:
            result = read_run(path, repeat_mode, config, docs, repeat_count, shuffle_seed, hit_miss_ratio, doc_tokens)
        except measurements.MeasurementError as exc:
            raise click.BadParameter(f"{path}: {exc}", param_hint="--long-doc-qa") from None
        rows += result.rows
        failures += result.failures
    report = measurements.analyze(rows, baseline)
    report["failures"] = [f.to_dict() for f in failures]
    _print(report, long_doc_qa, failures, as_json)
    read = ([file] if file is not None else []) + [p for run in runs for p in find_pair(_split_config(run)[1])]
    save_run(db, no_save, lambda store: _save(store, read, rows, report["failures"]))


def _save(store: RunStore, paths: list[Path], rows: list[measurements.Measurement], failures: list[dict[str, Any]]) -> int:
    """The parsed rows and each file read (a long_doc_qa folder's two rounds); a file is kept whole only up to the
    runs' upload size, beyond it its sha256 and size."""
    from app.runs.recording import save_rows  # with the store: only when the run is kept

    files = [(p.name, p.read_bytes()) for p in paths if p.is_file()]
    return save_rows(store, "analysis", files, rows, failures=failures)


def _print(report: dict[str, Any], long_doc_qa: bool, failures: list[Failure], as_json: bool) -> None:
    if as_json:
        click.echo(jsontext.dumps(report, indent=1))
        return
    click.echo(
        format_table(
            ["config", "pass", "n", "p50 ms", "mean ms", "p90 ms"],
            [[c["config"], f"{c['pass']} {c['order']}", c["n"], c["p50_ms"], c["mean_ms"], c["p90_ms"]] for c in report["cells"]],
        )
    )
    tables = [
        (report["speedups"], ["pass", "baseline", "candidate"], ["p50 speed-up", "mean speed-up"]),
        # A long_doc_qa run's own figure: query round against warmup round.
        (report["pass_speedups"] if long_doc_qa else [], ["config", "pass", "against_pass"], ["p50 speed-up", "mean speed-up (long_doc_qa's TTFT gain)"]),
    ]
    for items, keys, ratio_headers in tables:
        if not items:
            continue
        rows_out = [[s[k] for k in keys] + [f"{s['p50_speedup']:.2f}x", f"{s['mean_speedup']:.2f}x"] for s in items]
        right = [isinstance(v, int) for v in rows_out[0][: len(keys)]] + [True, True]
        click.echo("")
        click.echo(format_table([k.replace("_", " ") for k in keys] + ratio_headers, rows_out, right))
    if report["baseline_note"]:
        click.echo("")
        click.echo(report["baseline_note"])
    if failures:
        click.echo("")
        click.echo(f"failed requests, left out of the statistics: {len(failures)}")
        for f in failures:
            click.echo(f"  {f.text()}")
