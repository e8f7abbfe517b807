"""The engine: runs requests through a tier stack (GPU, then CPU, then disk) and yields events and records.

The brief's three rules, block-exact (the ``brief`` CPU backend):
1. the GPU's prefix hit is served from GPU; the offload tiers are not asked about it;
2. the next chunks found in CPU (or disk) are loaded into GPU blocks instead of computed;
3. the rest is computed, cached on the GPU and written through to CPU (and disk).
The ``lmcache`` backend (the default) follows LMCache 0.5.6's own code where it
differs: its lookup covers the whole prompt and refreshes every hit chunk, last
first; it stores every chunk after its own hit, GPU-covered ones too; and it
reserves memory for a chunk before seeing that it already holds it (see
``_lookup_lmcache`` and ``_store_lmcache``). vLLM's metrics stay: the external
cache is *queried* for the prompt minus the GPU hit, and loads only what lies
beyond the GPU hit.
This loop is written once; tiers and their policies plug into it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sim.blocks.policies import Future, GpuPolicy
from sim.blocks.pool import Evictions, FreeOrder, GpuBlockPool
from sim.blocks.request import Request, Units
from sim.bounds.budget import checkpoint
from sim.costs.model import CostModel, default_costs
from sim.engine.events import (
    CPU,
    DISK,
    GPU,
    Event,
    Evict,
    Load,
    Lookup,
    Occupancy,
    PassDone,
    RequestStarted,
    RunDone,
    RunStarted,
    Store,
    TierInfo,
    Ttft,
)
from sim.engine.result import pass_summaries, run_totals
from sim.tiers.admission import AdmittingStore
from sim.tiers.chunk_store import (
    CPU_BACKENDS,
    DEFAULT_CPU_BACKEND,
    TOKENS,
    ChunkPolicy,
    ChunkStore,
    CpuBackend,
    StoredChunk,
)
from sim.tiers.native.tier import NativeCpuTier
from sim.tiers.offload import OffloadTier


@dataclass(frozen=True, slots=True)
class TierSpec:
    """The shape of a run's tiers: the GPU pool, then the offload tiers in lookup order.

    ``cpu_tokens`` and ``disk_tokens`` (with their policies) are the shorthand
    for the usual CPU and disk tiers; ``more_tiers`` are further tiers behind
    them. ``offload_tiers()`` is the ordered list the engine runs; tiers behind
    the CPU need the CPU (every LMCache store passes through its memory).
    """

    units: Units
    gpu_tokens: int
    cpu_tokens: int | None = None
    disk_tokens: int | None = None
    free_order: FreeOrder = "vllm"
    reserve_null_block: bool = True
    cpu_policy: ChunkPolicy = "lru"
    disk_policy: ChunkPolicy = "lru"
    gpu_policy: GpuPolicy = "lru"
    cpu_backend: CpuBackend = DEFAULT_CPU_BACKEND
    more_tiers: tuple[OffloadTier, ...] = ()

    def offload_tiers(self) -> list[OffloadTier]:
        if not self.cpu_tokens:
            return []
        tiers = [OffloadTier(CPU, "cpu", self.cpu_tokens, self.cpu_policy)]
        if self.disk_tokens:
            tiers.append(OffloadTier(DISK, "disk", self.disk_tokens, self.disk_policy))
        tiers.extend(self.more_tiers)
        return tiers


_NO_HITS: dict[str, int] = {}  # shared by every record without an offload hit; never written


# A request's misses by cause (sim.explain): gpu_miss, computed, evicted detail, infinite-cache hit.
Explanation = tuple[dict[str, int], dict[str, int], list[dict[str, Any]], int]


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request: where its prompt tokens came from and its TTFT.

    ``tier_hits`` maps an offload tier's name to the tokens loaded from it
    (tiers without a hit left out); ``cpu_hit_tokens`` and ``disk_hit_tokens``
    (every tier behind the CPU) flatten it, as the JSON result spells them.
    """

    seq: int
    pass_: int
    order: str
    doc: int
    prompt_tokens: int
    gpu_hit_tokens: int
    tier_hits: dict[str, int]
    computed_tokens: int
    stored_tokens: int
    ttft_ms: float
    source: str
    evicted: list[dict[str, Any]] = field(default_factory=list)
    # Why tokens missed (sim.explain), set by an attached observer: cause -> tokens, and evicted detail.
    gpu_miss: dict[str, int] | None = None
    computed: dict[str, int] | None = None
    evicted_misses: list[dict[str, Any]] | None = None
    infinite_hit_tokens: int | None = None

    @property
    def cpu_hit_tokens(self) -> int:
        return self.tier_hits.get(CPU, 0)

    @property
    def disk_hit_tokens(self) -> int:
        hits = self.tier_hits
        if not hits:
            return 0
        return sum(tokens for name, tokens in hits.items() if name != CPU)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "seq": self.seq,
            "pass": self.pass_,
            "order": self.order,
            "doc": self.doc,
            "prompt_tokens": self.prompt_tokens,
            "gpu_hit_tokens": self.gpu_hit_tokens,
            "cpu_hit_tokens": self.cpu_hit_tokens,
            "disk_hit_tokens": self.disk_hit_tokens,
            "tier_hits": dict(self.tier_hits),
            "computed_tokens": self.computed_tokens,
            "stored_tokens": self.stored_tokens,
            "ttft_ms": self.ttft_ms,
            "source": self.source,
            "evicted": self.evicted,
        }
        if self.gpu_miss is not None:
            data.update(
                gpu_miss=self.gpu_miss, computed=self.computed, evicted_misses=self.evicted_misses,
                infinite_hit_tokens=self.infinite_hit_tokens,
            )
        return data


