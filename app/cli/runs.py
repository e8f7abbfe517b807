"""``kvscope runs``: the kept runs: list, show, diff, export, delete, import (``--db`` names the database)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import click

from app.cli import runs_db
from app.cli.table import cell_text, format_table
from app.runs import compare, export, importer
from app.runs.recording import result_of
from app.runs.store import KINDS, MAX_LIST, NoSuchRun, RunInfo, RunStore, StoreError, StoreFull, check_id
from sim.bounds import jsontext, textfile
from sim.calibration.longdocqa_files import failure_text
from sim.engine.events import tier_label


class RunIdType(click.ParamType):
    """A run id: a positive whole number (anything else exits 2 before the database is touched)."""

    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return check_id(value)
        except StoreError as exc:
            self.fail(str(exc), param, ctx)


RUN_ID = RunIdType()


def _store(ctx: click.Context) -> RunStore:
    return ctx.obj  # type: ignore[no-any-return]


def _missing(exc: NoSuchRun) -> click.ClickException:
    error = click.ClickException(f"{exc} in {click.get_current_context().obj.path}")
    error.exit_code = 1
    return error


def _headline(info: RunInfo) -> str:
    summary = info.summary
    best = summary.get("best_speedup")
    text = f"{summary['requests']:,} requests" if summary.get("requests") else ""
    if info.kind == "watch":  # KV events, no requests
        text = f"{info.record_count:,} KV events"
    elif not text and info.record_count:  # a recording's summary is written when it finishes (or it was exported before)
        text = f"{info.record_count:,} requests{' so far' if info.status == 'running' else ''}"
    if best:
        text += f"; pass {best['pass']}: {best['candidate']} {best['p50_speedup']:.2f}x p50 over {best['baseline']}"
    if summary.get("kept"):  # why the run is kept only up to some point (app.runs.commits.kept_only_so_far)
        text += f"; kept only so far: {summary['kept']}"
    return text.removeprefix("; ")


@click.group("runs")
@runs_db.db_options
@click.pass_context
def command(ctx: click.Context, db: str | None, keep_runs: int | None, db_max_mb: int | None) -> None:
    """The kept runs: every simulation, live run, replay, analysis and calibration of the dashboard and API."""
    ctx.obj = runs_db.configure(db, keep_runs, db_max_mb)
    ctx.call_on_close(ctx.obj.close)


@command.command("list")
@click.option("--limit", type=click.IntRange(1, MAX_LIST), default=50, show_default=True, help="runs to list, newest first")
@click.option("--kind", type=click.Choice(KINDS), default=None, help="only runs of this kind")
@click.option("--json", "as_json", is_flag=True, help="print as JSON (as GET /api/runs)")
@click.pass_context
def list_runs(ctx: click.Context, limit: int, kind: str | None, as_json: bool) -> None:
    """The newest runs: id, kind, when, status, scenario (or file) and headline figures."""
    runs = _store(ctx).list(limit=limit, kind=kind)
    if as_json:
        click.echo(jsontext.dumps([r.to_dict() for r in runs], indent=1))
        return
    if not runs:
        click.echo(f"no runs kept in {_store(ctx).path}")
        return
    rows = [[r.id, r.kind, r.created_at[:19].replace("T", " "), r.status, r.summary.get("scenario") or r.name, _headline(r)] for r in runs]
    click.echo(format_table(["id", "kind", "when (UTC)", "status", "scenario or file", "headline"], rows, [True, False, False, False, False, False]))


@command.command("show")
@click.argument("run_id", type=RUN_ID)
@click.option("--json", "as_json", is_flag=True, help="print the whole run as JSON (as GET /api/runs/ID)")
@click.pass_context
def show(ctx: click.Context, run_id: int, as_json: bool) -> None:
    """One run: what it was and its figures per configuration and pass."""
    store = _store(ctx)
    try:
        run = store.get(run_id)
        view = compare.diff(store, run_id, run_id)
    except NoSuchRun as exc:
        raise _missing(exc) from None
    if as_json:
        click.echo(jsontext.dumps({**run.to_dict(), "result": result_of(store, run), "uploads": store.uploads(run_id)}, indent=1))
        return
    info = run.info
    click.echo(f"run {info.id}: {info.kind}, {info.status}, {info.created_at}")
    click.echo(f"  {info.summary.get('scenario') or info.name}")
    if info.summary.get("kept"):
        click.echo(f"  kept only so far: {info.summary['kept']}")
    failures = (run.source or {}).get("failures") or []
    source = {k: v for k, v in (run.source or {}).items() if k != "failures"}
    if source:
        click.echo(f"  source: {jsontext.dumps(source)}")
    if info.kind == "calibration" and run.costs:  # what a calibration is for: the constants it fitted
        fitted = ", ".join(f"{k} {v:.6g}" for k, v in run.costs.items() if isinstance(v, (int, float)))
        click.echo(f"  fitted costs: {fitted}")
    if failures:
        # As ``kvscope analyze`` words them, so a kept analysis reads as it did when made.
        click.echo(f"failed requests, left out of the statistics: {len(failures)}")
        for f in failures:
            click.echo(f"  {failure_text(f)}")
    click.echo("")
    if info.kind == "watch":
        click.echo(f"{info.record_count:,} KV events kept (kvscope runs export {info.id} --format jsonl writes them as a --record file)")
        return
    rows = [[p["config"], f"{p['pass']} {p['order'] or ''}", p["requests"]["a"], p["p50_ms"]["a"], p["mean_ms"]["a"],
             p["gpu_hit_tokens"]["a"], *(p["tier_hits"][t]["a"] for t in view["tiers"]), p["computed_tokens"]["a"]]
            for p in view["passes"]]
    headers = ["config", "pass", "n", "p50 ms", "mean ms", "GPU hit tok", *(f"{tier_label(t)} hit tok" for t in view["tiers"]),
               "computed tok"]
    click.echo(format_table(headers, rows) if rows else "no requests")


@command.command("diff")
@click.argument("a", type=RUN_ID)
@click.argument("b", type=RUN_ID)
@click.option("--json", "as_json", is_flag=True, help="print as JSON (as GET /api/runs/A/diff/B)")
@click.pass_context
def diff(ctx: click.Context, a: int, b: int, as_json: bool) -> None:
    """Run B against run A: what differs in scenario and costs, and per configuration and pass p50 and mean with B/A."""
    try:
        view = compare.diff(_store(ctx), a, b)
    except NoSuchRun as exc:
        raise _missing(exc) from None
    except compare.NotComparable as exc:
        raise click.BadParameter(str(exc), param_hint=exc.field.upper()) from None
    if as_json:
        click.echo(jsontext.dumps(view, indent=1))
        return
    changes = [f"  {c['field']}: {jsontext.dumps(c['a'])} -> {jsontext.dumps(c['b'])}" for c in view["scenario"]]
    changes += [f"  cost {c['field']}: {c['a']} -> {c['b']}" for c in view["costs"]]
    if not view["scenarios_known"]:
        said = f"{compare.without_scenario_text(view)}: only their requests are compared"
    else:
        said = "scenario and costs differ in" if changes else "same scenario and costs"
    click.echo(f"run {b} against run {a}: {said}")
    for line in changes:
        click.echo(line)
    if not view["common_passes"]:
        click.echo(f"  {compare.NOTHING_IN_COMMON}")
    click.echo("")
    ratio = lambda c: "" if c is None else f"{c:.3f}"  # noqa: E731
    both = lambda c: f"{cell_text(c['a'])} / {cell_text(c['b'])}"  # noqa: E731
    rows = [
        [p["config"], f"{p['pass']} {p['order'] or ''}", p["p50_ms"]["a"], p["p50_ms"]["b"], ratio(p["p50_ms"]["change"]),
         p["mean_ms"]["a"], p["mean_ms"]["b"], ratio(p["mean_ms"]["change"]), both(p["gpu_hit_tokens"]),
         *(both(p["tier_hits"][t]) for t in view["tiers"]), "*" if p["differs"] else ""]
        for p in view["passes"]
    ]
    headers = ["config", "pass", f"p50 ms {a}", f"p50 ms {b}", "b/a", f"mean ms {a}", f"mean ms {b}", "b/a",
               f"GPU hit tok {a} / {b}", *(f"{tier_label(t)} hit tok {a} / {b}" for t in view["tiers"]), "differs"]
    click.echo(format_table(headers, rows))


@command.command("export")
@click.argument("run_id", type=RUN_ID)
@click.option("--format", "fmt", type=click.Choice(export.FORMATS), default="csv", show_default=True,
              help="csv or jsonl: the requests as a measurement file; json: the whole run")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="write here (never overwrites) instead of printing")
@click.pass_context
def export_run(ctx: click.Context, run_id: int, fmt: export.Format, out: Path | None) -> None:
    """A run's requests as a measurement file (kvscope analyze reads it), or the whole run as JSON (runs import reads it)."""
    try:
        text = export.export(_store(ctx), run_id, fmt)
    except NoSuchRun as exc:
        raise _missing(exc) from None
    except export.NotExportable as exc:
        raise click.BadParameter(str(exc), param_hint="--format") from None
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        with open(out, "x") as fh:
            fh.write(text)
    except FileExistsError:
        raise click.BadParameter(f"{out} exists; kvscope never overwrites a file", param_hint="--out") from None
    click.echo(f"wrote run {run_id} to {out}")


