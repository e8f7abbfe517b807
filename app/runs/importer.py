"""``kvscope runs import FILE`` and ``POST /api/runs/import``: a measurement file (CSV or JSONL), ``kvscope simulate
--json`` output, or a run exported as JSON, kept as a run. A file is imported whole or not at all.

In two steps, so that the server can run the first in a worker process under its budget (a deadline, the queue):
``prepare`` reads and checks the file and writes each record (and event batch) as JSON text into a scratch SQLite
file in a folder the caller owns, holding one row at a time (and, of a measurement file's rows, only what the
per-pass figures need); ``save`` then keeps the run in one transaction, SQLite copying the rows from that file.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.runs.export import EXPORT_MARK
from app.runs.recording import UPLOAD_KEEP_BYTES, rows_run, simulation_run
from app.runs.store import (
    NewRun,
    RunStore,
    StoreError,
    StoreFull,
    UploadRow,
    check_count,
    check_kind,
    dump_json,
    prepared_rows,
    upload_row,
)
from sim.bounds import jsontext, textfile
from sim.bounds.budget import checkpoint
from sim.calibration import measurements
from sim.calibration.measurements import MAX_TTFT_MS, MIN_TTFT_MS, Measurement, MeasurementError
from sim.workloads.scenario import Scenario

MAX_IMPORT_BYTES = textfile.MAX_FILE_BYTES
ROWS_FILE = "rows.db"
# What ``prepare`` holds at its peak per byte of the file, measured as ru_maxrss over the process's before it: a
# 15 MiB CSV of 168,506 rows 8.5x (the bytes, their text, the rows' figures), a 16 MiB exported run 4.8x (its
# JSON parsed whole); the larger, rounded up.
PEAK_BYTES_PER_FILE_BYTE = 10


class ImportProblem(ValueError):
    """The file is none of the kinds import reads; the message names the file and the reason."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A file checked and encoded: the run, its result as JSON text, its upload's row; its records and event batches
    wait in ``rows_db`` (``app.runs.store.prepared_rows``)."""

    run: NewRun
    result_text: str | None
    uploads: tuple[UploadRow, ...]
    rows_db: str


def peak_bytes(file_bytes: int) -> int:
    """About what ``prepare`` holds at its peak for a file of ``file_bytes`` (the budget's memory cap is held to it)."""
    return PEAK_BYTES_PER_FILE_BYTE * file_bytes


def import_bytes(store: RunStore, name: str, content: bytes) -> int:
    """Keep the file as a run, both steps in this process (the CLI's), and return its id."""
    with tempfile.TemporaryDirectory(prefix="kvscope-import-") as folder:
        return save(store, prepare(content, name, folder, store.max_records))


def prepare_file(path: str, name: str, folder: str, max_records: int) -> Prepared:
    """``prepare`` of the file at ``path`` (a server's worker reads the upload the server wrote there)."""
    return prepare(Path(path).read_bytes(), name, folder, max_records)


def prepare(content: bytes, name: str, folder: str, max_records: int) -> Prepared:
    """Read the file (named ``name``) into ``folder``; ``ImportProblem`` or ``StoreFull`` (more than ``max_records``
    rows) say why not, as soon as they are known."""
    if len(content) > MAX_IMPORT_BYTES:
        raise ImportProblem(f"{name}: {len(content):,} bytes is over the limit of {MAX_IMPORT_BYTES // 2**20} MiB")
    try:
        text = textfile.decode(content)  # a BOM dropped; UTF-16, NUL bytes and non-UTF-8 named by line
    except textfile.FileProblem as exc:
        raise ImportProblem(f"{name}: {exc}") from None
    whole = _json_object(text)
    if whole is not None and whole.get("format") == EXPORT_MARK:
        return _restore(name, whole, folder, max_records)
    if whole is not None and isinstance(whole.get("runs"), list) and isinstance(whole.get("scenario"), dict):
        return _simulation(name, content, whole, folder)
    del whole
    rows = measurements.iter_text(text, jsonl=name.endswith(".jsonl") or text.lstrip().startswith("{"))
    figures: list[Measurement] = []

    def records() -> Iterator[tuple[int, str | None]]:
        for row in rows:
            if len(figures) == max_records:
                raise StoreFull(f"a run keeps at most {max_records:,} records; this file has more")
            figures.append(_figures_only(row))
            yield len(figures) - 1, dump_json(row.row())

    rows_db = str(Path(folder) / ROWS_FILE)
    try:
        _write_rows(rows_db, records(), ())
    except MeasurementError as exc:
        raise ImportProblem(f"{name}: {exc}") from None
    if not figures:
        raise ImportProblem(f"{name}: the file has no measurements")
    run = rows_run("import", [(name, content)], figures)
    return Prepared(run, None, (upload_row(name, content, UPLOAD_KEEP_BYTES),), rows_db)


def save(store: RunStore, prepared: Prepared) -> int:
    """Keep a prepared file as a run (one transaction) and return its id."""
    return store.save_prepared(prepared.run, result_text=prepared.result_text, rows_db=prepared.rows_db,
                               uploads=prepared.uploads)


def _write_rows(
    path: str, records: Iterable[tuple[int, str | None]], events: Iterable[tuple[int, str | None]],
) -> None:
    """The rows into a new scratch file, each table in one transaction (drawing them one at a time)."""
    conn = prepared_rows(path)
    try:
        for table, rows in (("records", records), ("events", events)):
            conn.execute("BEGIN")
            conn.executemany(f"INSERT INTO {table} (n, data) VALUES (?, ?)", rows)  # table: one of our two names
            conn.execute("COMMIT")
    finally:
        conn.close()


def _figures_only(row: Measurement) -> Measurement:
    """The row with only what the per-pass figures read, its repeated names shared: a tenth of its memory."""
    return Measurement(
        sys.intern(row.config), row.pass_, sys.intern(row.order), 0, 0, 0, row.ttft_ms, row.gpu_hit_tokens,
        row.cpu_hit_tokens, row.computed_tokens, disk_hit_tokens=row.disk_hit_tokens,
    )


def _json_object(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        obj = jsontext.loads(text)  # finite numbers, bounded nesting
    except ValueError:
        return None  # perhaps JSONL: one object per line
    return obj if isinstance(obj, dict) else None


def _simulation(name: str, content: bytes, result: dict[str, Any], folder: str) -> Prepared:
    fields = {k: v for k, v in result["scenario"].items() if k in Scenario.model_fields}
    try:
        scenario = Scenario.model_validate(fields)
        rows = measurements.from_result(result)  # every request has the fields a run's rows need
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ImportProblem(f"{name}: scenario.{where}: {first['msg']}") from None
    except (KeyError, TypeError) as exc:
        raise ImportProblem(f"{name}: not a kvscope simulate --json result (a request lacks {exc})") from None
    for r in rows:  # as a measurement file's are: a TTFT below the resolution makes an infinite speed-up
        if not (isinstance(r.ttft_ms, int | float) and MIN_TTFT_MS <= r.ttft_ms <= MAX_TTFT_MS):
            raise ImportProblem(
                f"{name}: run {r.config} request {r.seq}: ttft_ms must be at least {MIN_TTFT_MS} and at most "
                f"{MAX_TTFT_MS:,} ms, got {r.ttft_ms!r}"
            )
    source = {"imported": name, "sha256": hashlib.sha256(content).hexdigest(), "bytes": len(content)}
    run = simulation_run(scenario, result, name=f"{name} (imported)", source=source)
    rows_db = str(Path(folder) / ROWS_FILE)
    _write_rows(rows_db, (), ())
    return Prepared(run, dump_json(result), (), rows_db)


def _restore(name: str, run: dict[str, Any], folder: str, max_records: int) -> Prepared:
    records, events = run.get("records") or [], run.get("events") or []
    if not (isinstance(records, list) and all(isinstance(r, dict) for r in records)):
        raise ImportProblem(f"{name}: records must be a list of objects")
    if not (isinstance(events, list) and all(isinstance(b, list) for b in events)):
        raise ImportProblem(f"{name}: events must be a list of lists")
    check_count(len(records), "records", max_records)
    check_count(len(events), "event batches", max_records)
    source = run.get("source") if isinstance(run.get("source"), dict) else {}
    kind = str(run.get("kind", ""))
    try:
        check_kind(kind)
    except StoreError as exc:
        raise ImportProblem(f"{name}: {exc}") from None
    kept = NewRun(
        kind, name=str(run.get("name", name)), scenario=run.get("scenario"), costs=run.get("costs"),
        summary=run.get("summary") if isinstance(run.get("summary"), dict) else {}, source={**source, "imported": name},
    )
    rows_db = str(Path(folder) / ROWS_FILE)
    _write_rows(rows_db, _encoded(records), _encoded(events))
    return Prepared(kept, dump_json(run.get("result")), (), rows_db)


def _encoded(rows: list[Any]) -> Iterator[tuple[int, str | None]]:
    for n, row in enumerate(rows):
        checkpoint()
        yield n, dump_json(row)
