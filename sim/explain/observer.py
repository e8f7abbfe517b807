"""Per-request attribution: an engine observer that gives every missed token one cause (sim.explain.causes).

The observer sees each request after the engine served it, so it keeps, per
tier, what it needs to know the tier's state at the request's lookup:

- ``ever``: every key the tier has held (for the GPU, every full block of an
  earlier request, since vLLM caches them all);
- ``gone``: the keys evicted and not held again since, with the seq of the
  request whose allocation or store evicted them (from the tier's
  ``eviction_log``, which the engine's tiers fill while an observer is attached).

A key of the request is then held at lookup iff it is in ``ever`` and not in
``gone``. The state is updated after the attribution: this request's
evictions enter ``gone``, and the keys it left cached leave it.

The GPU map covers ``[gpu_hit, prompt)`` in blocks; the ``computed`` map covers
``[hit_end, prompt)``: for a GPU-only run it is the GPU map, otherwise the
offload tiers' verdict (their chunks, looked up CPU then disk as one lookup:
a chunk held by any is ``chain-broken``; one evicted is ``evicted`` from the
last tier in lookup order that evicted it).

The infinite-cache bound: a tier of unbounded size holds every unit any
earlier request had (the GPU caches every full block; a unit's first
occurrence always holds computed tokens, which are written through), so the
bound's hit is the longest prefix of units seen before, under the same rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sim.events import GPU
from sim.explain.causes import (
    CHAIN_BROKEN,
    EVICTED,
    FIRST_SEEN,
    LAST_TOKEN,
    PARTIAL_BLOCK,
    PARTIAL_CHUNK,
    ordered,
)

if TYPE_CHECKING:
    from sim.engine import Engine, RequestRecord
    from sim.workload import Request


class TierHistory:
    """What one tier has held and lost, keyed by block or chunk key."""

    __slots__ = ("name", "log", "ever", "gone", "store")

    def __init__(self, name: str, log: list[int], store: Any = None) -> None:
        self.name = name
        self.log = log
        self.ever: set[int] = set()
        self.gone: dict[int, int] = {}
        self.store = store

    def held(self, key: int) -> bool:
        return key in self.ever and key not in self.gone

    def absorb_evictions(self, seq: int) -> None:
        if self.log:
            self.gone.update(dict.fromkeys(self.log, seq))
            self.log.clear()

    def now_held(self, keys: Sequence[int]) -> None:
        """``keys`` are held after the request: they are no longer gone."""
        self.ever.update(keys)
        gone = self.gone
        if gone:
            for key in gone.keys() & keys:
                del gone[key]


def _first_unseen(keys: Sequence[int], seen: set[int]) -> int:
    """Index of the first key not in ``seen`` (``len(keys)`` if none), cheaply when the unseen keys are a suffix."""
    unseen = len(keys) - len(seen.intersection(keys))
    if not unseen:
        return len(keys)
    tail = len(keys) - unseen
    if seen.isdisjoint(keys[tail:]):
        return tail
    return next(i for i, k in enumerate(keys) if k not in seen)


def _entry(tier: str, by: Counter[int], tokens_per_unit: int | None, start: int, end: int, first_end: int,
           reachable_first: bool, reachable_all: bool) -> dict[str, Any]:
    """One tier's evicted tokens of a request; the capacities are filled in later (sim.explain.capacity)."""
    return {
        "tier": tier,
        "tokens": sum(by.values()) * tokens_per_unit if tokens_per_unit else sum(by.values()),
        "start": start,
        "end": end,
        "first_end": first_end,
        "by": [{"seq": s, "tokens": c * tokens_per_unit if tokens_per_unit else c} for s, c in sorted(by.items())],
        "first_hit_tokens": None,
        "needed_tokens": None,
        "reachable": {"first": reachable_first, "all": reachable_all},
    }


