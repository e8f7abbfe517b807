"""Trace replay: a read trace's requests through the same engine and tiers as a scenario, with per-tier hit ratios.

Units: one GPU block per trace block (``block_tokens``, 512 for Mooncake), so
a trace's ``hash_ids`` are the GPU block keys. Only full blocks are cached
(a partial last block is allocated but never hit); at most
``(input_length - 1) // block_tokens`` blocks can hit, because vLLM recomputes
the last token. ``gpu_blocks`` counts usable blocks: vLLM's null block comes
on top, so the pool is built from ``gpu_blocks + 1`` blocks, and vLLM would log
``(gpu_blocks + 1) * block_tokens`` tokens. The CPU tier's chunks are
``chunk_tokens`` (a multiple of the block size, by default one block), keyed
by the id of their last block, which identifies the whole prefix.

Per-tier figures count full blocks: the GPU is asked about every full block of
a prompt; the CPU only about the full blocks the GPU missed, and a block counts
as a CPU hit when its KV was loaded from CPU (even if vLLM then recomputes its
last token).
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import IO, Any

from sim.blocks.request import SHARED_DOC, Request, Requests, Units
from sim.bounds import jsontext
from sim.costs.model import CostModel, default_costs
from sim.engine import compiled
from sim.engine.events import CPU, GPU
from sim.engine.loop import Engine, RequestRecord, TierSpec, _source, evicted_entries
from sim.engine.result import totals_of
from sim.explain.columns import ExplainedColumns
from sim.explain.observer import attach, key_slots
from sim.explain.summary import totals as explain_totals
from sim.simulation.replay_rows import request_texts
from sim.tiers.chunk_store import DEFAULT_CPU_BACKEND, CpuBackend
from sim.tiers.offload import OffloadTier
from sim.traces.reader import Trace
from sim.workloads.scenario import StorageTier

MAX_TIMELINE_BUCKETS = 1000
MAX_GPU_BLOCKS = 1_000_000  # the pool keeps per-block arrays: bounded memory
MAX_CPU_BLOCKS = 1_000_000_000
MAX_CHUNK_BLOCKS = 1024
WRITE_BATCH = 1024  # requests' texts joined per write of replay --json


class ReplayError(ValueError):
    """Tiers that cannot replay a trace; ``field`` names the setting at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class ReplayTiers:
    """The tiers a trace is replayed through, in blocks of the trace's block size.

    ``cpu_backend`` is a scenario's: LMCache's rules unless told otherwise.
    ``storage``: tiers behind the CPU, searched in order (sized in tokens;
    they keep the CPU's chunks), replayed by the Python engine.
    """

    gpu_blocks: int
    cpu_blocks: int | None = None
    chunk_blocks: int = 1
    cpu_backend: CpuBackend = DEFAULT_CPU_BACKEND
    storage: tuple[OffloadTier, ...] = ()

    def spec(self, block_tokens: int) -> TierSpec:
        return TierSpec(
            units=Units(block_tokens, block_tokens * self.chunk_blocks),
            gpu_tokens=(self.gpu_blocks + 1) * block_tokens,  # + vLLM's null block
            cpu_tokens=self.cpu_blocks * block_tokens if self.cpu_blocks else None,
            reserve_null_block=True,
            cpu_backend=self.cpu_backend,
            more_tiers=self.storage if self.cpu_blocks else (),
        )

    @property
    def names(self) -> list[str]:
        """The tiers in lookup order: ``gpu``, then ``cpu`` and the tiers behind it."""
        return [GPU, CPU, *(t.name for t in self.storage)] if self.cpu_blocks else [GPU]

    @property
    def run(self) -> str:
        return "+".join(self.names)


