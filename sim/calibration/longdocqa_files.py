"""LMCache's long-document QA benchmark's result files (``warmup_round.csv``, ``query_round.csv``) as measurements.

The benchmark's rounds and columns are described in ``sim.workloads.longdocqa``,
which turns its query round into a pass.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.bounds import textfile
from sim.calibration.measurements import (
    CONFIG_ALIASES,
    MAX_TTFT_MS,
    MIN_TTFT_MS,
    UNKNOWN_DOC,
    Measurement,
    MeasurementError,
)
from sim.workloads.longdocqa import parse_hit_miss, query_label, repeat_order
from sim.workloads.questions import REPEAT_MODES

WARMUP_FILE, QUERY_FILE = "warmup_round.csv", "query_round.csv"
# The columns that make a CSV one of long_doc_qa's rounds (kvscope's own files have ttft_ms instead).
ROUND_COLUMNS = ("prompt_id", "ttft")
_FALSE = {"false", "0", "no"}


def find_pair(path: Path) -> tuple[Path, Path]:
    """A folder holding ``warmup_round.csv`` and ``query_round.csv``, or ``WARMUP,QUERY`` given as two files."""
    text = str(path)
    if "," in text:
        first, second = text.split(",", 1)
        return Path(first), Path(second)
    if not path.is_dir():
        raise MeasurementError(f"{path}: not a folder with {WARMUP_FILE} and {QUERY_FILE} (or give WARMUP.csv,QUERY.csv)")
    return path / WARMUP_FILE, path / QUERY_FILE


def _read_text(path: Path) -> str:
    try:
        return textfile.read_text(path)
    except textfile.FileProblem as exc:
        raise MeasurementError(f"{path}: {exc}") from None


def is_round(fieldnames: list[str] | None) -> bool:
    """Whether a CSV header is a long_doc_qa round's: it has ``prompt_id`` and ``ttft`` (seconds), not ``ttft_ms``."""
    names = set(fieldnames or [])
    return set(ROUND_COLUMNS) <= names and "ttft_ms" not in names


@dataclass(frozen=True, slots=True)
class Failure:
    """A request the benchmark recorded as failed: counted and shown, left out of the statistics."""

    config: str
    pass_: int
    prompt_id: int
    file: str
    line: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config, "pass": self.pass_, "prompt_id": self.prompt_id, "file": self.file, "line": self.line,
            "reason": self.reason,
        }

    def text(self) -> str:
        return failure_text(self.to_dict())


def failure_text(f: dict[str, Any]) -> str:
    """One failed request in a line, from its ``to_dict`` (as a kept run holds it)."""
    return f"{f['config']} pass {f['pass']} prompt_id {f['prompt_id']} ({f['file']} line {f['line']}): {f['reason']}"


@dataclass(slots=True)
class Run:
    """A long_doc_qa run read as measurements, its failed requests, and the most requests it had in flight at once."""

    rows: list[Measurement]
    failures: list[Failure]
    in_flight: int = 1


def max_in_flight(text: str) -> int:
    """The most requests of a round that overlapped, from ``request_start`` and ``request_end`` (seconds): what
    ``--max-inflight-requests`` allowed and the server was given. 1 when the round lacks those columns.

    A request that ended as another started is not counted with it (``long_doc_qa`` starts the next request when
    one returns)."""
    reader = textfile.DictReader(io.StringIO(text), error=MeasurementError)
    if not {"request_start", "request_end"} <= set(reader.fieldnames or []):
        return 1
    edges: list[tuple[float, int]] = []
    for raw in reader:
        try:
            start, end = float(raw["request_start"]), float(raw["request_end"])
        except (TypeError, ValueError):
            continue  # parse_round reports the row if it matters; a failed request's times may be blank
        if end >= start:
            edges += [(start, 1), (end, -1)]
    most = now = 0
    for _, step in sorted(edges):  # at a tie, an end (-1) sorts before a start (+1)
        now += step
        most = max(most, now)
    return max(most, 1)


def _failed(raw: dict[str, str], ttft_s: float) -> str | None:
    """Why the row is a failed request, or None: ``successful`` False, ``ttft`` -1 (newer) or 0.0 (older)."""
    if (raw.get("successful") or "").strip().lower() in _FALSE:
        return f"successful is False (ttft {raw['ttft']})"
    if ttft_s == -1:
        return "ttft is -1, which long_doc_qa writes for a failed request"
    if ttft_s == 0:
        return "ttft is 0.0, which long_doc_qa writes when a request produced no output"
    return None