class Attributor:
    """Attach to an engine (``attach``) and every record it makes carries ``gpu_miss``, ``computed`` and more."""

    def __init__(self, engine: Engine) -> None:
        self.block = engine.units.block
        self.chunk = engine.units.chunk
        engine.gpu.eviction_log = []
        self.gpu = TierHistory(GPU, engine.gpu.eviction_log)
        self.offload: list[TierHistory] = []
        for store in (engine.cpu, engine.disk):
            if store is not None:
                store.eviction_log = []
                self.offload.append(TierHistory(store.name, store.eviction_log, store))
        self.seen_chunks: set[int] = set()  # every chunk key of earlier requests (an unbounded offload tier)

    def __call__(self, req: Request, rec: RequestRecord) -> None:
        gpu_miss, gpu_entry, gpu_bound = self._gpu(req, rec)
        evicted: list[dict[str, Any]] = []
        if gpu_entry is not None:
            evicted.append(gpu_entry)
        if self.offload:
            computed, entries, bound = self._offload(req, rec)
            evicted.extend(entries)
            rec.infinite_hit_tokens = max(gpu_bound, bound)
        else:
            computed = dict(gpu_miss)
            rec.infinite_hit_tokens = gpu_bound
        rec.gpu_miss = ordered(gpu_miss)
        rec.computed = ordered(computed)
        rec.evicted_misses = evicted

    # -- the GPU: blocks ---------------------------------------------------

    def _gpu(self, req: Request, rec: RequestRecord) -> tuple[dict[str, int], dict[str, Any] | None, int]:
        block, n, keys, seq = self.block, rec.prompt_tokens, req.block_keys, req.seq
        tier = self.gpu
        hit = rec.gpu_hit_tokens // block
        full, most = len(keys), req.max_hit_blocks
        causes: dict[str, int] = {}
        if n > full * block:
            causes[PARTIAL_BLOCK] = n - full * block
        if most < full:
            causes[LAST_TOKEN] = (full - most) * block
        missed = keys[hit:most]
        entry = None
        first_unseen = len(missed)
        if missed:
            gone = tier.gone
            states = list(map(gone.get, missed)) if gone else []
            evicted = len(states) - states.count(None) if states else 0
            first_unseen = _first_unseen(missed, tier.ever)
            seen = len(tier.ever.intersection(missed))
            causes[FIRST_SEEN] = (len(missed) - seen) * block
            causes[EVICTED] = evicted * block
            causes[CHAIN_BROKEN] = (seen - evicted) * block
            if evicted:
                lo = next(i for i, s in enumerate(states) if s is not None)
                hi = len(states) - next(i for i, s in enumerate(reversed(states)) if s is not None)
                by = Counter(s for s in states if s is not None)
                entry = _entry(GPU, by, block, (hit + lo) * block, (hit + hi) * block, (hit + lo + 1) * block,
                               first_unseen > lo, first_unseen >= hi)
        tier.absorb_evictions(seq)
        tier.now_held(keys[hit:])  # vLLM caches every full block; the hit ones were held already
        return causes, entry, (hit + first_unseen) * block

    # -- the offload tiers: chunks -------------------------------------------

    def _offload(self, req: Request, rec: RequestRecord) -> tuple[dict[str, int], list[dict[str, Any]], int]:
        chunk, n, keys, seq = self.chunk, rec.prompt_tokens, req.chunk_keys, req.seq
        hit_end = n - rec.computed_tokens
        m = len(keys)
        covered = (m - 1) * chunk + req.last_chunk_tokens if m else 0
        causes: dict[str, int] = {}
        if n > max(covered, hit_end):
            causes[PARTIAL_CHUNK] = n - max(covered, hit_end)
        end = min(covered, n)
        if end == n:
            causes[LAST_TOKEN] = 1  # the hit is clipped at the last token, which lies in a full chunk
            end = n - 1
        tiers = self.offload
        by_tier: dict[str, Counter[int]] = {}
        spans: dict[str, list[int]] = {}  # tier -> [start, end, first_end]
        first_seen_at: int | None = None
        for j in range(hit_end // chunk, -(-end // chunk)):
            lo, hi = max(j * chunk, hit_end), min((j + 1) * chunk, end)
            if hi <= lo:
                continue
            key = keys[j]
            if any(t.held(key) for t in tiers):
                causes[CHAIN_BROKEN] = causes.get(CHAIN_BROKEN, 0) + hi - lo
                continue
            for t in reversed(tiers):
                by = t.gone.get(key)
                if by is not None:
                    causes[EVICTED] = causes.get(EVICTED, 0) + hi - lo
                    by_tier.setdefault(t.name, Counter())[by] += hi - lo
                    span = spans.get(t.name)
                    if span is None:
                        spans[t.name] = [lo, hi, hi]
                    else:
                        span[1] = hi
                    break
            else:
                causes[FIRST_SEEN] = causes.get(FIRST_SEEN, 0) + hi - lo
                if first_seen_at is None:
                    first_seen_at = lo
        entries = [
            _entry(name, by, None, spans[name][0], spans[name][1], spans[name][2],
                   first_seen_at is None or first_seen_at > spans[name][0],
                   first_seen_at is None or first_seen_at >= spans[name][1])
            for name, by in by_tier.items()
        ]
        # The bound: the longest prefix of chunks any earlier request had, clipped like the engine's lookup.
        found = _first_unseen(keys, self.seen_chunks)
        aligned = min(covered if found == m else found * chunk, n - 1)
        self.seen_chunks.update(keys)
        for t in tiers:
            t.absorb_evictions(seq)
            t.now_held(list(t.store.chunks.keys() & keys))
        return causes, entries, aligned


def attach(engine: Engine) -> Attributor:
    """Attribute every request the engine serves from now on; the engine must not have served any yet."""
    if engine.records:
        raise ValueError("attach an attributor before the engine serves its first request")
    attributor = Attributor(engine)
    engine.observer = attributor
    return attributor
