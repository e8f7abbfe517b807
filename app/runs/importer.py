"""``kvscope runs import FILE``: a measurement file (CSV or JSONL), ``kvscope simulate --json`` output, or a run
exported as JSON, kept as a run. A file is imported whole or not at all."""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import ValidationError

from app.runs.export import EXPORT_MARK
from app.runs.recording import save_rows, save_simulation
from app.runs.store import NewRun, RunStore, StoreError, StoreFull
from sim.bounds import jsontext, textfile
from sim.calibration import measurements
from sim.calibration.measurements import MAX_TTFT_MS, MIN_TTFT_MS, MeasurementError
from sim.workloads.scenario import Scenario

MAX_IMPORT_BYTES = textfile.MAX_FILE_BYTES


class ImportProblem(ValueError):
    """The file is none of the kinds import reads; the message names the file and the reason."""


def import_bytes(store: RunStore, name: str, content: bytes) -> int:
    """Keep the file as a run and return its id."""
    if len(content) > MAX_IMPORT_BYTES:
        raise ImportProblem(f"{name}: {len(content):,} bytes is over the limit of {MAX_IMPORT_BYTES // 2**20} MiB")
    try:
        text = textfile.decode(content)  # a BOM dropped; UTF-16, NUL bytes and non-UTF-8 named by line
    except textfile.FileProblem as exc:
        raise ImportProblem(f"{name}: {exc}") from None
    whole = _json_object(text)
    if whole is not None and whole.get("format") == EXPORT_MARK:
        return _restore(store, name, whole)
    if whole is not None and isinstance(whole.get("runs"), list) and isinstance(whole.get("scenario"), dict):
        return _simulation(store, name, content, whole)
    try:
        rows = measurements.parse_text(text, jsonl=name.endswith(".jsonl") or text.lstrip().startswith("{"))
    except MeasurementError as exc:
        raise ImportProblem(f"{name}: {exc}") from None
    return save_rows(store, "import", [(name, content)], rows)


def _json_object(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        obj = jsontext.loads(text)  # finite numbers, bounded nesting
    except ValueError:
        return None  # perhaps JSONL: one object per line
    return obj if isinstance(obj, dict) else None


def _simulation(store: RunStore, name: str, content: bytes, result: dict[str, Any]) -> int:
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
    return save_simulation(store, scenario, result, name=f"{name} (imported)", source=source)


def _restore(store: RunStore, name: str, run: dict[str, Any]) -> int:
    records, events = run.get("records") or [], run.get("events") or []
    if not (isinstance(records, list) and all(isinstance(r, dict) for r in records)):
        raise ImportProblem(f"{name}: records must be a list of objects")
    if not (isinstance(events, list) and all(isinstance(b, list) for b in events)):
        raise ImportProblem(f"{name}: events must be a list of lists")
    source = run.get("source") if isinstance(run.get("source"), dict) else {}
    try:
        kept = NewRun(
            str(run.get("kind", "")), name=str(run.get("name", name)), scenario=run.get("scenario"), costs=run.get("costs"),
            summary=run.get("summary") if isinstance(run.get("summary"), dict) else {}, source={**source, "imported": name},
        )
        return store.save(kept, result=run.get("result"), records=records, events=events)
    except StoreFull:
        raise
    except StoreError as exc:
        raise ImportProblem(f"{name}: {exc}") from None
