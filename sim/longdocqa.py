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
   a request that produced no output.
The pre-warmup is left out: under LRU its blocks are the oldest and are evicted
before any document's, exactly like blocks that were never used. A forced miss
keeps its document's length here (the few tokens of the random number are not
counted). Requests run one at a time here (``--max-inflight-requests 1``).
"""

from __future__ import annotations

import io
import math
import random
import re
from pathlib import Path
from typing import Literal

from sim import textfile
from sim.measurements import CONFIG_ALIASES, Measurement, MeasurementError

RepeatMode = Literal["tile", "interleave", "random"]
REPEAT_MODES: tuple[RepeatMode, ...] = ("tile", "interleave", "random")
WARMUP_FILE, QUERY_FILE = "warmup_round.csv", "query_round.csv"
_RATIO_RE = re.compile(r"^(\d+):(\d+)$")


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


def _parse_round(name: str, text: str, expected: int | None) -> list[tuple[int, float]]:
    """``(prompt_id, ttft seconds)`` in prompt-id order; every id from 0 exactly once. ``name`` labels errors."""
    reader = textfile.DictReader(io.StringIO(text), error=MeasurementError)
    missing = [c for c in ("prompt_id", "ttft") if c not in (reader.fieldnames or [])]
    if missing:
        raise MeasurementError(f"{name} line 1: header lacks {', '.join(missing)} (long_doc_qa writes prompt_id, request_start, ttft, request_end)")
    seen: dict[int, float] = {}
    for raw in reader:
        line = reader.line_num
        if None in raw:
            raise MeasurementError(f"{name} line {line}: more fields than the header has")
        try:
            prompt_id = int(raw["prompt_id"])
            ttft_s = float(raw["ttft"])
        except (TypeError, ValueError):
            raise MeasurementError(f"{name} line {line}: prompt_id {raw['prompt_id']!r} or ttft {raw['ttft']!r} is not a number") from None
        if not math.isfinite(ttft_s) or ttft_s < 0:
            raise MeasurementError(f"{name} line {line}: ttft must be a finite number of seconds >= 0, got {raw['ttft']!r}")
        if ttft_s == 0:
            raise MeasurementError(f"{name} line {line}: ttft is 0.0, which long_doc_qa writes when a request produced no output")
        if prompt_id < 0 or (expected is not None and prompt_id >= expected):
            limit = f"0..{expected - 1}" if expected is not None else ">= 0"
            raise MeasurementError(f"{name} line {line}: prompt_id {prompt_id} is outside {limit}")
        if prompt_id in seen:
            raise MeasurementError(f"{name} line {line}: prompt_id {prompt_id} appears twice")
        seen[prompt_id] = ttft_s
    count = expected if expected is not None else len(seen)
    absent = [i for i in range(count) if i not in seen]
    if not seen or absent:
        raise MeasurementError(f"{name}: expected prompt_id 0..{count - 1}, missing {', '.join(map(str, absent[:10])) or 'all'}")
    return sorted(seen.items())


def read_run(
    path: Path,
    repeat_mode: str,
    config: str | None = None,
    docs: int | None = None,
    repeat_count: int | None = None,
    shuffle_seed: int = 0,
    hit_miss_ratio: str | None = None,
    doc_tokens: int = 20_000,
) -> list[Measurement]:
    """One long_doc_qa run from its files (see ``parse_run``); the configuration defaults to the folder's name."""
    warmup_path, query_path = find_pair(path)
    name = config or (warmup_path.parent.resolve().name or "long_doc_qa")
    return parse_run(
        (warmup_path.name, _read_text(warmup_path)), (query_path.name, _read_text(query_path)), repeat_mode, name,
        docs, repeat_count, shuffle_seed, hit_miss_ratio, doc_tokens,
    )


def parse_run(
    warmup: tuple[str, str],
    query: tuple[str, str],
    repeat_mode: str,
    config: str,
    docs: int | None = None,
    repeat_count: int | None = None,
    shuffle_seed: int = 0,
    hit_miss_ratio: str | None = None,
    doc_tokens: int = 20_000,
) -> list[Measurement]:
    """One long_doc_qa run as measurements: pass 1 the warmup round, pass 2 the query round.

    ``warmup`` and ``query`` are (file name, text). ``docs`` and
    ``repeat_count`` default to what the files imply (the warmup has one row
    per document); given, they are checked. ``vllm`` and ``lmcache`` read as
    ``gpu`` and ``gpu+cpu``. The whole pair is read or nothing is.
    """
    if repeat_mode not in REPEAT_MODES:
        raise MeasurementError(f"unknown repeat mode {repeat_mode!r}; known: {', '.join(REPEAT_MODES)}")
    if hit_miss_ratio is not None:
        try:
            parse_hit_miss(hit_miss_ratio)
        except ValueError as exc:
            raise MeasurementError(str(exc)) from None
    warmup_rows = _parse_round(*warmup, docs)
    n = len(warmup_rows)
    query_rows = _parse_round(*query, n * repeat_count if repeat_count is not None else None)
    if len(query_rows) % n:
        raise MeasurementError(f"{query[0]}: {len(query_rows)} prompts is not a whole number of repeats of {n} documents")
    count = len(query_rows) // n
    order = repeat_order(n, count, repeat_mode, shuffle_seed)
    name = CONFIG_ALIASES.get(config.lower(), config)
    label = query_label(repeat_mode, count, shuffle_seed, hit_miss_ratio)
    rows = [
        Measurement(name, 1, "forward", prompt_id, prompt_id, doc_tokens, round(ttft_s * 1000, 3), source="live")
        for prompt_id, ttft_s in warmup_rows
    ]
    rows += [
        Measurement(name, 2, label, n + prompt_id, order[prompt_id], doc_tokens, round(ttft_s * 1000, 3), source="live")
        for prompt_id, ttft_s in query_rows
    ]
    return rows
