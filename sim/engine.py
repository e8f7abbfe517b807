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

from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from sim.chunk_store import CPU_BACKENDS, ChunkPolicy, ChunkStore, CpuBackend, StoredChunk
from sim.costs import CostModel, default_costs
from sim.events import (
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
from sim.gpu import Evictions, FreeOrder, GpuBlockPool
from sim.policies import Future, GpuPolicy
from sim.result import pass_summaries, run_totals
from sim.workload import Request, Units


@dataclass(frozen=True, slots=True)
class TierSpec:
    """The shape of a run's tiers: unit sizes and capacities in tokens (CPU and disk optional)."""

    units: Units
    gpu_tokens: int
    cpu_tokens: int | None = None
    disk_tokens: int | None = None
    free_order: FreeOrder = "vllm"
    reserve_null_block: bool = True
    cpu_policy: ChunkPolicy = "lru"
    disk_policy: ChunkPolicy = "lru"
    gpu_policy: GpuPolicy = "lru"
    cpu_backend: CpuBackend = "lmcache"


# A request's misses by cause (sim.explain): gpu_miss, computed, evicted detail, infinite-cache hit.
Explanation = tuple[dict[str, int], dict[str, int], list[dict[str, Any]], int]


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request: where its prompt tokens came from and its TTFT."""

    seq: int
    pass_: int
    order: str
    doc: int
    prompt_tokens: int
    gpu_hit_tokens: int
    cpu_hit_tokens: int
    disk_hit_tokens: int
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


def _source(gpu: int, cpu: int, disk: int, computed: int) -> str:
    """Where most of the prompt came from; ties go to the earlier tier."""
    best, name = gpu, "gpu"
    for tokens, tier in ((cpu, "cpu"), (disk, "disk"), (computed, "computed")):
        if tokens > best:
            best, name = tokens, tier
    return name


def _chunk_items(req: Request, indexes: Iterable[int], chunk: int) -> list[tuple[int, StoredChunk]]:
    """The request's chunks at ``indexes`` as a tier stores them: key, owner (-1 for the shared prefix), index, tokens."""
    keys, doc, shared, tail = req.chunk_keys, req.doc, req.shared_chunks, req.last_chunk_tokens
    last = len(keys) - 1
    return [(keys[i], (doc if i >= shared else -1, i, tail if i == last else chunk)) for i in indexes]


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
    """One run: a GPU block pool, optional CPU and disk chunk stores, and a cost model."""

    def __init__(self, run: str, tiers: TierSpec, costs: CostModel | None = None) -> None:
        self.run = run
        self.spec = tiers
        self.units = tiers.units
        self.costs = costs or default_costs()
        self.gpu = GpuBlockPool(
            tiers.gpu_tokens // tiers.units.block, tiers.units.block, tiers.free_order, tiers.reserve_null_block,
            tiers.gpu_policy,
        )
        self.cpu = ChunkStore(CPU, tiers.cpu_tokens, tiers.units.chunk, tiers.cpu_policy) if tiers.cpu_tokens else None
        self.disk = (
            ChunkStore(DISK, tiers.disk_tokens, tiers.units.chunk, tiers.disk_policy)
            if tiers.disk_tokens and self.cpu
            else None
        )
        if tiers.cpu_backend not in CPU_BACKENDS:
            raise ValueError(f"unknown CPU backend {tiers.cpu_backend!r}; known: {', '.join(CPU_BACKENDS)}")
        self.lmcache = tiers.cpu_backend == "lmcache"
        self.records: list[RequestRecord] = []
        self.future: Future | None = None  # set by plan() for a policy that looks ahead (Belady)
        # Sees each request at lookup time, before anything is evicted for it (sim.explain).
        self.observer: Callable[[Request, int, int], Explanation] | None = None

    def plan(self, requests: list[Request]) -> None:
        """Give a look-ahead policy the whole request list; the other policies need nothing."""
        plan = getattr(self.gpu.free_queue, "plan", None)
        if plan is not None:
            self.future = plan(requests)

    def tier_infos(self) -> list[TierInfo]:
        """The run's tiers in lookup order, as the ``run`` event and the JSON result list them."""
        infos = [TierInfo(GPU, self.units.block, self.gpu.capacity_blocks * self.units.block, self.gpu.policy)]
        for store in (self.cpu, self.disk):
            if store is not None:
                infos.append(TierInfo(store.name, store.chunk_size, store.capacity_tokens, store.policy))
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

        ext = self._lookup_lmcache(req, gpu_hit) if self.lmcache else self._lookup_external(req, gpu_hit)
        hit_end = max(gpu_hit, ext.aligned)
        computed = n - hit_end
        explained = self.observer(req, gpu_hit, hit_end) if self.observer is not None else None  # at lookup time

        evictions: Evictions = {}
        new_blocks = gpu.allocate(req.alloc_blocks - len(hit_blocks), evictions)
        blocks = hit_blocks + new_blocks
        stored_gpu = gpu.cache_blocks(blocks, req.block_keys, len(hit_blocks), req.doc, req.shared_blocks)
        gpu.free(blocks, len(req.block_keys))  # cache_blocks hashed exactly the full blocks

        cpu_evicted: list[StoredChunk] = []
        disk_evicted: list[StoredChunk] = []
        if self.lmcache:
            stored_cpu, stored_disk, written = self._store_lmcache(req, ext, cpu_evicted, disk_evicted)
        else:
            stored_cpu, stored_disk, written = self._write_through(req, hit_end, ext, cpu_evicted, disk_evicted)

        ttft = round(self.costs.ttft_ms(computed, ext.cpu_tokens, ext.disk_tokens, written), 3)
        source = _source(gpu_hit, ext.cpu_tokens, ext.disk_tokens, computed)
        evicted = self._evicted(req, evictions, cpu_evicted, disk_evicted)
        record = RequestRecord(
            req.seq, req.pass_, req.order, req.doc, n, gpu_hit, ext.cpu_tokens, ext.disk_tokens, computed,
            written, ttft, source, evicted,
        )
        if explained is not None:
            record.gpu_miss, record.computed, record.evicted_misses, record.infinite_hit_tokens = explained
        self.records.append(record)
        if not emit:
            return record, []
        return record, self._events(req, record, ext, stored_gpu, stored_cpu, stored_disk)

    def _lookup_external(self, req: Request, gpu_hit: int) -> _External:
        """Rule 2: the contiguous chunk prefix held by CPU or disk, and what of it lies beyond the GPU hit."""
        cpu, disk = self.cpu, self.disk
        chunk = self.units.chunk
        keys = req.chunk_keys
        covered = (len(keys) - 1) * chunk + req.last_chunk_tokens if keys else 0
        if cpu is None or covered <= gpu_hit:
            return _External()
        cpu_chunks = cpu.chunks
        in_disk: list[bool] = []
        if disk is None:
            found = 0
            for key in keys:
                if key not in cpu_chunks:
                    break
                found += 1
        else:
            disk_chunks = disk.chunks
            for key in keys:
                if key in cpu_chunks:
                    in_disk.append(False)
                elif key in disk_chunks:
                    in_disk.append(True)
                else:
                    break
            found = len(in_disk)
        aligned = covered if found == len(keys) else found * chunk
        aligned = min(aligned, req.prompt_tokens - 1)  # vLLM recomputes the last token
        ext = _External(consulted=True, query_tokens=req.prompt_tokens - gpu_hit, aligned=aligned)
        if aligned <= gpu_hit:
            return ext
        first, end = gpu_hit // chunk, -(-aligned // chunk)  # the chunks holding [gpu_hit, aligned)
        if True not in in_disk:
            ext.cpu_tokens = aligned - gpu_hit
            ext.cpu_keys = keys[first:end]
        else:
            for i in range(first, end):
                tokens = min((i + 1) * chunk, aligned) - max(i * chunk, gpu_hit)
                if in_disk[i]:
                    ext.disk_tokens += tokens
                    ext.disk_keys.append(keys[i])
                    ext.disk_indexes.append(i)
                else:
                    ext.cpu_tokens += tokens
                    ext.cpu_keys.append(keys[i])
        cpu.touch(ext.cpu_keys)
        if disk is not None:
            disk.touch(ext.disk_keys)
        return ext

    def _lookup_lmcache(self, req: Request, gpu_hit: int) -> _External:
        """LMCache's lookup: the CPU's prefix of the prompt's chunks, then the disk's of the rest; all of it refreshed.

        vLLM asks the connector with the GPU hit known (``vllm_v1_adapter.py``
        1360-1431), but LMCache looks up the whole prompt: every chunk it holds
        up to the first miss is pinned and then refreshed in the policy, last
        chunk first, GPU-covered ones included (``cache_engine.py`` 1244-1276,
        ``local_cpu_backend.py`` 127-142). ``storage_manager.py`` 972-1003 asks
        the CPU for a prefix, then the disk for a prefix of what remains. Only
        the tokens beyond the GPU hit are loaded (``need_to_allocate``, adapter
        1451-1455), and never the prompt's last token.
        """
        cpu, disk = self.cpu, self.disk
        if cpu is None:
            return _External()
        chunk = self.units.chunk
        keys = req.chunk_keys
        n = req.prompt_tokens
        in_cpu = cpu.prefix(keys)
        in_disk = disk.prefix(keys, in_cpu) if disk is not None and in_cpu < len(keys) else 0
        found = in_cpu + in_disk
        cpu.touch_reversed(keys[:in_cpu])
        if in_disk:
            assert disk is not None
            disk.touch_reversed(keys[in_cpu:found])
        own = (len(keys) - 1) * chunk + req.last_chunk_tokens if keys and found == len(keys) else found * chunk
        aligned = min(own, n - 1)  # vLLM recomputes the last token
        ext = _External(consulted=True, query_tokens=n - gpu_hit, aligned=aligned, own_hit=own)
        if aligned <= gpu_hit:
            return ext
        first, end = gpu_hit // chunk, -(-aligned // chunk)  # the chunks holding [gpu_hit, aligned)
        cpu_end = min(end, in_cpu)
        if first < cpu_end:
            ext.cpu_tokens = min(cpu_end * chunk, aligned) - max(first * chunk, gpu_hit)
            ext.cpu_keys = keys[first:cpu_end]
        disk_first = max(first, in_cpu)
        if disk_first < end:
            ext.disk_tokens = aligned - max(disk_first * chunk, gpu_hit)
            ext.disk_keys = keys[disk_first:end]
            ext.disk_indexes = list(range(disk_first, end))
        return ext

    def _store_lmcache(
        self, req: Request, ext: _External, cpu_evicted: list[StoredChunk], disk_evicted: list[StoredChunk]
    ) -> tuple[dict[int, int], dict[int, int], int]:
        """LMCache's save: every chunk from its own hit on, GPU-covered or not; reserve first, skip held keys after.

        The request's tracker starts with ``num_saved_tokens`` = LMCache's own
        hit, whatever the GPU hit (``vllm_v1_adapter.py`` 193, 1521-1524, 1657),
        and the save masks only the chunk-aligned part of it (326, 1174-1191):
        chunks the GPU had are copied out again when LMCache lacks them. Nothing
        is saved when no new full chunk lies beyond that hit (331-338). Chunks
        read from disk are first written back to the CPU tier
        (``storage_manager.py`` 486-514). The store itself is
        ``ChunkStore.store_reserving``; the disk gets the same chunks and skips
        those it holds (``storage_manager.py`` 411-431).
        """
        cpu, disk = self.cpu, self.disk
        stored_cpu: dict[int, int] = {}
        stored_disk: dict[int, int] = {}
        if cpu is None:
            return stored_cpu, stored_disk, 0
        chunk = self.units.chunk
        if ext.disk_indexes:
            stored_cpu, _ = cpu.store_reserving(_chunk_items(req, ext.disk_indexes, chunk), cpu_evicted)
        own = ext.own_hit
        if own and req.prompt_tokens < (own // chunk + 1) * chunk:
            return stored_cpu, stored_disk, 0  # no new full chunk beyond LMCache's hit (adapter 331-338)
        items = _chunk_items(req, range(own // chunk, len(req.chunk_keys)), chunk)
        if not items:
            return stored_cpu, stored_disk, 0
        added, copied = cpu.store_reserving(items, cpu_evicted)
        for owner, tokens in added.items():
            stored_cpu[owner] = stored_cpu.get(owner, 0) + tokens
        if disk is not None:
            stored_disk = disk.put_many(items, disk_evicted)
        return stored_cpu, stored_disk, copied

    def _write_through(
        self, req: Request, hit_end: int, ext: _External, cpu_evicted: list[StoredChunk], disk_evicted: list[StoredChunk]
    ) -> tuple[dict[int, int], dict[int, int], int]:
        """Rule 3: chunks holding computed tokens go to CPU and disk; disk hits are promoted to CPU.

        Returns the tokens each tier newly holds per document, and the tokens
        written through from computed KV (what the store cost applies to).
        """
        cpu, disk = self.cpu, self.disk
        stored_cpu: dict[int, int] = {}
        stored_disk: dict[int, int] = {}
        if cpu is None:
            return stored_cpu, stored_disk, 0
        chunk, keys, doc, shared, tail = self.units.chunk, req.chunk_keys, req.doc, req.shared_chunks, req.last_chunk_tokens
        last = len(keys) - 1
        # The first chunk that ends after the hit holds computed tokens, and so do all after it.
        computed: list[tuple[int, StoredChunk]] = []
        for i in range(hit_end // chunk, len(keys)):
            tokens = tail if i == last else chunk
            if i * chunk + tokens > hit_end:
                computed.append((keys[i], (doc if i >= shared else -1, i, tokens)))
        # Promoted chunks precede the computed ones in the prompt, so they go in first (LRU order).
        if ext.disk_indexes:
            stored_cpu = cpu.put_many(_chunk_items(req, ext.disk_indexes, chunk), cpu_evicted)
        written_by_doc = cpu.put_many(computed, cpu_evicted)
        for owner, tokens in written_by_doc.items():
            stored_cpu[owner] = stored_cpu.get(owner, 0) + tokens
        stored_disk = disk.put_many(computed, disk_evicted) if disk is not None else {}
        return stored_cpu, stored_disk, sum(written_by_doc.values())

    def _evicted(
        self, req: Request, gpu: Evictions, cpu: list[StoredChunk], disk: list[StoredChunk]
    ) -> list[dict[str, Any]]:
        if not (gpu or cpu or disk):
            return []
        offload: list[tuple[str, ChunkEvictions]] = []
        for tier, chunks in ((CPU, cpu), (DISK, disk)):
            by_doc: ChunkEvictions = {}
            for c_doc, c_index, c_tokens in chunks:
                seen = by_doc.setdefault(c_doc, [0, c_index, c_index])
                seen[0] += c_tokens
                seen[1] = min(seen[1], c_index)
                seen[2] = max(seen[2], c_index)
            offload.append((tier, by_doc))
        return evicted_entries(self.units, req.prompt_tokens, req.shared_blocks, req.shared_chunks, gpu, offload)

    def _events(
        self,
        req: Request,
        rec: RequestRecord,
        ext: _External,
        stored_gpu: dict[int, int],
        stored_cpu: dict[int, int],
        stored_disk: dict[int, int],
    ) -> list[Event]:
        run, seq, block = self.run, req.seq, self.units.block
        events: list[Event] = [
            RequestStarted(run, seq, req.pass_, req.order, req.doc, req.prompt_tokens),
            Lookup(run, seq, GPU, req.prompt_tokens, rec.gpu_hit_tokens),
        ]
        if ext.consulted:
            events.append(Lookup(run, seq, CPU, ext.query_tokens, rec.cpu_hit_tokens))
            if self.disk is not None:
                events.append(Lookup(run, seq, DISK, ext.query_tokens - rec.cpu_hit_tokens, rec.disk_hit_tokens))
        for e in rec.evicted:
            events.append(Evict(run, seq, e["tier"], e["doc"], e["tokens"], e["start"], e["end"], e["part"]))
        if ext.cpu_tokens:
            events.append(Load(run, seq, CPU, req.doc, ext.cpu_tokens, len(ext.cpu_keys)))
        if ext.disk_tokens:
            events.append(Load(run, seq, DISK, req.doc, ext.disk_tokens, len(ext.disk_keys)))
        for tier, stored, unit in ((GPU, stored_gpu, block), (CPU, stored_cpu, 1), (DISK, stored_disk, 1)):
            for doc, amount in stored.items():
                events.append(Store(run, seq, tier, doc, amount * unit))
        events.extend(self.occupancy(seq))
        events.append(
            Ttft(
                run, seq, req.pass_, req.doc, rec.ttft_ms, rec.source, rec.gpu_hit_tokens, rec.cpu_hit_tokens,
                rec.disk_hit_tokens, rec.computed_tokens, rec.stored_tokens,
            )
        )
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
        for store in (self.cpu, self.disk):
            if store is not None:
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
            _, events = self.process(req)
            yield from events
            if i + 1 == len(requests) or requests[i + 1].pass_ != req.pass_:
                mine = [r for r in self.records[start:] if r.pass_ == req.pass_]
                yield PassDone(self.run, pass_summaries(mine)[0])
        yield RunDone(self.run, len(requests), run_totals(self.records[start:]))

    def run_all(self, requests: list[Request]) -> list[RequestRecord]:
        self.plan(requests)
        for req in requests:
            self.process(req, emit=False)
        return self.records


@dataclass(slots=True)
class _External:
    consulted: bool = False
    query_tokens: int = 0
    aligned: int = 0
    own_hit: int = 0  # lmcache: LMCache's own hit over the whole prompt, before vLLM's last-token rule
    cpu_tokens: int = 0
    disk_tokens: int = 0
    cpu_keys: list[int] = field(default_factory=list)
    disk_keys: list[int] = field(default_factory=list)
    disk_indexes: list[int] = field(default_factory=list)
