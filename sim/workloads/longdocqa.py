"""LMCache's long-document QA benchmark: its query round as a pass (its result files: ``sim.calibration.longdocqa_files``).

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
counted). With ``--max-inflight-requests`` above 1 the rounds' request times
show the overlap (``longdocqa_files.max_in_flight``), and the run is simulated
with that many in flight through vLLM's scheduler.
"""

from __future__ import annotations

import random
import re

from sim.workloads.questions import REPEAT_MODES

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
