"""LMCache's long-document QA benchmark: its query round as a pass, and its result files as measurements.

``benchmarks/long_doc_qa/long_doc_qa.py`` in LMCache/LMCache (adapted there from
vLLM's ``benchmark_long_document_qa_throughput.py``) does, in ``main``:
1. ``random.seed(shuffle_seed)``; a pre-warmup of 5 unrelated 1,000-"hi" prompts;
2. warmup round: documents ``0..N-1`` once each, in order;
3. query round: ``repeat_prompts(docs, repeat_count, mode)`` where ``tile`` is
   ``docs * count``, ``interleave`` repeats each document ``count`` times in
   place, and ``random`` is ``docs * count`` then ``random.shuffle`` (the first
   use of the seeded generator); then ``add_cache_misses``: with ``--hit-miss-ratio
   H:M`` the prompt at position ``i`` gets a random number prepended, so it
   shares no prefix with anything, whenever ``i % (H + M) >= H``;
4. it writes ``warmup_round.csv`` and ``query_round.csv`` with columns
   ``prompt_id, request_start, ttft, request_end`` (and ``ttft_time``), times in
   seconds, ``prompt_id`` being the position in its round, and ``ttft`` 0.0 for
   a request that produced no output (LMCache/LMCache@3129b019). Newer versions
   add ``successful`` (False for a request that failed, whose ``ttft`` is -1)
   and ``is_miss`` (True for a forced miss), and average over the successful
   requests only. Both are read: a failed request (``successful`` False, ``ttft``
   -1, or ``ttft`` 0.0) is counted and reported as a ``Failure`` and left out of
   the statistics, never dropped silently.
The pre-warmup is left out: under LRU its blocks are the oldest and are evicted
before any document's, exactly like blocks that were never used. A forced miss
keeps its document's length here (the few tokens of the random number are not
counted). Requests run one at a time here (``--max-inflight-requests 1``).
"""

from __future__ import annotations

import io
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim import textfile
from sim.measurements import CONFIG_ALIASES, MAX_TTFT_MS, MIN_TTFT_MS, UNKNOWN_DOC, Measurement, MeasurementError
from sim.questions import REPEAT_MODES, RepeatMode

WARMUP_FILE, QUERY_FILE = "warmup_round.csv", "query_round.csv"
# The columns that make a CSV one of long_doc_qa's rounds (kvscope's own files have ttft_ms instead).
ROUND_COLUMNS = ("prompt_id", "ttft")
_FALSE = {"false", "0", "no"}
_RATIO_RE = re.compile(r"^([0-9]+):([0-9]+)$")  # ASCII digits: \d takes any script's


def parse_hit_miss(text: str) -> tuple[int, int]:
    """``"3:1"`` -> ``(3, 1)``: three prompts that may hit, then one forced miss."""
    match = _RATIO_RE.match(text.strip())
    if not match or int(match.group(1)) + int(match.group(2)) == 0:
        raise ValueError(f"hit:miss ratio {text!r} should be two whole numbers such as 3:1")
    return int(match.group(1)), int(match.group(2))


def repeat_order(docs: int, repeat_count: int, mode: str, shuffle_seed: int = 0) -> list[int]:
    """The documents of the query round in order (long_doc_qa's ``repeat_prompts``)."""
    base = list(range(docs))
    if mode == "tile":
        return base * repeat_count
    if mode == "interleave":
        return [d for d in base for _ in range(repeat_count)]
    if mode == "random":
        order = base * repeat_count
        random.Random(shuffle_seed).shuffle(order)  # same draws as random.seed(s); random.shuffle(order)
        return order
    raise ValueError(f"unknown repeat mode {mode!r}; known: {', '.join(REPEAT_MODES)}")


def forced_misses(requests: int, hit_miss_ratio: str | None) -> set[int]:
    """Positions in the query round that long_doc_qa's ``add_cache_misses`` turns into misses."""
    if hit_miss_ratio is None:
        return set()
    hit, miss = parse_hit_miss(hit_miss_ratio)
    return {i for i in range(requests) if i % (hit + miss) >= hit}


def query_label(mode: str, repeat_count: int, shuffle_seed: int = 0, hit_miss_ratio: str | None = None) -> str:
    """The query pass as ``--passes`` spells it: ``tile*2``, ``random*2@7``, ``tile*2:3:1``."""
    seed = f"@{shuffle_seed}" if mode == "random" else ""
    ratio = f":{hit_miss_ratio}" if hit_miss_ratio else ""
    return f"{mode}*{repeat_count}{seed}{ratio}"


# -- reading the benchmark's files ------------------------------------------


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
    """A long_doc_qa run read as measurements, and its failed requests."""

    rows: list[Measurement]
    failures: list[Failure]


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
    return Run(rows, failures)
