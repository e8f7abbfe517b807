"""``kvscope live``: run a scenario against real vLLM / vLLM+LMCache servers, measure TTFT and cache hits, compare."""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import Future
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import click

from app.cli import runs_db
from app.cli.save_run import no_save_option, not_kept, say_kept
from app.cli.scenario_flags import build_scenario, scenario_options
from app.cli.table import format_table
from app.live.session import (
    DEFAULT_TIMEOUT_S,
    MAX_COMPLETION_TOKENS,
    MAX_CONCURRENCY,
    MAX_TIMEOUT_S,
    LiveOptions,
    LiveRun,
)
from app.live.targets import Target, TargetSpecError, parse_targets
from app.runs.paths import MEMORY, default_path
from app.runs.recording import LiveRecorder
from app.runs.store import RunStore
from sim.bounds import jsontext
from sim.calibration import measurements
from sim.engine.events import Error, Event, Measured, PassDone, RunStarted, RunWarning
from sim.engine.result import comparison


@click.command("live")
@click.option(
    "--target", "target_specs", multiple=True, required=True, metavar="[NAME=]URL",
    help="a server to measure, e.g. gpu=http://host:8000; repeat to compare (gpu=... --target gpu+cpu=...)",
)
@scenario_options
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="measurement file to write (.csv or .jsonl); must not exist")
@click.option("--concurrency", type=click.IntRange(1, MAX_CONCURRENCY), default=1, show_default=True, help="requests in flight per target")
@click.option("--max-tokens", type=click.IntRange(1, MAX_COMPLETION_TOKENS), default=4, show_default=True, help="tokens to generate per request")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, MAX_TIMEOUT_S, min_open=True), default=DEFAULT_TIMEOUT_S, show_default=True, help="seconds to wait for any one answer")
@click.option(
    "--side-by-side", is_flag=True,
    help="measure all targets at the same time (only if they share no GPU, and this machine has CPU to spare)",
)
@click.option("--json", "as_json", is_flag=True, help="print the measured and predicted summaries as JSON")
@runs_db.db_options
@no_save_option
def command(
    target_specs: tuple[str, ...], out: Path | None, concurrency: int, max_tokens: int, timeout_s: float,
    side_by_side: bool, as_json: bool, db: str | None, keep_runs: int | None, db_max_mb: int | None, no_save: bool,
    **flags: Any,
) -> None:
    """Send the scenario's requests to each target (one target after the other, requests one at a time), record TTFT
    and per-request GPU and CPU hit tokens from /metrics, and print them beside a simulation of the same
    scenario on each server's detected GPU size. Exits 1 if a target failed; what was measured is kept (in the runs
    database unless --no-save)."""
    try:
        targets = parse_targets(target_specs)
    except TargetSpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--target") from None
    scenario = build_scenario(**flags)
    if out is not None and _holds_data(out):
        raise click.BadParameter(f"{out} exists; nothing is overwritten, choose another name", param_hint="--out")
    options = LiveOptions(concurrency=concurrency, max_tokens=max_tokens, timeout_s=timeout_s, side_by_side=side_by_side)
    # "x" refuses a file that appeared since the check; one holding no records is reused.
    fh = open(out, "w" if out.exists() else "x", newline="") if out is not None else None
    writer = measurements.MeasurementWriter(fh, jsonl=out.suffix == ".jsonl") if fh is not None and out is not None else None
    store = None if no_save else _open_runs_db(db, keep_runs, db_max_mb)  # --no-save opens no database at all
    recorder = LiveRecorder(store, scenario, [t.name for t in targets], asdict(options))

    def sink(row: measurements.Measurement) -> Future[None] | None:
        if writer is not None:
            writer.append(row)
        return recorder.sink(row)  # committed to the runs database (awaited) before the next request goes out

    live = LiveRun(scenario, targets, options, sink=sink)
    predicted: dict[str, list[dict[str, Any]]] = {}
    try:
        asyncio.run(_consume(live, targets, predicted, sys.stderr, recorder))
    except KeyboardInterrupt:
        recorder.finish("stopped")
        click.echo(f"\ninterrupted: {len(live.measurements)} requests measured" + (f", kept in {out}" if out else ""), err=True)
        raise SystemExit(130) from None
    finally:
        if fh is not None:
            fh.close()
    recorder.finish("failed" if live.failed else "done")
    if store is not None:
        store.close()
    _report(live, predicted, as_json, out)
    # As simulate, replay and watch: nothing to say for --no-save, or for ':memory:', which keeps nothing past the
    # process; a database that could not be opened was said at the start.
    if store is not None and default_path() != MEMORY:
        if recorder.problem is None:
            say_kept(recorder.run_id)
        else:
            not_kept(recorder.problem)
    if live.failed:
        raise SystemExit(1)


def _open_runs_db(db: str | None, keep_runs: int | None, db_max_mb: int | None) -> RunStore | None:
    """The runs database, or None with a warning when it cannot be opened: the measurement, which cannot be
    repeated, goes ahead and is written to --out, as simulate's answer is printed whatever its database does."""
    try:
        return runs_db.configure(db, keep_runs, db_max_mb)
    except click.BadParameter as exc:
        not_kept(f"{exc.param_hint}: {exc.message}")
        return None


