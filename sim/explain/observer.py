"""Per-request attribution: an engine observer that gives every missed token one cause (sim.explain.causes).

The engine calls the observer at lookup time, before anything is evicted or
stored for the request, so a tier's own map says what it holds (GPU
``cached``, a chunk store's ``chunks``). What it cannot say is what it held
before: each tier writes, while an observer is attached, its
``eviction_log``: key -> seq of the request whose allocation or store
evicted it last. So a missed unit is
``chain-broken`` if the tier holds it, else ``evicted`` if it is in ``gone``,
else ``first-seen``.

The GPU map covers ``[gpu_hit, prompt)`` in blocks; the ``computed`` map covers
``[hit_end, prompt)``: for a GPU-only run it is the GPU map, otherwise the
offload tiers' verdict (their chunks, looked up CPU then disk as one lookup:
a chunk held by any is ``chain-broken``; one evicted is ``evicted`` from the
last tier in lookup order that evicted it).

The infinite-cache bound: a tier of unbounded size holds every unit any
earlier request had (the GPU caches every full block; a unit's first
occurrence always holds computed tokens, which are written through), so the
bound's hit is the longest prefix of units seen before, under the same rules.
A full chunk's key is the key of its last block (sim.workloads.requests, sim.simulation.replay), so
the GPU's history answers for full chunks; partial chunks are remembered apart.

Speed: the per-key work is done by C loops (``itemgetter`` over the history,
``isdisjoint`` against the held map, ``tuple.count``, ``Counter``), and a
request's missed units almost always take one of a few shapes (never seen;
evicted by a request or two, then never seen; no unit held), which are told
apart by a few such calls and built directly; any other mix takes the general
path. Keys that are small integers (a trace's hash ids, a scenario's dense ids:
``key_slots``, which a workload that knows its key range answers without a
scan) keep the history in a list indexed by key instead of a dict of every key
ever evicted, whose reads and writes are cache misses at a few hundred thousand keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sim.engine.events import GPU
from sim.explain.causes import (
    CHAIN_BROKEN,
    EVICTED,
    FIRST_SEEN,
    LAST_TOKEN,
    NOT_STORED,
    PARTIAL_BLOCK,
    PARTIAL_CHUNK,
    PRECEDENCE,
)

if TYPE_CHECKING:
    from sim.blocks.request import Request
    from sim.engine.loop import Engine, Explanation

HELD = -1  # state of a unit the tier holds; an evicted unit's state is the evicting request's seq (>= 0)


class TierHistory:
    """What one tier holds (its own map, read only) and lost: ``gone``, key -> the seq that evicted it last.

    ``gone`` is the tier's ``eviction_log``: the tier writes it as it evicts,
    with the seq the observer set before the request's allocation and stores.
    It is a dict, or with ``slots`` a list indexed by the key itself (``key_slots``).
    """

    __slots__ = ("name", "tier", "gone", "held", "get", "listed")

    def __init__(self, name: str, tier: Any, held: Any, slots: int | None = None) -> None:
        self.name = name
        self.tier = tier
        self.gone: dict[int, int] | list[int | None] = {} if slots is None else [None] * slots
        self.listed = isinstance(self.gone, list)
        self.get = self.gone.__getitem__ if self.listed else self.gone.get
        tier.eviction_log = self.gone
        self.held = held

    def gone_of(self, keys: Sequence[int]) -> Sequence[int | None]:
        """Per key: the seq that evicted it last, or None (held, or never held)."""
        if self.listed and len(keys) > 1:
            return itemgetter(*keys)(self.gone)  # a tuple, about twice as fast as map over __getitem__
        return list(map(self.get, keys))

    def states(self, keys: Sequence[int]) -> Sequence[int | None]:
        """Per key: ``HELD``, the evicting seq, or None (never held)."""
        gone = self.gone_of(keys)
        if self.held.keys().isdisjoint(keys):
            return gone
        held = self.held
        return [HELD if k in held else g for k, g in zip(keys, gone)]

    def all_seen(self, keys: Sequence[int]) -> bool:
        """Whether the tier held each of ``keys`` at some time (it holds it, or evicted it)."""
        if not keys:
            return True
        gone = self.gone_of(keys)
        if None not in gone:
            return True
        held = self.held
        return all(g is not None or k in held for k, g in zip(keys, gone))


# Keys this far from 0 are hashes, not ids: no list of slots for them.
_MAX_SLOTS = 1 << 26


def key_slots(requests: Sequence[Request]) -> int | None:
    """A list length that gives every key of ``requests`` its own slot, if their keys are small integers.

    A trace's keys are its hash ids (small, mostly dense) and the generated
    blocks' own negative keys; a scenario's are dense ids (sim.workloads.requests), its
    partial chunks' too. A list indexed by key then keeps the eviction
    history in a few bytes per key, where a dict of every key ever evicted
    spends most of attribution's time on cache misses. A key ``-j`` indexes
    slot ``len - j`` (Python's negative index), past every non-negative key.
    None when the keys are hashes (a prompt's, sim.blocks.prompt_keys): the history stays a dict.
    A workload that knows its keys' range (``sim.workloads.requests.Requests``) is not scanned.
    """
    known = getattr(requests, "key_range", None)
    if known is not None:
        low, top, refs = known
        low = min(0, low)
    else:
        lists = [keys for r in requests for keys in (r.block_keys, r.chunk_keys) if keys]
        if not lists:
            return None
        top, low, refs = max(map(max, lists)), min(0, min(map(min, lists))), sum(map(len, lists))
    slots = top + 1 - low
    return slots if top < _MAX_SLOTS and -low < _MAX_SLOTS and slots <= 4 * refs + 1024 else None


def _entry(tier: str, by: dict[int, int], start: int, end: int, first_end: int, unseen_at: int, lo: int, hi: int
           ) -> dict[str, Any]:
    """One tier's evicted tokens of a request; the capacities are filled in later (sim.explain.capacity).

    ``by`` maps an evicting seq to tokens; ``reachable`` says whether any
    capacity could serve them: not if a unit never held (``unseen_at``, an
    index like ``lo`` and ``hi``) comes first.
    """
    return {
        "tier": tier,
        "tokens": sum(by.values()),
        "start": start,
        "end": end,
        "first_end": first_end,
        "by": [{"seq": s, "tokens": t} for s, t in sorted(by.items())],
        "first_hit_tokens": None,
        "needed_tokens": None,
        "reachable": {"first": unseen_at > lo, "all": unseen_at > hi},
    }


def _span(states: list[Any], match: Any) -> tuple[int, int]:
    """First and last index whose state passes ``match`` (``_is_evicted`` tested inline: no call per state)."""
    if match is _is_evicted:
        lo = next(i for i, s in enumerate(states) if s is not None and s != HELD)
        hi = len(states) - 1 - next(i for i, s in enumerate(reversed(states)) if s is not None and s != HELD)
        return lo, hi
    lo = next(i for i, s in enumerate(states) if match(s))
    hi = len(states) - 1 - next(i for i, s in enumerate(reversed(states)) if match(s))
    return lo, hi


def _by(counts: dict[int, int], unit: int) -> list[dict[str, int]]:
    """An evicted entry's ``by``: tokens per evicting seq, in seq order, from units per seq."""
    if len(counts) == 1:
        for seq, count in counts.items():
            return [{"seq": seq, "tokens": count * unit}]
    if len(counts) == 2:  # the usual case of several: spelt out, a third of the time of sorting and a comprehension
        (s, c), (t, d) = counts.items()
        if s > t:
            s, c, t, d = t, d, s, c
        return [{"seq": s, "tokens": c * unit}, {"seq": t, "tokens": d * unit}]
    return [{"seq": s, "tokens": c * unit} for s, c in sorted(counts.items())]


def _count(states: Sequence[Any]) -> dict[Any, int]:
    """How many units are in each state. A request's units come in a few long runs of one state (the tail
    evicted by one request, the head by the next), so the first and last states are counted first, in C."""
    first, last = states[0], states[-1]
    n = states.count(first)
    if n == len(states):
        return {first: n}
    if last != first:
        m = states.count(last)
        if n + m == len(states):
            return {first: n, last: m}
    return Counter(states)


def _is_evicted(state: Any) -> bool:
    return state is not None and state != HELD


class Attributor:
    """Attach to an engine (``attach``): every record it makes then carries ``gpu_miss``, ``computed`` and more.

    ``remember``: at most this many evicted units per tier are remembered (None: all). A long-running twin
    (the watch) sets it: when a tier's history grows past it, its older half of evictions is forgotten, and
    a unit evicted that long ago counts as ``first-seen`` again. The maps still sum exactly.
    """

    def __init__(self, engine: Engine, remember: int | None = None, slots: int | None = None) -> None:
        if remember is not None and slots is not None:
            raise ValueError("a bounded history (remember) is a dict: give no key slots")
        self.remember = remember
        self.block = engine.units.block
        self.chunk = engine.units.chunk
        self.gpu = TierHistory(GPU, engine.gpu, engine.gpu.cached, slots)
        self.offload = [TierHistory(s.name, s, s.chunks, slots) for s in engine.offload]
        self.seen_partial: set[int] = set()  # keys of partial chunks of earlier requests (save_unfull_chunk)
        self.lmcache = engine.lmcache  # LMCache's rules: a partial chunk after a hit on every full chunk is not saved
        self._gpu_gone = self.gpu.gone if self.gpu.listed else None
        self._gpu_held = engine.gpu.cached.keys()  # a live view: what the GPU holds at each call
        self._gpu_pool = engine.gpu
        self._offload_tiers = tuple(t.tier for t in self.offload)
        self._single = self.offload[0] if len(self.offload) == 1 else None  # the one offload tier's history
        # vLLM's native tier logs the blocks whose store was dropped (refused while the blocks it had to evict were
        # still being written): a block never held that is logged there missed for that reason (``not-stored``).
        self._dropped: dict[int, int] | None = None
        if self._single is not None and hasattr(self._single.tier, "dropped_log"):
            self._dropped = self._single.tier.dropped_log = {}

    def __call__(self, req: Request, gpu_hit: int, hit_end: int) -> Explanation:
        seq = self._gpu_pool.eviction_seq = req.seq  # what this request's allocation and stores evict, it evicts
        for tier in self._offload_tiers:
            tier.eviction_seq = seq
        if self.remember is not None:
            self._forget_old()
        # The GPU's causes, built in precedence order (sim.explain.causes): first what no GPU could hold.
        block, n, keys, most = self.block, req.prompt_tokens, req.block_keys, req.max_hit_blocks
        full = n // block  # the prompt's full blocks: not decode's
        if len(keys) < full:
            full = len(keys)
        gpu_miss: dict[str, int] = {PARTIAL_BLOCK: n - full * block} if n > full * block else {}
        if most < full:
            gpu_miss[LAST_TOKEN] = (full - most) * block
        hit = gpu_hit // block
        if hit < most:
            gpu_entry, gpu_bound = self._gpu(gpu_miss, keys[hit:most], hit)
        else:
            gpu_entry, gpu_bound = None, hit * block
        if not self.offload:
            return gpu_miss, gpu_miss, [gpu_entry] if gpu_entry is not None else [], gpu_bound
        computed, entries, bound = self._offload(req, hit_end, gpu_bound)
        if self._dropped and computed.get(FIRST_SEEN):
            computed = self._not_stored(req, hit_end, computed)
        if gpu_entry is not None:
            entries.insert(0, gpu_entry)
        return gpu_miss, computed, entries, max(gpu_bound, bound)

    def _forget_old(self) -> None:
        """Keep each tier's history within ``remember`` units: the later half of its evictions (by seq) stays."""
        assert self.remember is not None
        for history in (self.gpu, *self.offload):
            gone = history.gone
            assert isinstance(gone, dict)
            if len(gone) > self.remember:
                cutoff = sorted(gone.values())[len(gone) // 2]
                kept = {k: s for k, s in gone.items() if s >= cutoff}
                if len(kept) > self.remember:  # one request evicted most of them: keep only later ones
                    kept = {k: s for k, s in kept.items() if s > cutoff}
                gone.clear()
                gone.update(kept)  # the tier writes into this very dict
        if len(self.seen_partial) > self.remember:
            self.seen_partial.clear()  # only the infinite-cache bound reads it: then it is lower, never wrong in sum

    # -- the GPU: blocks ---------------------------------------------------

    def _gpu(self, causes: dict[str, int], missed: list[int], hit: int) -> tuple[dict[str, Any] | None, int]:
        """The missed blocks ``hit..`` of the prompt (those that could have hit): their causes into ``causes``;
        returns the evicted entry and the infinite-cache bound."""
        m = len(missed)
        # Once per request, C-level work only for the usual shapes: no block held (the GPU's prefix lookup
        # stopped at the first missed block, and held ones after it are rare), and then the blocks evicted
        # by a request or two, followed by blocks never seen. Anything else takes _gpu_states.
        gone = self._gpu_gone
        states = itemgetter(*missed)(gone) if gone is not None and m > 1 else self.gpu.gone_of(missed)
        if self._gpu_held.isdisjoint(missed):
            if states[-1] is None:
                unseen_at = states.index(None)
                if unseen_at == 0:
                    if states.count(None) == m:
                        causes[FIRST_SEEN] = m * self.block
                        return None, hit * self.block
                elif states[unseen_at:].count(None) == m - unseen_at:
                    causes[FIRST_SEEN] = (m - unseen_at) * self.block
                    return self._gpu_evicted(causes, _count(states[:unseen_at]), hit, unseen_at)
            elif states[0] is not None:
                counts = _count(states)
                if None not in counts:
                    return self._gpu_evicted(causes, counts, hit, m)
        return self._gpu_states(causes, missed, states, hit)

    def _gpu_evicted(self, causes: dict[str, int], counts: dict[Any, int], hit: int, unseen_at: int
                     ) -> tuple[dict[str, Any], int]:
        """The usual shape: the first ``unseen_at`` missed blocks evicted (by seq: ``counts``), the rest never seen."""
        block = self.block
        tokens = unseen_at * block
        causes[EVICTED] = tokens
        start = hit * block
        entry = {
            "tier": GPU,
            "tokens": tokens,
            "start": start,
            "end": start + tokens,
            "first_end": start + block,
            "by": _by(counts, block),
            "first_hit_tokens": None,
            "needed_tokens": None,
            "reachable": {"first": True, "all": True},
        }
        return entry, start + tokens

    def _gpu_states(self, causes: dict[str, int], missed: list[int], states: Sequence[Any], hit: int
                    ) -> tuple[dict[str, Any] | None, int]:
        """Any mix of held, evicted and never-seen blocks."""
        block, m = self.block, len(missed)
        held_now = self.gpu.held
        held = 0
        if not held_now.keys().isdisjoint(missed):
            states = [HELD if k in held_now else g for k, g in zip(missed, states)]
            held = states.count(HELD)
        unseen = states.count(None)
        if unseen == m:
            causes[FIRST_SEEN] = m * block
            return None, hit * block
        unseen_at = states.index(None) if unseen else m
        if unseen:
            causes[FIRST_SEEN] = unseen * block
        entry = None
        evicted = m - unseen - held
        if evicted:
            causes[EVICTED] = evicted * block
            if not held and unseen_at + unseen == m:  # evicted, then never held: the span is the head
                lo, hi = 0, unseen_at - 1
                counts = _count(states[:unseen_at] if unseen else states)
            else:
                lo, hi = _span(states, _is_evicted)
                counts = _count(states)
                counts.pop(None, None)
                counts.pop(HELD, None)
            by = {s: c * block for s, c in counts.items()}
            entry = _entry(GPU, by, (hit + lo) * block, (hit + hi + 1) * block, (hit + lo + 1) * block,
                           unseen_at, lo, hi)
        if held:
            causes[CHAIN_BROKEN] = held * block
        return entry, (hit + unseen_at) * block

    def _not_stored(self, req: Request, hit_end: int, causes: dict[str, int]) -> dict[str, int]:
        """Of the ``first-seen`` tokens, those of chunks whose store was dropped become ``not-stored``."""
        assert self._single is not None and self._dropped is not None
        chunk, n, keys = self.chunk, req.prompt_tokens, req.chunk_keys
        end = min((len(keys) - 1) * chunk + req.last_chunk_tokens if keys else 0, n - 1)
        held, gone, dropped = self._single.held, self._single.gone_of, self._dropped
        moved = 0
        for i in range(hit_end // chunk, -(-end // chunk)):
            key = keys[i]
            if key in dropped and key not in held and gone([key])[0] is None:
                moved += min((i + 1) * chunk, end) - max(i * chunk, hit_end)
        moved = min(moved, causes[FIRST_SEEN])
        if not moved:
            return causes
        causes = {**causes, FIRST_SEEN: causes[FIRST_SEEN] - moved, NOT_STORED: moved}
        return {c: causes[c] for c in PRECEDENCE if causes.get(c)}

    # -- the offload tiers: chunks -------------------------------------------

    def _offload(self, req: Request, hit_end: int, gpu_bound: int) -> tuple[dict[str, int], list[dict[str, Any]], int]:
        chunk, n, keys = self.chunk, req.prompt_tokens, req.chunk_keys
        m = len(keys)
        covered = (m - 1) * chunk + req.last_chunk_tokens if m else 0
        top = covered if covered > hit_end else hit_end
        causes: dict[str, int] = {PARTIAL_CHUNK: n - top} if n > top else {}  # built in precedence order
        end = covered if covered < n else n
        if end == n:
            causes[LAST_TOKEN] = 1  # the hit is clipped at the last token, which lies in a full chunk
            end = n - 1
        entries: list[dict[str, Any]] = []
        if end > hit_end:
            j0 = hit_end // chunk
            region = keys[j0 : -(-end // chunk)]  # the chunks holding [hit_end, end)
            states = self._single.states(region) if self._single is not None else self._chunk_states(region)
            if states[-1] is None and states.count(None) == len(states):  # none ever stored: new content
                causes[FIRST_SEEN] = end - hit_end
                return causes, entries, self._offload_bound(req, covered, gpu_bound)
            counts = _count(states)
            if self._single is not None and None not in counts and HELD not in counts:
                # The usual shape: every chunk evicted from the one offload tier, by a request or two. Tokens
                # are whole chunks but at the ends: the first starts at hit_end, the last ends at end.
                base, r = j0 * chunk, len(region)
                first_end = base + chunk if base + chunk < end else end
                tokens = {s: c * chunk for s, c in counts.items()}
                tokens[states[0]] -= chunk - (first_end - hit_end)
                if r > 1:
                    tokens[states[-1]] -= chunk - (end - base - (r - 1) * chunk)
                causes[EVICTED] = end - hit_end
                entries = [{
                    "tier": self._single.name,
                    "tokens": end - hit_end,
                    "start": hit_end,
                    "end": end,
                    "first_end": first_end,
                    "by": _by(tokens, 1),
                    "first_hit_tokens": None,
                    "needed_tokens": None,
                    "reachable": {"first": True, "all": True},
                }]
                return causes, entries, self._offload_bound(req, covered, gpu_bound)
            weights = _Weights(j0 * chunk, hit_end, end, chunk, len(region))
            counts = weights.tokens_by_state(states)
            unseen = counts.pop(None, 0)
            held = counts.pop(HELD, 0)
            unseen_at = states.index(None) if unseen else len(states)
            if unseen:
                causes[FIRST_SEEN] = unseen
            if counts:
                causes[EVICTED] = sum(counts.values())
                entries = self._offload_entries(states, counts, weights, unseen_at)
            if held:
                causes[CHAIN_BROKEN] = held
        return causes, entries, self._offload_bound(req, covered, gpu_bound)

    def _offload_bound(self, req: Request, covered: int, gpu_bound: int) -> int:
        """The unbounded offload tiers' hit: beyond the GPU's only if every full block was seen (a chunk's
        key is its last block's), so then only the last chunk can matter: the partial one, or the last token."""
        chunk, n, keys = self.chunk, req.prompt_tokens, req.chunk_keys
        partial = req.last_chunk_tokens < chunk and bool(keys)
        found = gpu_bound // chunk
        full_keys = keys[:-1] if partial else keys
        if gpu_bound == req.max_hit_blocks * self.block and keys and self.gpu.all_seen(full_keys[found:]):
            found = len(full_keys)
            if partial and keys[-1] in self.seen_partial:
                found = len(keys)
        # LMCache saves nothing when its own hit covers every full chunk and no new full chunk follows
        # (vllm_v1_adapter.py 331-338): unbounded, it never holds such a request's partial chunk.
        if partial and not (self.lmcache and full_keys and self.gpu.all_seen(full_keys)):
            self.seen_partial.add(keys[-1])
        return min(covered if found == len(keys) else found * chunk, n - 1)

    def _chunk_states(self, region: list[int]) -> list[Any]:
        """Per chunk: ``HELD`` if an offload tier holds it; else the evicting seq (with several tiers,
        ``(tier, seq)`` of the last tier in lookup order that evicted it); None if no tier ever held it."""
        tiers = self.offload
        if len(tiers) == 1:
            return tiers[0].states(region)
        out: list[Any] = []
        for key in region:
            if any(key in t.held for t in tiers):
                out.append(HELD)
                continue
            out.append(next(((t.name, t.get(key)) for t in reversed(tiers) if t.get(key) is not None), None))
        return out

    def _offload_entries(self, states: list[Any], counts: dict[Any, int], weights: _Weights, unseen_at: int
                         ) -> list[dict[str, Any]]:
        by_tier: dict[str, dict[int, int]] = {}
        single = len(self.offload) == 1
        for state, tokens in counts.items():
            tier, by = (self.offload[0].name, state) if single else state
            by_tier.setdefault(tier, {})[by] = tokens
        entries = []
        for tier, by in by_tier.items():
            lo, hi = _span(states, _is_evicted if single else (lambda s, tier=tier: isinstance(s, tuple) and s[0] == tier))
            entries.append(_entry(tier, by, weights.start(lo), weights.end(hi), weights.end(lo), unseen_at, lo, hi))
        return entries


class _Weights:
    """Tokens of each chunk of a region ``[lo, hi)`` whose chunks start at ``base``: whole chunks but the ends."""

    __slots__ = ("base", "lo", "hi", "chunk", "count")

    def __init__(self, base: int, lo: int, hi: int, chunk: int, count: int) -> None:
        self.base, self.lo, self.hi, self.chunk, self.count = base, lo, hi, chunk, count

    def start(self, i: int) -> int:
        return max(self.base + i * self.chunk, self.lo)

    def end(self, i: int) -> int:
        return min(self.base + (i + 1) * self.chunk, self.hi)

    def tokens_by_state(self, states: list[Any]) -> dict[Any, int]:
        """Tokens per state: whole chunks, corrected where the region starts or ends inside one."""
        tokens = {s: c * self.chunk for s, c in _count(states).items()}
        for i in {0, self.count - 1}:
            tokens[states[i]] -= self.chunk - (self.end(i) - self.start(i))
        return tokens


def attach(engine: Engine, remember: int | None = None, slots: int | None = None) -> Attributor:
    """Attribute every request the engine serves from now on; the engine must not have served any yet.

    ``remember`` bounds the eviction history per tier (``Attributor``); ``slots`` (``key_slots`` of every
    request the engine will serve) keeps it in a list indexed by key instead of a dict."""
    if engine.records:
        raise ValueError("attach an attributor before the engine serves its first request")
    attributor = Attributor(engine, remember, slots)
    engine.observer = attributor
    return attributor