def storage_tier(text: str) -> OffloadTier:
    """A tier behind the CPU as a scenario's ``--storage-tier`` reads it (``sim.workloads.scenario.StorageTier``), sized in
    tokens: a trace names no model, so no GiB."""
    try:
        tier = StorageTier.parse(text)
    except ValueError as exc:  # pydantic's ValidationError is one
        raise ReplayError("storage_tiers", f"{text.strip()!r}: {exc}") from None
    if tier.tokens is None:
        raise ReplayError("storage_tiers", f"{text.strip()!r}: give the size in tokens (50000t): a trace has no model to size GiB")
    return OffloadTier(tier.name, "disk", tier.tokens, tier.policy, tier.load_ms_per_token, tier.unit_tokens, tier.admission)


def trace_requests(trace: Trace, chunk_blocks: int = 1) -> Requests:
    """The trace's requests as the engine takes them: one pass, no documents.

    A request's ``output_length`` grows its KV as vLLM's decode does (as a
    scenario's ``output_tokens``, ``sim.workloads.requests``): every generated token but
    the last gets KV, and the full blocks beyond the prompt's are cached (vLLM
    0.33 ``v1/core/kv_cache_manager.py`` 621-625 caches up to
    ``request.num_tokens`` at every step, decode steps included). Their keys
    are negative, one per block, its own: a trace names no ids for them, and no
    later prompt holds them. LMCache saves no decode KV (``save_decode_cache``
    defaults to False, ``lmcache/v1/config.py`` 126-130), so the chunks are the
    prompt's.
    """
    block = trace.block_tokens
    ids, offsets, inputs, outputs = trace.hash_ids, trace.offsets, trace.input_tokens, trace.output_tokens
    out: list[Request] = []
    generated = refs = 0
    top = -1
    for seq in range(len(trace)):
        n = inputs[seq]
        lo = offsets[seq]
        # A partial last block is never cached. The keys as machine integers: a day's trace holds tens of millions,
        # which as a list of Python ints took five times the memory (and each a collector's visit).
        keys = ids[lo : lo + n // block]
        if keys:
            top = max(top, max(keys))
        chunk_keys = keys[chunk_blocks - 1 :: chunk_blocks]
        alloc = offsets[seq + 1] - lo
        if outputs[seq] > 1:
            kv_tokens = n + outputs[seq] - 1
            more = kv_tokens // block - len(keys)
            keys.extend(range(-1 - generated, -1 - generated - more, -1))
            generated += more
            alloc = max(alloc, -(-kv_tokens // block))
        out.append(
            Request(
                seq=seq,
                pass_=1,
                order="trace",
                doc=SHARED_DOC,
                prompt_tokens=n,
                block_keys=keys,
                alloc_blocks=alloc,
                max_hit_blocks=(n - 1) // block,
                chunk_keys=chunk_keys,
                last_chunk_tokens=block * chunk_blocks,
            )
        )
        refs += len(keys) + len(chunk_keys)
    # The trace's ids are from 0 up (sim.traces.reader), the generated blocks' keys from -1 down; chunk keys are prompt keys.
    return Requests(out, (-generated, top, refs) if refs else None)


def kv_block_counts(trace: Trace) -> Iterator[int]:
    """The blocks each request holds at its end: its prompt's ids, or more when decode fills further blocks."""
    block = trace.block_tokens
    for ids, n, generated in zip(trace.block_counts(), trace.input_tokens, trace.output_tokens):
        yield max(ids, -(-(n + generated - 1) // block))


def check_tiers(trace: Trace, tiers: ReplayTiers) -> None:
    """Refuse tiers that cannot serve the trace, before any request is replayed."""
    if not 1 <= tiers.chunk_blocks <= MAX_CHUNK_BLOCKS:
        raise ReplayError("chunk_blocks", f"must be from 1 to {MAX_CHUNK_BLOCKS:,} blocks, got {tiers.chunk_blocks}")
    if tiers.gpu_blocks > MAX_GPU_BLOCKS:
        raise ReplayError("gpu_blocks", f"must be at most {MAX_GPU_BLOCKS:,} blocks, got {tiers.gpu_blocks:,}")
    longest = max(kv_block_counts(trace))
    if tiers.gpu_blocks < longest:
        raise ReplayError(
            "gpu_blocks",
            f"must hold the trace's longest request, its prompt and generated tokens: at least {longest:,} blocks of "
            f"{trace.block_tokens} tokens, got {tiers.gpu_blocks:,}",
        )
    if tiers.cpu_blocks is not None and not tiers.chunk_blocks <= tiers.cpu_blocks <= MAX_CPU_BLOCKS:
        raise ReplayError(
            "cpu_blocks",
            f"must be from one chunk ({tiers.chunk_blocks} blocks) to {MAX_CPU_BLOCKS:,} blocks, got {tiers.cpu_blocks:,}",
        )
    if tiers.storage and not tiers.cpu_blocks:
        raise ReplayError("storage_tiers", "a tier behind the CPU needs a CPU tier (every LMCache store passes through its memory)")
    if tiers.storage and tiers.cpu_backend == "vllm-native":
        raise ReplayError("storage_tiers", "vllm-native models vLLM's CPU offloading alone; tiers behind it need lmcache or brief")
    names = [t.name for t in tiers.storage]
    if len(set(names)) < len(names) or {GPU, CPU} & set(names):
        raise ReplayError("storage_tiers", f"tier names must be unique and neither gpu nor cpu, got {', '.join(names)}")
    chunk = trace.block_tokens * tiers.chunk_blocks
    for t in tiers.storage:
        if t.unit_tokens not in (None, chunk):
            raise ReplayError("storage_tiers", f"tier {t.name}: unit_tokens must be the chunk size ({chunk}), got {t.unit_tokens}")


def replay_engine(trace: Trace, tiers: ReplayTiers, costs: CostModel | None = None) -> Engine:
    check_tiers(trace, tiers)
    return Engine(tiers.run, tiers.spec(trace.block_tokens), costs or default_costs())


class ReplayOutcome:
    """What the replay did to each request, as columns; ``records()`` makes the per-request records from them.

    Made either by the Python engine (``from_records``) or by the compiled
    loop (``from_kernel``); both give the same records. Evictions are kept as
    (amount, first position, last position) per tier: a trace request has one
    owner, so a record's ``evicted`` list has at most one entry per tier.
    """

    COLUMNS = ("gpu_hit", "cpu_hit", "computed", "stored", "gpu_ev_blocks", "gpu_ev_first", "gpu_ev_last",
               "cpu_ev_tokens", "cpu_ev_first", "cpu_ev_last")

    def __init__(self, trace: Trace, tiers: ReplayTiers, costs: CostModel, columns: dict[str, array], engine: str) -> None:
        self.trace = trace
        self.tiers = tiers
        self.costs = costs
        self.run = tiers.run
        self.engine = engine  # "python" or "compiled": which code produced the columns
        self.gpu_hit, self.cpu_hit = columns["gpu_hit"], columns["cpu_hit"]
        self.computed, self.stored = columns["computed"], columns["stored"]
        self.gpu_ev = (columns["gpu_ev_blocks"], columns["gpu_ev_first"], columns["gpu_ev_last"])
        self.cpu_ev = (columns["cpu_ev_tokens"], columns["cpu_ev_first"], columns["cpu_ev_last"])
        self.ttft_ms = array("d", map(self._ttft, self.computed, self.cpu_hit, self.stored))
        # The attributed records, when explained (sim.explain): the Python engine's, or the compiled columns.
        self.explained: Sequence[RequestRecord] | ExplainedColumns | None = None
        self.units = tiers.spec(trace.block_tokens).units
        # With tiers behind the CPU (the Python engine's alone): the engine's records, whose TTFTs count their loads.
        self.behind: list[RequestRecord] | None = None
        self.storage_hit: dict[str, array] = {}

    def _ttft(self, computed: int, cpu: int, stored: int) -> float:
        return round(self.costs.ttft_ms(computed, cpu, 0, stored), 3)  # as Engine.process rounds it

    @classmethod
    def from_records(cls, trace: Trace, tiers: ReplayTiers, costs: CostModel, records: list[RequestRecord]) -> ReplayOutcome:
        units = tiers.spec(trace.block_tokens).units
        cols = {name: array("q") for name in cls.COLUMNS}
        for rec in records:
            row = [rec.gpu_hit_tokens, rec.cpu_hit_tokens, rec.computed_tokens, rec.stored_tokens, 0, 0, 0, 0, 0, 0]
            for e in rec.evicted:
                if e["tier"] == GPU:
                    row[4:7] = [e["tokens"] // units.block, e["start"] // units.block, e["end"] // units.block - 1]
                elif e["tier"] == CPU:
                    row[7:10] = [e["tokens"], e["start"] // units.chunk, e["end"] // units.chunk - 1]
            for name, value in zip(cls.COLUMNS, row):
                cols[name].append(value)
        outcome = cls(trace, tiers, costs, cols, "python")
        if tiers.storage:
            outcome.behind = records
            outcome.storage_hit = {t.name: array("q", (r.tier_hits.get(t.name, 0) for r in records)) for t in tiers.storage}
            outcome.ttft_ms = array("d", (r.ttft_ms for r in records))
        return outcome

    @classmethod
    def from_kernel(cls, trace: Trace, tiers: ReplayTiers, costs: CostModel, table: Any) -> ReplayOutcome:
        cols = {name: array("q", table[:, i].tobytes()) for i, name in enumerate(cls.COLUMNS)}
        return cls(trace, tiers, costs, cols, "compiled")

    def __len__(self) -> int:
        return len(self.gpu_hit)

    def _evicted(self, i: int) -> list[dict[str, Any]]:
        ev_blocks = self.gpu_ev[0][i]
        cpu_tokens = self.cpu_ev[0][i]
        if not (ev_blocks or cpu_tokens):
            return []
        gpu_ev = {SHARED_DOC: [ev_blocks, self.gpu_ev[1][i], self.gpu_ev[2][i]]} if ev_blocks else {}
        cpu_ev = {SHARED_DOC: [cpu_tokens, self.cpu_ev[1][i], self.cpu_ev[2][i]]} if cpu_tokens else {}
        return evicted_entries(self.units, self.trace.input_tokens[i], 0, 0, gpu_ev, [(CPU, cpu_ev)])

    def record(self, i: int) -> RequestRecord:
        """Request ``i``'s record, equal to the one the Python engine makes."""
        if self.behind is not None:
            return self.behind[i]
        n = self.trace.input_tokens[i]
        gpu, cpu, computed, stored = self.gpu_hit[i], self.cpu_hit[i], self.computed[i], self.stored[i]
        hits = {CPU: cpu} if cpu else {}
        rec = RequestRecord(
            i, 1, "trace", SHARED_DOC, n, gpu, hits, computed, stored, self.ttft_ms[i], _source(gpu, hits, computed),
            self._evicted(i),
        )
        if self.explained is not None:
            done = self.explained[i]
            rec.gpu_miss, rec.computed, rec.evicted_misses = done.gpu_miss, done.computed, done.evicted_misses
            rec.infinite_hit_tokens = done.infinite_hit_tokens
        return rec

    def records(self) -> Iterator[RequestRecord]:
        return (self.record(i) for i in range(len(self)))

    def totals(self) -> dict[str, Any]:
        cpu = sum(self.cpu_hit)
        behind = {name: sum(col) for name, col in self.storage_hit.items()}  # empty without tiers behind the CPU
        hits = {name: t for name, t in ((CPU, cpu), *behind.items()) if t} if behind else None
        out = totals_of(self.ttft_ms, sum(self.gpu_hit), cpu, sum(behind.values()), sum(self.computed), hits)
        return {**out, **explain_totals(self.explained)} if self.explained is not None else out

    @property
    def _width(self) -> int:
        """How many counts ``block_counts`` gives a request: a lookup and a hit count per tier (GPU and CPU at least)."""
        return 2 * max(2, len(self.tiers.names))

    def block_counts(self) -> Iterator[tuple[int, ...]]:
        """Per request, in blocks: (GPU lookups, GPU hits, CPU lookups, CPU hits), then each tier behind the CPU's:
        a tier is asked about the full blocks every tier before it missed."""
        block = self.trace.block_tokens
        if self.storage_hit:
            yield from self._counts_behind(block)
            return
        for n, gpu_tokens, cpu_tokens in zip(self.trace.input_tokens, self.gpu_hit, self.cpu_hit):
            full, gpu = n // block, gpu_tokens // block
            yield full, gpu, full - gpu, -(-cpu_tokens // block)

    def _counts_behind(self, block: int) -> Iterator[tuple[int, ...]]:
        offload = [self.cpu_hit, *self.storage_hit.values()]
        for i, (n, gpu_tokens) in enumerate(zip(self.trace.input_tokens, self.gpu_hit)):
            full, gpu = n // block, gpu_tokens // block
            row, left = [full, gpu], full - gpu
            for column in offload:
                hit = -(-column[i] // block)
                row += [left, hit]
                left -= hit
            yield tuple(row)

    def tier_hits(self) -> list[dict[str, Any]]:
        """Per tier: blocks looked up, blocks hit, and their ratio, over the whole replay."""
        rows = _tier_rows(_sums(self.block_counts(), self._width), self.tiers)
        capacity = {GPU: self.tiers.gpu_blocks, CPU: self.tiers.cpu_blocks}
        capacity.update((t.name, t.capacity_tokens // self.trace.block_tokens) for t in self.tiers.storage)
        for row in rows:
            row["capacity_blocks"] = capacity[row["name"]]
        return rows

    def timeline(self, buckets: int = 50) -> list[dict[str, Any]]:
        """Per-tier hit ratio over time: the trace's time span cut into ``buckets`` equal windows.

        A request belongs to the window its timestamp falls in (the last window
        includes its end); empty windows are left out.
        """
        buckets = max(1, min(buckets, MAX_TIMELINE_BUCKETS))
        stamps = self.trace.timestamps_ms
        t0, t1 = min(stamps), max(stamps)
        width = (t1 - t0) / buckets or 1.0
        size = self._width
        sums = [[0] * (1 + size) for _ in range(buckets)]  # requests, then the block counts
        for ts, counts in zip(stamps, self.block_counts()):
            acc = sums[min(int((ts - t0) / width), buckets - 1)]
            acc[0] += 1
            for j in range(size):
                acc[j + 1] += counts[j]
        return [
            {
                "start_ms": t0 + b * width,
                "end_ms": t0 + (b + 1) * width,
                "requests": acc[0],
                "tiers": _tier_rows(acc[1:], self.tiers),
            }
            for b, acc in enumerate(sums)
            if acc[0]
        ]

    def head(self) -> dict[str, Any]:
        """The result's fields before ``requests``."""
        return {"trace": self.trace.summary(), "run": self.run, "tiers": self.tier_hits()}

    def request_rows(self) -> Iterator[dict[str, Any]]:
        stamps = self.trace.timestamps_ms
        for i, rec in enumerate(self.records()):
            row = rec.to_dict()
            row["timestamp_ms"] = stamps[i]
            yield row

    def request_texts(self) -> Iterator[str]:
        """``json.dumps`` of each of ``request_rows``, character for character, made from the columns (sim.simulation.replay_rows)."""
        if self.behind is not None:  # the columns name the GPU and CPU alone
            return (json.dumps(row) for row in self.request_rows())
        return request_texts(self)


def run_replay(
    trace: Trace, tiers: ReplayTiers, costs: CostModel | None = None, explain: bool = False, replays: int = 1,
) -> ReplayOutcome:
    """Replay the trace: compiled when the tiers are ones the kernel reproduces and the trace is large enough.

    ``explain`` gives each request its misses by cause (sim.explain; compiled by ``sim.explain.columns``).
    ``replays``: how many replays of the trace the caller runs in this process (the advisor's candidates), all
    paying numba's start-up once, so that many small replays run compiled as one large one would.
    """
    check_tiers(trace, tiers)
    costs = costs or default_costs()
    spec = tiers.spec(trace.block_tokens)
    if compiled.replays_compiled(spec, trace.total_blocks * replays):
        table, distinct, attribution = compiled.replay_columns(
            trace.hash_ids, trace.offsets, trace.input_tokens, trace.output_tokens, trace.block_tokens,
            tiers.gpu_blocks + 1, tiers.chunk_blocks, spec.cpu_tokens or 0, spec.cpu_backend == "lmcache", explain,
        )
        trace.counted_distinct(distinct)
        outcome = ReplayOutcome.from_kernel(trace, tiers, costs, table)
        if attribution is not None:
            outcome.explained = ExplainedColumns(
                *attribution, trace.input_tokens, outcome.computed, spec.cpu_tokens is not None
            )
        return outcome
    engine = Engine(tiers.run, spec, costs)
    requests = trace_requests(trace, tiers.chunk_blocks)
    if explain:
        attach(engine, slots=key_slots(requests))
    records = engine.run_all(requests)
    outcome = ReplayOutcome.from_records(trace, tiers, costs, records)
    if explain:
        outcome.explained = records
    return outcome


def replay(
    trace: Trace, tiers: ReplayTiers, costs: CostModel | None = None, timeline_buckets: int = 50, explain: bool = True
) -> dict[str, Any]:
    """The whole replay as ``kvscope replay --json`` prints it: per-request records, per-tier totals, a timeline.

    ``explain`` adds each request's misses by cause and the infinite-cache bound to the totals (sim.explain).
    """
    outcome = run_replay(trace, tiers, costs, explain)
    return {
        **outcome.head(),
        "requests": list(outcome.request_rows()),
        "totals": outcome.totals(),
        "timeline": outcome.timeline(timeline_buckets),
    }


def write_replay_json(outcome: ReplayOutcome, out: IO[str], timeline_buckets: int = 50) -> None:
    """``replay``'s JSON written as it is made, one request at a time.

    Beyond the outcome's columns, memory grows with the requests only by the
    sorted copy of their TTFTs that the exact p50 and p90 need.
    """
    head = outcome.head()
    out.write("{\n")
    for key, value in head.items():
        out.write(f" {jsontext.dumps(key)}: {jsontext.dumps(value)},\n")
    out.write(' "requests": [')
    sep, texts = "\n  ", outcome.request_texts()
    while batch := list(islice(texts, WRITE_BATCH)):  # one write per batch: a write per request cost a third more
        out.write(sep + ",\n  ".join(batch))
        sep = ",\n  "
    out.write("\n ],\n")
    out.write(f' "totals": {jsontext.dumps(outcome.totals())},\n')
    out.write(f' "timeline": {jsontext.dumps(outcome.timeline(timeline_buckets))}\n')
    out.write("}\n")


def _sums(counts: Iterator[tuple[int, ...]], width: int) -> list[int]:
    if width != 4:
        totals = [0] * width
        for c in counts:
            for j in range(width):
                totals[j] += c[j]
        return totals
    totals = [0, 0, 0, 0]
    for c in counts:
        totals[0] += c[0]
        totals[1] += c[1]
        totals[2] += c[2]
        totals[3] += c[3]
    return totals


def _tier_rows(totals: list[int], tiers: ReplayTiers) -> list[dict[str, Any]]:
    rows = []
    for i, name in enumerate(tiers.names):
        lookup, hit = totals[2 * i], totals[2 * i + 1]
        rows.append({"name": name, "lookup_blocks": lookup, "hit_blocks": hit, "hit_ratio": hit / lookup if lookup else 0.0})
    return rows