def _holds_data(path: Path) -> bool:
    """Whether ``--out`` names something to keep. A run stopped before its first record leaves an empty file or a
    CSV header alone: nothing measured, so a re-run may use the name."""
    try:
        if path.is_dir() or path.stat().st_size > 4096:
            return True
        return path.read_text(errors="replace").strip() not in ("", measurements.CSV_HEADER)
    except FileNotFoundError:
        return False


async def _consume(
    live: LiveRun, targets: list[Target], predicted: dict[str, list[dict[str, Any]]], err: IO[str], recorder: LiveRecorder,
) -> None:
    progress = _Progress(err)
    urls = {t.name: t.url for t in targets}
    async for event in live.events():
        recorder.add(event)  # the stream's events, a request's committed as it is answered: the page replays them
        _note(event, progress, predicted, urls)


def _note(event: Event, progress: _Progress, predicted: dict[str, list[dict[str, Any]]], urls: dict[str, str]) -> None:
    if isinstance(event, RunStarted):
        progress.total += event.requests
    elif isinstance(event, Measured):
        progress.step(f"{event.run}: pass {event.pass_} doc {event.doc} {event.ttft_ms:,.1f} ms")
    elif isinstance(event, PassDone):
        predicted.setdefault(event.run, []).append(event.summary["predicted"])
    elif isinstance(event, RunWarning):
        progress.say(f"warning: target {event.run}: {event.message}")
    elif isinstance(event, Error):
        progress.say(f"Error: {event.message} [{urls.get(event.run, '')}]")  # as click words every other command's


class _Progress:
    """A one-line progress display on stderr (a line per update when stderr is not a terminal)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.total = 0
        self.done = 0
        self.tty = stream.isatty()

    def step(self, note: str) -> None:
        self.done += 1
        width = 30
        filled = width * self.done // max(self.total, 1)
        line = f"[{'#' * filled}{'-' * (width - filled)}] {self.done}/{self.total}  {note}"
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
        elif self.done == self.total or self.done % 10 == 0:
            self.stream.write(line + "\n")
        self.stream.flush()

    def say(self, message: str) -> None:
        self.stream.write(("\r\x1b[2K" if self.tty else "") + message + "\n")
        self.stream.flush()


def _report(live: LiveRun, predicted: dict[str, list[dict[str, Any]]], as_json: bool, out: Path | None) -> None:
    order = {t.name: i for i, t in enumerate(live.targets)}
    rows = sorted(live.measurements, key=lambda m: (order.get(m.config, len(order)), m.seq))
    measured = measurements.analyze(rows, _baseline(rows)) if rows else {"cells": [], "speedups": []}
    predicted_runs = [{"name": name, "passes": passes} for name, passes in predicted.items()]
    predicted_speedups = comparison(predicted_runs, _baseline(rows)) if rows else []
    if as_json:
        report = {
            "targets": [info.to_dict() for info in live.infos.values()],
            "measured": measured,
            "predicted": {"runs": predicted_runs, "speedups": predicted_speedups},
            "errors": live.failed,
        }
        click.echo(jsontext.dumps(report, indent=1))
        return
    click.echo("", err=True)
    for info in live.infos.values():
        capacity = f"{info.capacity_tokens:,} GPU tokens" if info.capacity_tokens else "GPU size unknown"
        click.echo(f"{info.name}: {info.model}, {capacity}" + (" (kvscope emulator)" if info.emulator else ""))
    pred = {(run["name"], p["pass"]): p for run in predicted_runs for p in run["passes"]}
    table = []
    for cell in measured["cells"]:
        hits = _hit_totals(rows, cell["config"], cell["pass"])
        p = pred.get((cell["config"], cell["pass"]), {})
        table.append(
            [
                cell["config"], f"{cell['pass']} {cell['order']}", cell["n"], cell["p50_ms"], p.get("p50_ms"),
                cell["mean_ms"], p.get("mean_ms"), hits[0], hits[1],
            ]
        )
    if table:
        click.echo("")
        headers = ["target", "pass", "n", "p50 ms", "sim p50", "mean ms", "sim mean", "GPU hit tok", "CPU hit tok"]
        click.echo(format_table(headers, table, [False, False] + [True] * 7))
    sim_speedups = {(s["candidate"], s["pass"]): s for s in predicted_speedups}
    if measured["speedups"]:
        click.echo("")
        lines = []
        for s in measured["speedups"]:
            p = sim_speedups.get((s["candidate"], s["pass"]))
            lines.append(
                [
                    s["pass"], s["baseline"], s["candidate"], f"{s['p50_speedup']:.2f}x",
                    f"{p['p50_speedup']:.2f}x" if p else "", f"{s['mean_speedup']:.2f}x", f"{p['mean_speedup']:.2f}x" if p else "",
                ]
            )
        headers = ["pass", "baseline", "candidate", "p50 speed-up", "sim p50", "mean speed-up", "sim mean"]
        click.echo(format_table(headers, lines, [True, False, False, True, True, True, True]))
    if out is not None:
        click.echo(f"\nwrote {len(rows)} requests to {out}")


def _baseline(rows: list[measurements.Measurement]) -> str:
    configs = list(dict.fromkeys(r.config for r in rows))
    return "gpu" if "gpu" in configs else configs[0]


def _hit_totals(rows: list[measurements.Measurement], config: str, pass_: int) -> tuple[int | None, int | None]:
    mine = [r for r in rows if r.config == config and r.pass_ == pass_]

    def total(values: list[int | None]) -> int | None:
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    return total([r.gpu_hit_tokens for r in mine]), total([r.cpu_hit_tokens for r in mine])
