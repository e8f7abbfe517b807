"""Per-request measurement files (CSV or JSONL): written by ``simulate --out`` and live mode, read by ``analyze``.

Required columns: ``config, pass, order, seq, doc, prompt_tokens, ttft_ms``;
optional: ``gpu_hit_tokens, cpu_hit_tokens, computed_tokens, source, target,
model, started_at``, and the simulator's ``disk_hit_tokens, stored_tokens``
(tokens written through to CPU, which calibration needs). The seed's configuration names (``vllm``, ``lmcache``)
read as ``gpu`` and ``gpu+cpu``. A file is read whole or not at all: the
first bad line raises ``MeasurementError`` with its line number.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sim.bounds import jsontext, textfile
from sim.bounds.budget import checkpoint
from sim.engine.result import comparison, pass_summaries
from sim.numeric import stats

UNKNOWN_DOC = -1  # the doc of a request whose document is not known (sim.workloads.longdocqa)
REQUIRED = ("config", "pass", "order", "seq", "doc", "prompt_tokens", "ttft_ms")
OPTIONAL = (
    "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "source", "target", "model", "started_at",
    "disk_hit_tokens", "stored_tokens",
)
COLUMNS = REQUIRED + OPTIONAL
# A TTFT of 0 or beyond an hour is no measurement of a prompt (one token is always computed); the bounds keep
# means and speed-ups finite.
MAX_TTFT_MS = 3_600_000
MIN_TTFT_MS = stats.RESOLUTION_MS  # below it a pass's p50 reads 0.0 and a speed-up over it is infinite
CONFIG_ALIASES = {"vllm": "gpu", "vllm-only": "gpu", "lmcache": "gpu+cpu", "vllm+lmcache": "gpu+cpu"}
_INT = {
    "pass", "seq", "doc", "prompt_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "disk_hit_tokens",
    "stored_tokens",
}
HIT_COLUMNS = ("gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens")
CSV_HEADER = ",".join(COLUMNS)  # what a CSV file holding no measurements yet holds
# Any count in a file (tokens, sequence numbers, passes): far above a real prompt's, and low enough that a fit's
# sums of squares over millions of rows stay finite.
MAX_COUNT = 2**31 - 1


class MeasurementError(ValueError):
    """A measurement file could not be read; the message names the line."""


@dataclass(slots=True)
class Measurement:
    """One request as measured (or simulated): the columns of a measurement file."""

    config: str
    pass_: int
    order: str
    seq: int
    doc: int
    prompt_tokens: int
    ttft_ms: float
    gpu_hit_tokens: int | None = None
    cpu_hit_tokens: int | None = None
    computed_tokens: int | None = None
    source: str | None = None
    target: str | None = None
    model: str | None = None
    started_at: str | None = None
    disk_hit_tokens: int | None = None
    stored_tokens: int | None = None
    # Tokens loaded from each offload tier, by name, when the row comes from the simulator (its records or result);
    # not a file column: a file keeps them flattened, as cpu_hit_tokens and disk_hit_tokens.
    tier_hits: dict[str, int] | None = None

    @property
    def has_hits(self) -> bool:
        """Whether the row says where its prompt tokens came from (the simulator's files and live mode with metrics)."""
        return self.gpu_hit_tokens is not None and self.cpu_hit_tokens is not None and self.computed_tokens is not None

    def row(self) -> dict[str, Any]:
        # Attribute by attribute: dataclasses.asdict deep-copies each value, half of an import's time.
        return {k: getattr(self, "pass_" if k == "pass" else k) for k in COLUMNS}

    @classmethod
    def parse(cls, raw: dict[str, Any], line: int) -> Measurement:
        missing = [c for c in REQUIRED if raw.get(c) in (None, "")]
        if missing:
            raise MeasurementError(f"line {line}: missing {', '.join(missing)}")
        values: dict[str, Any] = {}
        for name in COLUMNS:
            value = raw.get(name)
            if value in (None, ""):
                continue
            try:
                if name in _INT:
                    values[name] = int(value)
                elif name == "ttft_ms":
                    values[name] = float(value)
                    if not MIN_TTFT_MS <= values[name] <= MAX_TTFT_MS:  # also false for NaN
                        raise ValueError(f"must be at least {MIN_TTFT_MS} and at most {MAX_TTFT_MS:,} ms")
                else:
                    values[name] = str(value)
            except (TypeError, ValueError) as exc:
                raise MeasurementError(f"line {line}: column {name}: {value!r} is not valid ({exc})") from None
        if values["pass"] < 1:
            raise MeasurementError(f"line {line}: column pass: passes are numbered from 1, got {values['pass']}")
        for name in (c for c in COLUMNS if c in _INT and c in values):
            # A long_doc_qa query round read without its order has rows of UNKNOWN_DOC: they read back as written.
            low = UNKNOWN_DOC if name == "doc" else 0
            if not low <= values[name] <= MAX_COUNT:
                raise MeasurementError(f"line {line}: column {name}: must be from {low} to {MAX_COUNT:,}, got {values[name]:.6g}")
        values["config"] = CONFIG_ALIASES.get(values["config"].strip().lower(), values["config"].strip())
        values["pass_"] = values.pop("pass")
        return cls(**values)


def from_records(config: str, records: Iterable[Any], source: str = "sim", **extra: Any) -> list[Measurement]:
    """Measurements from engine records (anything with the record's attributes)."""
    return [
        Measurement(
            config, r.pass_, r.order, r.seq, r.doc, r.prompt_tokens, r.ttft_ms,
            r.gpu_hit_tokens, r.cpu_hit_tokens, r.computed_tokens, source,
            disk_hit_tokens=r.disk_hit_tokens, stored_tokens=r.stored_tokens, tier_hits=r.tier_hits, **extra,
        )
        for r in records
    ]


def from_result(result: dict[str, Any], source: str = "sim", **extra: Any) -> list[Measurement]:
    """Measurements from a simulation result (``simulate()``'s JSON shape), every run in turn."""
    return [
        Measurement(
            run["name"], r["pass"], r["order"], r["seq"], r["doc"], r["prompt_tokens"], r["ttft_ms"],
            r["gpu_hit_tokens"], r["cpu_hit_tokens"], r["computed_tokens"], source,
            disk_hit_tokens=r.get("disk_hit_tokens"), stored_tokens=r.get("stored_tokens"), tier_hits=r.get("tier_hits"),
            **extra,
        )
        for run in result["runs"]
        for r in run["requests"]
    ]


def write(path: Path, rows: Iterable[Measurement]) -> None:
    """Write a whole file, CSV unless the name ends in ``.jsonl``."""
    with open(path, "w", newline="") as fh:
        writer = MeasurementWriter(fh, jsonl=Path(path).suffix == ".jsonl")
        for row in rows:
            writer.append(row)


class MeasurementWriter:
    """Appends rows one at a time and flushes each, so an interrupted run leaves a valid file."""

    def __init__(self, fh: IO[str], jsonl: bool = False) -> None:
        self._fh = fh
        self._jsonl = jsonl
        self._csv = None if jsonl else csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        if self._csv is not None and fh.tell() == 0:
            self._csv.writeheader()
            self._fh.flush()  # a run stopped before its first record still leaves a valid (empty) file

    def append(self, row: Measurement) -> None:
        data = row.row()
        if self._csv is None:
            self._fh.write(json.dumps({k: v for k, v in data.items() if v is not None}) + "\n")
        else:
            self._csv.writerow({k: "" if v is None else v for k, v in data.items()})
        self._fh.flush()


def read(path: Path) -> list[Measurement]:
    """A measurement file (at most ``textfile.MAX_FILE_BYTES``); errors do not repeat the file's name."""
    try:
        text = textfile.read_text(path)
    except textfile.FileProblem as exc:
        raise MeasurementError(str(exc)) from None
    return parse_text(text, jsonl=Path(path).suffix == ".jsonl" or text.lstrip().startswith("{"))


def parse_text(text: str, jsonl: bool = False) -> list[Measurement]:
    rows = list(iter_text(text, jsonl))
    if not rows:
        raise MeasurementError("the file has no measurements")
    return rows


def iter_text(text: str, jsonl: bool = False) -> Iterator[Measurement]:
    """``parse_text``'s rows one at a time, so a caller that keeps each as it comes holds none of them (it says
    itself when none came)."""
    if jsonl:
        for line, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            checkpoint()
            try:
                obj = jsontext.loads(raw)
            except ValueError as exc:
                raise MeasurementError(f"line {line}: {exc}") from None
            if not isinstance(obj, dict):
                raise MeasurementError(f"line {line}: expected a JSON object")
            yield Measurement.parse(obj, line)
    else:
        reader = textfile.DictReader(io.StringIO(text), error=MeasurementError)
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise MeasurementError(f"line 1: header lacks {', '.join(missing)} (needs {', '.join(REQUIRED)})")
        for raw in reader:
            checkpoint()
            if None in raw:
                raise MeasurementError(f"line {reader.line_num}: more fields than the header has")
            yield Measurement.parse(raw, reader.line_num)


def analyze(rows: list[Measurement], baseline: str = "gpu") -> dict[str, Any]:
    """Per (config, pass): n, p50, mean, p90; and speed-ups against ``baseline``: ``analyze --json``."""
    configs: dict[str, list[Measurement]] = {}
    for r in rows:
        configs.setdefault(r.config, []).append(r)
    cells = []
    runs = []
    for config, rs in configs.items():
        passes = pass_summaries(rs)
        runs.append({"name": config, "passes": passes})
        for p in passes:
            cells.append(
                {
                    "config": config,
                    "pass": p["pass"],
                    "order": p["order"],
                    "n": p["requests"],
                    "p50_ms": p["p50_ms"],
                    "mean_ms": p["mean_ms"],
                    "p90_ms": p["p90_ms"],
                }
            )
    speedups = [
        {k: c[k] for k in ("pass", "baseline", "candidate", "p50_speedup", "mean_speedup")}
        for c in comparison(runs, baseline)
    ]
    return {
        "cells": cells, "speedups": speedups, "pass_speedups": pass_speedups(cells),
        "baseline_note": baseline_note(list(configs), baseline),
    }


def baseline_note(configs: list[str], baseline: str) -> str | None:
    """Why there are no speed-ups across configurations, when there are several: no configuration is the baseline."""
    if len(configs) < 2 or baseline in configs:
        return None
    return (
        f"no speed-ups across configurations: none is named {baseline!r}, the baseline; "
        f"choose the baseline (--baseline), one of: {', '.join(configs)}"
    )


def pass_speedups(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each later pass against the first of the same configuration: long_doc_qa's "TTFT gain" (warmup / query)."""
    first: dict[str, dict[str, Any]] = {}
    out = []
    for c in sorted(cells, key=lambda c: (c["config"], c["pass"])):
        base = first.setdefault(c["config"], c)
        if c is base:
            continue
        out.append(
            {
                "config": c["config"],
                "pass": c["pass"],
                "against_pass": base["pass"],
                "p50_speedup": stats.speedup(base["p50_ms"], c["p50_ms"]),  # exact: rounded once, written
                "mean_speedup": stats.speedup(base["mean_ms"], c["mean_ms"]),
            }
        )
    return out


__all__ = ["Measurement", "MeasurementError", "MeasurementWriter", "analyze", "from_records", "from_result", "read", "write"]