def ttft_event(run: str, rec: RequestRecord) -> Ttft:
    """A request's ``ttft`` event, from its record."""
    return Ttft(
        run, rec.seq, rec.pass_, rec.doc, rec.ttft_ms, rec.source, rec.gpu_hit_tokens, rec.cpu_hit_tokens,
        rec.disk_hit_tokens, rec.computed_tokens, rec.stored_tokens, dict(rec.tier_hits),
    )


def _source(gpu: int, hits: dict[str, int], computed: int) -> str:
    """Where most of the prompt came from; ties go to the earlier tier (``hits`` in lookup order)."""
    best, name = gpu, GPU
    for tier, t in hits.items():
        if t > best:
            best, name = t, tier
    return "computed" if computed > best else name


def _chunk_items(req: Request, indexes: Iterable[int], chunk: int) -> list[tuple[int, StoredChunk]]:
    """The request's chunks at ``indexes`` (ascending) as a tier stores them: key, owner (-1 for the shared prefix),
    index, tokens."""
    keys, doc, shared = req.chunk_keys, req.doc, req.shared_chunks
    items = [(keys[i], (doc, i, chunk)) for i in indexes]
    if not items:
        return items
    if items[0][1][1] < shared:  # chunks of the shared prefix belong to no document
        items = [(k, (-1 if i < shared else doc, i, t)) for k, (_, i, t) in items]
    last = len(keys) - 1
    if items[-1][1][1] == last and req.last_chunk_tokens != chunk:
        key, (owner, i, _) = items[-1]
        items[-1] = (key, (owner, i, req.last_chunk_tokens))
    return items


def _part(start: int, end: int, full_end: int, first: int) -> str:
    head, tail = start <= first, end >= full_end
    return "whole" if head and tail else "head" if head else "tail" if tail else "middle"


# doc -> [tokens evicted, first chunk position, last chunk position]
ChunkEvictions = dict[int, list[int]]


