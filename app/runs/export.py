"""A run written out: its requests as a measurement file (CSV or JSONL, which ``kvscope analyze`` and ``runs
import`` read back), or the whole run as JSON (list entry, scenario, costs, source, result, records, events)."""

from __future__ import annotations

import io
from typing import Any, Literal

from app.runs.recording import result_of, rows_of
from app.runs.store import RunStore, StoreError
from sim.bounds import jsontext
from sim.calibration.measurements import MeasurementWriter

Format = Literal["csv", "jsonl", "json"]
FORMATS: tuple[str, ...] = ("csv", "jsonl", "json")
MEDIA = {"csv": "text/csv", "jsonl": "application/x-ndjson", "json": "application/json"}
EXPORT_MARK = "kvscope-run"  # the ``format`` key of a JSON export, by which import knows one


class NotExportable(StoreError):
    """The run holds nothing in the format asked for (a watch's KV events are no measurement file)."""


def whole(store: RunStore, run_id: int) -> dict[str, Any]:
    run = store.get(run_id)
    return {
        "format": EXPORT_MARK,
        **run.to_dict(),
        "result": result_of(store, run),
        "uploads": store.uploads(run_id),
        "records": store.records(run_id),
        "events": store.events(run_id),
    }


def export(store: RunStore, run_id: int, fmt: Format) -> str:
    """The run in ``fmt``: read in one snapshot (a delete meanwhile leaves it whole, or is ``NoSuchRun`` at the
    first read), written after it."""
    with store.snapshot():
        kind = store.get(run_id).info.kind
        if fmt == "json":
            content: Any = whole(store, run_id)
        elif kind == "watch":
            if fmt == "csv":  # an empty measurement file would read as a run with no requests
                raise NotExportable(f"run {run_id} (watch) keeps KV events, not requests: jsonl gives its recording, json the whole run")
            content = store.records(run_id)
        else:
            content = rows_of(store, run_id)
    if fmt == "json":
        return jsontext.dumps(content, indent=1) + "\n"
    if kind == "watch":
        # A kept `kvscope watch`: its KV event recording, which `kvscope watch --from` plays and `kvscope replay` reads.
        return "".join(jsontext.dumps(line, separators=(",", ":")) + "\n" for line in content)
    buffer = io.StringIO()
    writer = MeasurementWriter(buffer, jsonl=fmt == "jsonl")
    for row in content:
        writer.append(row)
    return buffer.getvalue()


def filename(run_id: int, fmt: str) -> str:
    return f"kvscope-run-{run_id}.{fmt}"