def parse_round(name: str, text: str, expected: int | None) -> tuple[dict[int, float], dict[int, tuple[int, str]]]:
    """``({prompt_id: ttft seconds}, {prompt_id: (line, why it failed)})``; every id from 0 exactly once in one or
    the other. ``name`` labels errors."""
    reader = textfile.DictReader(io.StringIO(text), error=MeasurementError)
    missing = [c for c in ROUND_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise MeasurementError(f"{name} line 1: header lacks {', '.join(missing)} (long_doc_qa writes prompt_id, request_start, ttft, request_end)")
    seen: dict[int, float] = {}
    failed: dict[int, tuple[int, str]] = {}
    for raw in reader:
        line = reader.line_num
        if None in raw:
            raise MeasurementError(f"{name} line {line}: more fields than the header has")
        try:
            prompt_id = int(raw["prompt_id"])
            ttft_s = float(raw["ttft"])
        except (TypeError, ValueError):
            raise MeasurementError(f"{name} line {line}: prompt_id {raw['prompt_id']!r} or ttft {raw['ttft']!r} is not a number") from None
        why = _failed(raw, ttft_s)
        if why is None and not MIN_TTFT_MS / 1000 <= ttft_s <= MAX_TTFT_MS / 1000:  # also false for NaN
            raise MeasurementError(
                f"{name} line {line}: ttft must be from {MIN_TTFT_MS / 1000:.6f} to {MAX_TTFT_MS // 1000:,} seconds "
                "(or -1 for a failed request), "
                f"got {raw['ttft']!r}"
            )
        if prompt_id < 0 or (expected is not None and prompt_id >= expected):
            limit = f"0..{expected - 1}" if expected is not None else ">= 0"
            raise MeasurementError(f"{name} line {line}: prompt_id {prompt_id} is outside {limit}")
        if prompt_id in seen or prompt_id in failed:
            raise MeasurementError(f"{name} line {line}: prompt_id {prompt_id} appears twice")
        if why is None:
            seen[prompt_id] = ttft_s
        else:
            failed[prompt_id] = (line, why)
    count = expected if expected is not None else len(seen) + len(failed)
    absent = [i for i in range(count) if i not in seen and i not in failed]
    if absent or not count:
        raise MeasurementError(f"{name}: expected prompt_id 0..{count - 1}, missing {', '.join(map(str, absent[:10])) or 'all'}")
    if not seen:
        raise MeasurementError(f"{name}: every one of its {count} requests failed; nothing to measure")
    return dict(sorted(seen.items())), failed


def read_run(
    path: Path,
    repeat_mode: str | None,
    config: str | None = None,
    docs: int | None = None,
    repeat_count: int | None = None,
    shuffle_seed: int = 0,
    hit_miss_ratio: str | None = None,
    doc_tokens: int = 20_000,
) -> Run:
    """One long_doc_qa run from its files (see ``parse_run``); the configuration defaults to the folder's name."""
    warmup_path, query_path = find_pair(path)
    name = config or (warmup_path.parent.resolve().name or "long_doc_qa")
    return parse_run(
        (warmup_path.name, _read_text(warmup_path)), (query_path.name, _read_text(query_path)), repeat_mode, name,
        docs, repeat_count, shuffle_seed, hit_miss_ratio, doc_tokens,
    )


def parse_run(
    warmup: tuple[str, str] | None,
    query: tuple[str, str] | None,
    repeat_mode: str | None,
    config: str,
    docs: int | None = None,
    repeat_count: int | None = None,
    shuffle_seed: int = 0,
    hit_miss_ratio: str | None = None,
    doc_tokens: int = 20_000,
) -> Run:
    """One long_doc_qa run as measurements: pass 1 the warmup round, pass 2 the query round (either may be alone).

    ``warmup`` and ``query`` are (file name, text). ``docs`` and
    ``repeat_count`` default to what the files imply (the warmup has one row
    per document); given, they are checked. Without ``repeat_mode`` the query
    round's documents are unknown (``UNKNOWN_DOC``) and its pass is labelled
    ``query``: enough for statistics, not for re-simulating the run. ``vllm``
    and ``lmcache`` read as ``gpu`` and ``gpu+cpu``. The files are read whole
    or not at all.
    """
    if repeat_mode is not None and repeat_mode not in REPEAT_MODES:
        raise MeasurementError(f"unknown repeat mode {repeat_mode!r}; known: {', '.join(REPEAT_MODES)}")
    if hit_miss_ratio is not None:
        try:
            parse_hit_miss(hit_miss_ratio)
        except ValueError as exc:
            raise MeasurementError(str(exc)) from None
    name = CONFIG_ALIASES.get(config.lower(), config)
    rows: list[Measurement] = []
    failures: list[Failure] = []
    n = docs
    in_flight = max((max_in_flight(r[1]) for r in (warmup, query) if r is not None), default=1)
    if warmup is not None:
        ok, failed = parse_round(*warmup, docs)
        n = len(ok) + len(failed)
        rows += [Measurement(name, 1, "forward", i, i, doc_tokens, round(t * 1000, 3), source="live") for i, t in ok.items()]
        failures += [Failure(name, 1, i, warmup[0], line, why) for i, (line, why) in sorted(failed.items())]
    if query is not None:
        expected = n * repeat_count if n is not None and repeat_count is not None else None
        ok, failed = parse_round(*query, expected)
        total = len(ok) + len(failed)
        order: list[int] | None = None
        label = "query"
        if n is not None and repeat_mode is not None:
            if total % n:
                raise MeasurementError(f"{query[0]}: {total} prompts is not a whole number of repeats of {n} documents")
            count = total // n
            order = repeat_order(n, count, repeat_mode, shuffle_seed)
            label = query_label(repeat_mode, count, shuffle_seed, hit_miss_ratio)
        first = n or 0
        rows += [
            Measurement(name, 2, label, first + i, order[i] if order else UNKNOWN_DOC, doc_tokens, round(t * 1000, 3), source="live")
            for i, t in ok.items()
        ]
        failures += [Failure(name, 2, i, query[0], line, why) for i, (line, why) in sorted(failed.items())]
    return Run(rows, failures, in_flight)