@command.command("delete")
@click.argument("run_ids", type=RUN_ID, nargs=-1, required=True)
@click.pass_context
def delete(ctx: click.Context, run_ids: tuple[int, ...]) -> None:
    """Delete runs (their records and events go with them)."""
    missing = [i for i in run_ids if not _store(ctx).delete(i)]
    for i in run_ids:
        if i not in missing:
            click.echo(f"deleted run {i}")
    if missing:
        raise _missing(NoSuchRun(missing[0]))


class AgeType(click.ParamType):
    """An age: a whole number and a unit, ``90m``, ``12h``, ``30d`` or ``2w``."""

    name = "AGE"
    UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        text = str(value).strip()
        number, unit = text[:-1], text[-1:]
        if unit not in self.UNITS or not number.isdigit() or not 0 < int(number) <= 100_000:
            self.fail(f"must be 1 to 100,000 and a unit, m, h, d or w (e.g. 30d), got {text[:40]!r}", param, ctx)
        return timedelta(**{self.UNITS[unit]: int(number)})


@command.command("prune")
@click.option("--keep", type=click.IntRange(0, 10_000_000), default=None, help="keep the newest N runs, delete the rest")
@click.option("--older-than", type=AgeType(), default=None, help="delete the runs made more than this long ago (30d, 12h, 2w)")
@click.pass_context
def prune(ctx: click.Context, keep: int | None, older_than: timedelta | None) -> None:
    """Delete old runs at once: all but the newest N (--keep N), or those older than an age (--older-than 30d).

    A run still being recorded is never deleted. To prune as runs are kept, set a retention: --keep-runs N on
    kvscope serve, runs and live, or KVSCOPE_KEEP_RUNS=N for every command."""
    if (keep is None) == (older_than is None):
        raise click.UsageError("give --keep N or --older-than AGE (one of them)")
    store = _store(ctx)
    ids = store.prune(keep=keep, older_than=older_than)
    why = f"--keep {keep:,} keeps the newest {keep:,}" if keep is not None else f"--older-than {older_than} (days, h:mm:ss)"
    click.echo(store.pruned_text(ids, why) if ids else f"no run to delete in {store.path}")


@command.command("import")
@click.argument("file", type=click.Path(path_type=Path))
@click.pass_context
def import_file(ctx: click.Context, file: Path) -> None:
    """Keep a file as a run: a measurement file (CSV or JSONL), kvscope simulate --json output, or an exported run."""
    try:
        run_id = importer.import_bytes(_store(ctx), file.name, textfile.read_bytes(file, importer.MAX_IMPORT_BYTES))
    except textfile.FileProblem as exc:
        raise click.BadParameter(f"{file}: {exc}", param_hint="FILE") from None
    except importer.ImportProblem as exc:
        raise click.BadParameter(str(exc), param_hint="FILE") from None
    except StoreFull as exc:
        raise click.ClickException(str(exc)) from None
    run = _store(ctx).get(run_id).info
    click.echo(f"imported {file} as run {run_id} ({run.kind}, {run.summary.get('requests', 0):,} requests)")