def evicted_entries(
    units: Units, prompt_tokens: int, shared_blocks: int, shared_chunks: int, gpu: Evictions,
    offload: list[tuple[str, ChunkEvictions]],
) -> list[dict[str, Any]]:
    """A record's ``evicted`` list: per tier and document, the tokens evicted and where they lay in their prompts."""
    out: list[dict[str, Any]] = []
    block = units.block
    full_blocks = prompt_tokens // block
    for doc, (count, lo, hi) in gpu.items():
        out.append(
            {
                "tier": GPU,
                "doc": doc,
                "tokens": count * block,
                "start": lo * block,
                "end": (hi + 1) * block,
                "part": _part(lo, hi + 1, full_blocks, 0 if doc < 0 else shared_blocks),
            }
        )
    full_chunks = prompt_tokens // units.chunk
    for tier, by_doc in offload:
        for doc, (tokens, lo, hi) in by_doc.items():
            out.append(
                {
                    "tier": tier,
                    "doc": doc,
                    "tokens": tokens,
                    "start": lo * units.chunk,
                    "end": (hi + 1) * units.chunk,
                    "part": _part(lo, hi + 1, full_chunks, 0 if doc < 0 else shared_chunks),
                }
            )
    return out


class Engine:
    """One run: a GPU block pool, an ordered list of offload tiers (chunk stores), and a cost model."""

    def __init__(
        self, run: str, tiers: TierSpec, costs: CostModel | None = None, shared: Mapping[str, ChunkStore] | None = None,
    ) -> None:
        """``shared``: offload tiers by name whose store is given, not built (a fleet's tier behind every replica)."""
        self.run = run
        self._shared = shared or {}
        self.spec = tiers
        self.units = tiers.units
        self.costs = costs or default_costs()
        self.gpu = GpuBlockPool(
            tiers.gpu_tokens // tiers.units.block, tiers.units.block, tiers.free_order, tiers.reserve_null_block,
            tiers.gpu_policy,
        )
        specs = tiers.offload_tiers()
        if len({t.name for t in specs}) != len(specs) or GPU in {t.name for t in specs}:
            raise ValueError(f"offload tier names must be unique and not {GPU!r}: {[t.name for t in specs]}")
        self.native = tiers.cpu_backend == "vllm-native"
        self.offload: list[ChunkStore] = [self._tier(t) for t in specs]
        self.offload_specs = specs
        first = self.offload[0] if self.offload else None
        self.native_cpu = first if isinstance(first, NativeCpuTier) else None
        # The usual two by name, for callers that know only them.
        self.cpu: ChunkStore | None = self.offload[0] if self.offload else None
        self.disk: ChunkStore | None = self.offload[1] if len(self.offload) > 1 else None
        if tiers.cpu_backend not in CPU_BACKENDS:
            raise ValueError(f"unknown CPU backend {tiers.cpu_backend!r}; known: {', '.join(CPU_BACKENDS)}")
        self.lmcache = tiers.cpu_backend == "lmcache"
        self.records: list[RequestRecord] = []
        self.future: Future | None = None  # set by plan() for a policy that looks ahead (Belady)
        # Sees each request at lookup time, before anything is evicted for it (sim.explain).
        self.observer: Callable[[Request, int, int], Explanation] | None = None

    def _tier(self, t: OffloadTier) -> ChunkStore:
        """The store of one offload tier: vLLM's native CPU tier, or a chunk store following LMCache or the brief."""
        if t.name in self._shared:
            return self._shared[t.name]
        block, chunk = self.units.block, self.units.chunk
        if t.unit_tokens not in (None, chunk):
            raise ValueError(f"tier {t.name}: unit_tokens must be the run's chunk size ({chunk}), got {t.unit_tokens}")
        if self.native:
            return NativeCpuTier(t.name, t.capacity_tokens // chunk, chunk, block, t.policy, t.admission, t.prompt_only)
        if not t.prompt_only:
            raise ValueError(f"tier {t.name}: prompt_only false needs cpu_backend vllm-native (LMCache saves no decode KV)")
        if t.admission > 1:
            if t.kind == "cpu":
                raise ValueError(f"tier {t.name}: admission above 1 on the CPU tier needs cpu_backend vllm-native")
            return AdmittingStore(t.name, t.capacity_tokens, chunk, t.policy, t.admission)
        return ChunkStore(t.name, t.capacity_tokens, chunk, t.policy)

    def plan(self, requests: list[Request]) -> None:
        """Give a look-ahead policy the whole request list; the other policies need nothing."""
        plan = getattr(self.gpu.free_queue, "plan", None)
        if plan is not None:
            self.future = plan(requests)

    def tier_infos(self) -> list[TierInfo]:
        """The run's tiers in lookup order, as the ``run`` event and the JSON result list them."""
        infos = [TierInfo(GPU, self.units.block, self.gpu.capacity_blocks * self.units.block, self.gpu.policy)]
        for store, spec in zip(self.offload, self.offload_specs):
            infos.append(TierInfo(store.name, store.chunk_size, store.capacity_tokens, store.policy, spec.kind))
        return infos

    def start_event(self, requests: int, docs: int, doc_tokens: int) -> RunStarted:
        return RunStarted(self.run, [asdict(t) for t in self.tier_infos()], requests, docs, doc_tokens)

    # -- one request -------------------------------------------------------

    def process(self, req: Request, emit: bool = True) -> tuple[RequestRecord, list[Event]]:
        """Serve one request through the tiers; events are built only when ``emit``."""
        block = self.units.block
        n = req.prompt_tokens
        gpu = self.gpu
        if self.future is not None:
            self.future.now = req.seq

        hit_blocks = gpu.find_prefix(req.block_keys, req.max_hit_blocks)
        gpu.touch(hit_blocks)
        gpu_hit = len(hit_blocks) * block

        ext = self.lookup_offload(req, gpu_hit)
        hit_end = max(gpu_hit, ext.aligned)
        computed = n - hit_end
        explained = self.observer(req, gpu_hit, hit_end) if self.observer is not None else None  # at lookup time

        evictions: Evictions = {}
        new_blocks = gpu.allocate(req.alloc_blocks - len(hit_blocks), evictions)
        blocks = hit_blocks + new_blocks
        stored_gpu = gpu.cache_blocks(blocks, req.block_keys, len(hit_blocks), req.doc, req.shared_blocks)
        gpu.free(blocks, len(req.block_keys))  # cache_blocks hashed exactly the full blocks

        offload_evicted: list[list[StoredChunk]] = [[] for _ in self.offload]
        stored, written = self.store_offload(req, gpu_hit, hit_end, ext, offload_evicted)

        # vLLM's native connector copies stores out after the step's forward pass, on the worker's own stream
        # (wait_for_save defers them to the next step, offloading_connector.py 134-138): no cost to this TTFT.
        ttft = round(self._ttft_ms(computed, ext.tokens, 0 if self.native else written), 3)
        record = self.record(req, gpu_hit, ext, computed, written, ttft, evictions, offload_evicted)
        if explained is not None:
            record.gpu_miss, record.computed, record.evicted_misses, record.infinite_hit_tokens = explained
        self.records.append(record)
        if not emit:
            return record, []
        return record, self._events(req, record, ext, stored_gpu, stored)

    def lookup_offload(self, req: Request, gpu_hit: int) -> _External:
        """What the offload tiers serve beyond a GPU hit of ``gpu_hit`` tokens, by the run's backend."""
        if self.native:
            return self._lookup_native(req, gpu_hit)
        return self._lookup_lmcache(req, gpu_hit) if self.lmcache else self._lookup_external(req, gpu_hit)

    def store_offload(
        self, req: Request, gpu_hit: int, hit_end: int, ext: _External, offload_evicted: list[list[StoredChunk]]
    ) -> tuple[list[dict[int, int]], int]:
        """The backend's store after the prompt is computed: tokens each tier newly holds per document, tokens
        copied out of the GPU."""
        if self.native_cpu is not None:
            added, written = self.native_cpu.store(req, gpu_hit, ext.own_hit, req.output_tokens, offload_evicted[0])
            return [added], written
        if self.offload and self.lmcache:
            return self._store_lmcache(req, ext, offload_evicted)
        if self.offload:
            return self._write_through(req, hit_end, ext, offload_evicted)
        return [], 0

    def record(
        self, req: Request, gpu_hit: int, ext: _External, computed: int, written: int, ttft: float,
        evictions: Evictions, offload_evicted: list[list[StoredChunk]],
    ) -> RequestRecord:
        """The request's record: hits per tier, where most of the prompt came from, what its allocations evicted."""
        tokens = ext.tokens
        if any(tokens):
            hits = {store.name: t for store, t in zip(self.offload, tokens) if t}
            source = _source(gpu_hit, hits, computed)
        else:
            hits = _NO_HITS
            source = GPU if gpu_hit >= computed else "computed"
        evicted = self._evicted(req, evictions, offload_evicted)
        return RequestRecord(
            req.seq, req.pass_, req.order, req.doc, req.prompt_tokens, gpu_hit, hits, computed, written, ttft, source,
            evicted,
        )

    def _ttft_ms(self, computed: int, tokens: list[int], written: int) -> float:
        return cost_ms(self.costs, self.offload_specs, computed, tokens, written)

    def _lookup_external(self, req: Request, gpu_hit: int) -> _External:
        """Rule 2: the contiguous chunk prefix the offload tiers hold (each chunk from the first tier holding it),
        and what of it lies beyond the GPU hit."""
        stores = self.offload
        chunk = self.units.chunk
        keys = req.chunk_keys
        covered = (len(keys) - 1) * chunk + req.last_chunk_tokens if keys else 0
        if not stores or covered <= gpu_hit:
            return _External(tokens=[0] * len(stores))
        where: list[int] | None = None  # the tier of each found chunk; None: all from the first
        if len(stores) == 1:
            found = stores[0].prefix(keys)
        else:
            where = []
            maps = [s.chunks for s in stores]
            for key in keys:
                tier = next((t for t, m in enumerate(maps) if key in m), -1)
                if tier < 0:
                    break
                where.append(tier)
            found = len(where)
            if not any(where):
                where = None
        aligned = covered if found == len(keys) else found * chunk
        aligned = min(aligned, req.prompt_tokens - 1)  # vLLM recomputes the last token
        ext = _External(consulted=True, query_tokens=req.prompt_tokens - gpu_hit, aligned=aligned, tokens=[0] * len(stores))
        if aligned <= gpu_hit:
            return ext
        first, end = gpu_hit // chunk, -(-aligned // chunk)  # the chunks holding [gpu_hit, aligned)
        if where is None:
            ext.tokens[0] = aligned - gpu_hit
            ext.keys = [keys[first:end]]
        else:
            ext.keys = [[] for _ in stores]
            for i in range(first, end):
                t = where[i]
                ext.tokens[t] += min((i + 1) * chunk, aligned) - max(i * chunk, gpu_hit)
                ext.keys[t].append(keys[i])
                if t:
                    ext.promoted.append(i)
        for store, loaded in zip(stores, ext.keys):
            store.touch(loaded)
        return ext

    def _lookup_native(self, req: Request, gpu_hit: int) -> _External:
        """vLLM's native connector (``sim.tiers.native.tier``): asked for what lies beyond the GPU hit; a whole-prompt
        hit loads all but the last token, which vLLM recomputes."""
        if self.native_cpu is None:
            return _External()
        hit, keys = self.native_cpu.lookup(req, gpu_hit)
        return native_external(req, gpu_hit, hit, keys)

    def _lookup_lmcache(self, req: Request, gpu_hit: int) -> _External:
        """LMCache's lookup: the CPU's prefix of the prompt's chunks, then each further tier's of the rest; all refreshed.

        vLLM asks the connector with the GPU hit known (``vllm_v1_adapter.py``
        1360-1431), but LMCache looks up the whole prompt: every chunk it holds
        up to the first miss is pinned and then refreshed in the policy, last
        chunk first, GPU-covered ones included (``cache_engine.py`` 1244-1276,
        ``local_cpu_backend.py`` 127-142). ``storage_manager.py`` 972-1003 asks
        the CPU for a prefix, then the next backend for a prefix of what
        remains, and so on. Only the tokens beyond the GPU hit are loaded
        (``need_to_allocate``, adapter 1451-1455), and never the prompt's last token.
        """
        if not self.offload:
            return _External()
        return self.lmcache_load(req, gpu_hit, self.lmcache_lookup(req))

    def lmcache_lookup(self, req: Request) -> list[int]:
        """LMCache's lookup proper, with its side effect (every hit chunk refreshed): the index of each tier's first
        chunk, then the count of chunks found in all."""
        keys = req.chunk_keys
        bounds: list[int] = []
        found = 0
        for store in self.offload:
            bounds.append(found)
            if found == len(keys):
                continue
            count = store.prefix(keys, found)
            if count:
                store.touch_reversed(keys[found : found + count])
                found += count
        bounds.append(found)
        return bounds

    def lmcache_load(self, req: Request, gpu_hit: int, bounds: list[int]) -> _External:
        """What LMCache's hit (``lmcache_lookup``) loads beyond a GPU hit of ``gpu_hit`` tokens; no side effect."""
        stores = self.offload
        chunk = self.units.chunk
        keys = req.chunk_keys
        n = req.prompt_tokens
        found = bounds[-1]
        own = (len(keys) - 1) * chunk + req.last_chunk_tokens if keys and found == len(keys) else found * chunk
        aligned = min(own, n - 1)  # vLLM recomputes the last token
        ext = _External(consulted=True, query_tokens=n - gpu_hit, aligned=aligned, own_hit=own, tokens=[0] * len(stores))
        if aligned <= gpu_hit:
            return ext
        first, end = gpu_hit // chunk, -(-aligned // chunk)  # the chunks holding [gpu_hit, aligned)
        ext.keys = [[] for _ in stores]
        for t, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            lo, hi = max(first, lo), min(end, hi)
            if lo >= hi:
                continue
            ext.tokens[t] = min(hi * chunk, aligned) - max(lo * chunk, gpu_hit)
            ext.keys[t] = keys[lo:hi]
            if t:
                ext.promoted.extend(range(lo, hi))
        return ext

    def _store_lmcache(
        self, req: Request, ext: _External, evicted: list[list[StoredChunk]]
    ) -> tuple[list[dict[int, int]], int]:
        """LMCache's save: every chunk from its own hit on, GPU-covered or not; reserve first, skip held keys after.

        The request's tracker starts with ``num_saved_tokens`` = LMCache's own
        hit, whatever the GPU hit (``vllm_v1_adapter.py`` 193, 1521-1524, 1657),
        and the save masks only the chunk-aligned part of it (326, 1174-1191):
        chunks the GPU had are copied out again when LMCache lacks them. Nothing
        is saved when no new full chunk lies beyond that hit (331-338). Chunks
        read from a tier behind the CPU are first written back to the CPU tier
        (``storage_manager.py`` 486-514). The store itself is
        ``ChunkStore.store_reserving``; the tiers behind get the chunks it
        allocated and skip those they hold (``storage_manager.py`` 411-431).

        Returns the tokens each tier newly holds per document, and the tokens
        copied out of the GPU (what the store cost applies to).
        """
        stores = self.offload
        stored: list[dict[int, int]] = [{} for _ in stores]
        cpu = stores[0]
        chunk = self.units.chunk
        if ext.promoted:
            stored[0], _ = cpu.store_reserving(_chunk_items(req, ext.promoted, chunk), evicted[0])
        own = ext.own_hit
        if own and req.prompt_tokens < (own // chunk + 1) * chunk:
            return stored, 0  # no new full chunk beyond LMCache's hit (adapter 331-338)
        items = _chunk_items(req, range(own // chunk, len(req.chunk_keys)), chunk)
        if not items:
            return stored, 0
        added, allocated = cpu.store_reserving(items, evicted[0])
        _merge(stored[0], added)
        for t in range(1, len(stores)):
            stored[t] = stores[t].put_many(allocated, evicted[t])
        return stored, sum(c[TOKENS] for _, c in allocated)

    def _write_through(
        self, req: Request, hit_end: int, ext: _External, evicted: list[list[StoredChunk]]
    ) -> tuple[list[dict[int, int]], int]:
        """Rule 3: chunks holding computed tokens go to every offload tier; chunks loaded from behind the CPU are
        promoted to it.

        Returns the tokens each tier newly holds per document, and the tokens
        written through from computed KV (what the store cost applies to).
        """
        stores = self.offload
        stored: list[dict[int, int]] = [{} for _ in stores]
        chunk, keys, doc, shared, tail = self.units.chunk, req.chunk_keys, req.doc, req.shared_chunks, req.last_chunk_tokens
        last = len(keys) - 1
        # The first chunk that ends after the hit holds computed tokens, and so do all after it.
        computed: list[tuple[int, StoredChunk]] = []
        for i in range(hit_end // chunk, len(keys)):
            tokens = tail if i == last else chunk
            if i * chunk + tokens > hit_end:
                computed.append((keys[i], (doc if i >= shared else -1, i, tokens)))
        cpu = stores[0]
        # Promoted chunks precede the computed ones in the prompt, so they go in first (LRU order).
        if ext.promoted:
            stored[0] = cpu.put_many(_chunk_items(req, ext.promoted, chunk), evicted[0])
        written_by_doc = cpu.put_many(computed, evicted[0])
        _merge(stored[0], written_by_doc)
        for t in range(1, len(stores)):
            stored[t] = stores[t].put_many(computed, evicted[t])
        return stored, sum(written_by_doc.values())

    def _evicted(self, req: Request, gpu: Evictions, offload: list[list[StoredChunk]]) -> list[dict[str, Any]]:
        if not gpu and not any(offload):
            return []
        by_tier: list[tuple[str, ChunkEvictions]] = []
        for store, chunks in zip(self.offload, offload):
            by_doc: ChunkEvictions = {}
            for c_doc, c_index, c_tokens in chunks:
                seen = by_doc.setdefault(c_doc, [0, c_index, c_index])
                seen[0] += c_tokens
                seen[1] = min(seen[1], c_index)
                seen[2] = max(seen[2], c_index)
            by_tier.append((store.name, by_doc))
        return evicted_entries(self.units, req.prompt_tokens, req.shared_blocks, req.shared_chunks, gpu, by_tier)

    def _events(
        self,
        req: Request,
        rec: RequestRecord,
        ext: _External,
        stored_gpu: dict[int, int],
        stored: list[dict[int, int]],
    ) -> list[Event]:
        run, seq, block = self.run, req.seq, self.units.block
        events = self.lookup_events(req, rec, ext)
        for doc, amount in stored_gpu.items():
            events.append(Store(run, seq, GPU, doc, amount * block))
        for store, by_doc in zip(self.offload, stored):
            for doc, amount in by_doc.items():
                events.append(Store(run, seq, store.name, doc, amount))
        events.extend(self.occupancy(seq))
        events.append(ttft_event(run, rec))
        return events

    def lookup_events(self, req: Request, rec: RequestRecord, ext: _External) -> list[Event]:
        """A request's arrival, each tier's lookup, what its allocations evicted and what it loaded (the stepped
        stream sends these too, at the step of its first token)."""
        run, seq = self.run, req.seq
        events: list[Event] = [
            RequestStarted(run, seq, req.pass_, req.order, req.doc, req.prompt_tokens),
            Lookup(run, seq, GPU, req.prompt_tokens, rec.gpu_hit_tokens),
        ]
        if ext.consulted:
            # Each tier is asked about what the tiers before it did not serve.
            query = ext.query_tokens
            for store, hit in zip(self.offload, ext.tokens):
                events.append(Lookup(run, seq, store.name, query, hit))
                query -= hit
        for e in rec.evicted:
            events.append(Evict(run, seq, e["tier"], e["doc"], e["tokens"], e["start"], e["end"], e["part"]))
        for store, tokens, keys in zip(self.offload, ext.tokens, ext.keys):
            if tokens:
                events.append(Load(run, seq, store.name, req.doc, tokens, len(keys)))
        return events

    def occupancy(self, seq: int) -> list[Occupancy]:
        block = self.units.block
        gpu = self.gpu
        out = [
            Occupancy(
                self.run, seq, GPU, gpu.cached_blocks * block, gpu.capacity_blocks * block,
                {str(d): b * block for d, b in gpu.doc_blocks.items() if b},
            )
        ]
        for store in self.offload:
            out.append(
                Occupancy(
                    self.run, seq, store.name, store.used_tokens, store.capacity_tokens,
                    {str(d): t for d, t in store.doc_tokens.items() if t},
                )
            )
        return out

    # -- a whole run -------------------------------------------------------

    def events(self, requests: list[Request], docs: int = 0, doc_tokens: int = 0) -> Iterator[Event]:
        """Every event of the run, with a ``pass`` event after each pass and ``done`` at the end."""
        self.plan(requests)
        yield self.start_event(len(requests), docs, doc_tokens)
        start = len(self.records)
        for i, req in enumerate(requests):
            checkpoint()
            _, events = self.process(req)
            yield from events
            if i + 1 == len(requests) or requests[i + 1].pass_ != req.pass_:
                mine = [r for r in self.records[start:] if r.pass_ == req.pass_]
                yield PassDone(self.run, pass_summaries(mine)[0])
        yield RunDone(self.run, len(requests), run_totals(self.records[start:]))

    def run_all(self, requests: list[Request]) -> list[RequestRecord]:
        self.plan(requests)
        for req in requests:
            checkpoint()
            self.process(req, emit=False)
        return self.records


def cost_ms(costs: CostModel, specs: list[OffloadTier], computed: int, tokens: list[int], written: int) -> float:
    """The cost model over computed, loaded (per tier, in ``specs`` order) and stored tokens; a tier with its own load
    cost adds it, the others use their kind's constant."""
    if not tokens:
        return costs.ttft_ms(computed, 0, 0, written)
    cpu = disk = 0
    extra = 0.0
    for spec, t in zip(specs, tokens):
        if not t:
            continue
        if spec.load_ms_per_token is not None:
            extra += spec.load_ms_per_token * t
        elif spec.kind == "cpu":
            cpu += t
        else:
            disk += t
    ttft = costs.ttft_ms(computed, cpu, disk, written)
    return ttft + extra if extra else ttft


def native_external(req: Request, gpu_hit: int, hit: int, keys: list[int]) -> _External:
    """What vLLM's native connector serves of ``req``: ``hit`` tokens beyond the GPU hit from the offload blocks
    ``keys``; a whole-prompt hit loads all but the last token, which vLLM recomputes."""
    n = req.prompt_tokens
    aligned = min(gpu_hit + hit, n - 1) if hit else 0
    ext = _External(consulted=True, query_tokens=n - gpu_hit, aligned=aligned, own_hit=hit, tokens=[0])
    if aligned > gpu_hit:
        ext.tokens[0] = aligned - gpu_hit
        ext.keys = [keys]
    return ext


def _merge(into: dict[int, int], more: dict[int, int]) -> None:
    for owner, tokens in more.items():
        into[owner] = into.get(owner, 0) + tokens


@dataclass(slots=True)
class _External:
    """What the offload tiers serve of one request: per tier (in the engine's order) the tokens and chunk keys loaded."""

    consulted: bool = False
    query_tokens: int = 0
    aligned: int = 0
    own_hit: int = 0  # lmcache: its own hit over the whole prompt; vllm-native: the connector's hit beyond the GPU's
    tokens: list[int] = field(default_factory=list)
    keys: list[list[int]] = field(default_factory=list)
    promoted: list[int] = field(default_factory=list)  # chunk indexes read from a tier behind the CPU
