"""The capacity that would have hit: ``first_hit_tokens`` and ``needed_tokens`` of evicted tokens, by re-simulation.

For a request whose tokens a tier evicted, ``first_hit_tokens`` is the
smallest capacity of that tier (the rest of the run unchanged) at which the
request would have been served up to the end of its first evicted unit, and
``needed_tokens`` the smallest at which it would have been served up to the
end of its last one. "Served up to" is the GPU hit for the GPU tier, and the
whole stack's hit (GPU or offload) for an offload tier.

No stack-distance shortcut is exact here: vLLM's free queue frees a request's
blocks tail first, pins the blocks a request uses, reuses empty blocks before
cached ones and keeps stale copies of re-computed blocks, so a tier's content
at one capacity is not simply the top of one recency stack. So each answer
comes from whole runs of the same requests with the engine itself, at
capacities chosen by binary search, which assumes hits grow with capacity
(the tests check that by scanning capacities around the seed's answers); the
search itself shows each answer hits and one unit less does not. Runs are
memoized per capacity and shared by all requests, so requests with equal
thresholds cost one search; ``max_runs`` bounds the work, and what it leaves
out stays ``None`` (the summary counts it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sim.engine.events import CPU, DISK, GPU
from sim.engine.loop import Engine
from sim.numeric.search import smallest

if TYPE_CHECKING:
    from sim.blocks.request import Request
    from sim.costs.model import CostModel
    from sim.engine.loop import RequestRecord, TierSpec

# Where each tier's capacity lives in a run's tier spec (tokens).
TIER_FIELDS = {GPU: "gpu_tokens", CPU: "cpu_tokens", DISK: "disk_tokens"}
DEFAULT_MAX_RUNS = 400
# Block lookups all the runs of one search may make (about ten seconds of engine time).
MAX_SEARCH_BLOCKS = 20_000_000


def resized(spec: TierSpec, tier: str, tokens: int) -> TierSpec:
    """The same tiers with ``tier`` holding ``tokens``."""
    return dataclasses.replace(spec, **{TIER_FIELDS[tier]: tokens})


class Probe:
    """Runs of the same requests with one tier resized, memoized by capacity: per request, the tokens served."""

    def __init__(self, spec: TierSpec, requests: Sequence[Request], tier: str, costs: CostModel | None,
                 max_runs: int, max_blocks: int) -> None:
        self.spec, self.requests, self.tier, self.costs = spec, requests, tier, costs
        self.runs_left = max_runs
        self.blocks_left = max_blocks
        self.run_blocks = sum(len(r.block_keys) for r in requests)
        self.memo: dict[int, list[int]] = {}

    def served(self, tokens: int) -> list[int]:
        found = self.memo.get(tokens)
        if found is None:
            if self.runs_left <= 0 or self.blocks_left < self.run_blocks:
                raise _OutOfRuns
            self.runs_left -= 1
            self.blocks_left -= self.run_blocks
            engine = Engine("probe", resized(self.spec, self.tier, tokens), self.costs)
            records = engine.run_all(list(self.requests))
            if self.tier == GPU:
                found = [r.gpu_hit_tokens for r in records]
            else:
                found = [r.prompt_tokens - r.computed_tokens for r in records]
            self.memo[tokens] = found
        return found


class _OutOfRuns(Exception):
    pass


def _unit(spec: TierSpec, tier: str) -> int:
    return spec.units.block if tier == GPU else 1


def _upper(spec: TierSpec, tier: str, requests: Sequence[Request]) -> int:
    """A capacity at which the tier never evicts anything in these requests."""
    if tier == GPU:
        return (sum(r.alloc_blocks for r in requests) + 1) * spec.units.block
    return max(1, sum(len(r.chunk_keys) for r in requests) * spec.units.chunk)


def fill_needs(
    spec: TierSpec,
    requests: Sequence[Request],
    records: Sequence[RequestRecord],
    costs: CostModel | None = None,
    max_runs: int = DEFAULT_MAX_RUNS,
    seqs: set[int] | None = None,
    max_blocks: int = MAX_SEARCH_BLOCKS,
) -> dict[str, Any]:
    """Set ``first_hit_tokens`` and ``needed_tokens`` on every evicted entry of ``records``; returns the work done.

    ``requests`` and ``records`` are one whole run, in order, attributed
    (``sim.explain.attach``); ``seqs`` limits the search to those requests; ``max_runs`` and ``max_blocks``
    (block lookups over all runs) bound the work. The policy ``belady`` looks ahead, so its runs
    replay every request; the others stop after the last request asked about.
    """
    by_tier: dict[str, list[dict[str, Any]]] = {}
    seq_of: dict[int, int] = {}
    for i, rec in enumerate(records):
        if seqs is not None and rec.seq not in seqs:
            continue
        for entry in rec.evicted_misses or ():
            by_tier.setdefault(entry["tier"], []).append(entry)
            seq_of[id(entry)] = i
    work = {"runs": 0, "answers": 0, "left_out": 0, "max_runs": max_runs, "max_blocks": max_blocks}
    runs_left, blocks_left = max_runs, max_blocks
    for tier, entries in by_tier.items():
        last = max(seq_of[id(e)] for e in entries)
        upto = requests if spec.gpu_policy == "belady" else requests[: last + 1]
        probe = Probe(spec, upto, tier, costs, runs_left, blocks_left)
        current = getattr(spec, TIER_FIELDS[tier]) or 0
        unit = _unit(spec, tier)
        top = max(_upper(spec, tier, upto), current + unit) // unit
        for entry in entries:
            i = seq_of[id(entry)]
            try:
                for key, end, reachable in (
                    ("first_hit_tokens", entry["first_end"], entry["reachable"]["first"]),
                    ("needed_tokens", entry["end"], entry["reachable"]["all"]),
                ):
                    if not reachable:
                        continue
                    found = smallest(current // unit + 1, top, lambda c, i=i, end=end: probe.served(c * unit)[i] >= end)
                    if found is None:
                        continue
                    entry[key] = found * unit
                    work["answers"] += 1
            except _OutOfRuns:
                work["left_out"] += 1
        runs_left, blocks_left = probe.runs_left, probe.blocks_left
        work["runs"] += len(probe.memo)
    return work
