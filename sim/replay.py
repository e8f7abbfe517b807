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

from dataclasses import dataclass
from typing import Any

from sim.costs import CostModel, default_costs
from sim.engine import Engine, RequestRecord, TierSpec
from sim.events import CPU, GPU
from sim.result import run_totals
from sim.trace import Trace
from sim.workload import SHARED_DOC, Request, Units

MAX_TIMELINE_BUCKETS = 1000
MAX_GPU_BLOCKS = 1_000_000  # the pool keeps per-block arrays: bounded memory
MAX_CPU_BLOCKS = 1_000_000_000
MAX_CHUNK_BLOCKS = 1024


class ReplayError(ValueError):
    """Tiers that cannot replay a trace; ``field`` names the setting at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class ReplayTiers:
    """The tiers a trace is replayed through, in blocks of the trace's block size."""

    gpu_blocks: int
    cpu_blocks: int | None = None
    chunk_blocks: int = 1

    def spec(self, block_tokens: int) -> TierSpec:
        return TierSpec(
            units=Units(block_tokens, block_tokens * self.chunk_blocks),
            gpu_tokens=(self.gpu_blocks + 1) * block_tokens,  # + vLLM's null block
            cpu_tokens=self.cpu_blocks * block_tokens if self.cpu_blocks else None,
            reserve_null_block=True,
        )

    @property
    def run(self) -> str:
        return "gpu+cpu" if self.cpu_blocks else "gpu"


def trace_requests(trace: Trace, chunk_blocks: int = 1) -> list[Request]:
    """The trace's requests as the engine takes them: one pass, no documents."""
    block = trace.block_tokens
    out: list[Request] = []
    for seq, r in enumerate(trace.requests):
        n = r.input_tokens
        keys = r.hash_ids[: n // block]  # a partial last block is never cached
        out.append(
            Request(
                seq=seq,
                pass_=1,
                order="trace",
                doc=SHARED_DOC,
                prompt_tokens=n,
                block_keys=keys,
                alloc_blocks=len(r.hash_ids),
                max_hit_blocks=(n - 1) // block,
                chunk_keys=keys[chunk_blocks - 1 :: chunk_blocks],
                last_chunk_tokens=block * chunk_blocks,
            )
        )
    return out


def check_tiers(trace: Trace, tiers: ReplayTiers) -> None:
    """Refuse tiers that cannot serve the trace, before any request is replayed."""
    if not 1 <= tiers.chunk_blocks <= MAX_CHUNK_BLOCKS:
        raise ReplayError("chunk_blocks", f"must be from 1 to {MAX_CHUNK_BLOCKS:,} blocks, got {tiers.chunk_blocks}")
    if tiers.gpu_blocks > MAX_GPU_BLOCKS:
        raise ReplayError("gpu_blocks", f"must be at most {MAX_GPU_BLOCKS:,} blocks, got {tiers.gpu_blocks:,}")
    longest = max(len(r.hash_ids) for r in trace.requests)
    if tiers.gpu_blocks < longest:
        raise ReplayError(
            "gpu_blocks",
            f"must hold the trace's longest prompt: at least {longest:,} blocks of {trace.block_tokens} tokens, "
            f"got {tiers.gpu_blocks:,}",
        )
    if tiers.cpu_blocks is not None and not tiers.chunk_blocks <= tiers.cpu_blocks <= MAX_CPU_BLOCKS:
        raise ReplayError(
            "cpu_blocks",
            f"must be from one chunk ({tiers.chunk_blocks} blocks) to {MAX_CPU_BLOCKS:,} blocks, got {tiers.cpu_blocks:,}",
        )


def replay_engine(trace: Trace, tiers: ReplayTiers, costs: CostModel | None = None) -> Engine:
    check_tiers(trace, tiers)
    return Engine(tiers.run, tiers.spec(trace.block_tokens), costs or default_costs())


def replay(trace: Trace, tiers: ReplayTiers, costs: CostModel | None = None, timeline_buckets: int = 50) -> dict[str, Any]:
    """The whole replay as ``kvscope replay --json`` prints it: per-request records, per-tier totals, a timeline."""
    engine = replay_engine(trace, tiers, costs)
    records = engine.run_all(trace_requests(trace, tiers.chunk_blocks))
    requests = []
    for rec, src in zip(records, trace.requests):
        row = rec.to_dict()
        row["timestamp_ms"] = src.timestamp_ms
        requests.append(row)
    return {
        "trace": trace.summary(),
        "run": engine.run,
        "tiers": tier_hits(trace, records, tiers),
        "requests": requests,
        "totals": run_totals(records),
        "timeline": timeline(trace, records, tiers, timeline_buckets),
    }


def block_counts(trace: Trace, records: list[RequestRecord]) -> list[tuple[int, int, int, int]]:
    """Per request, in blocks: (GPU lookups, GPU hits, CPU lookups, CPU hits)."""
    block = trace.block_tokens
    out = []
    for rec, src in zip(records, trace.requests):
        full = src.input_tokens // block
        gpu = rec.gpu_hit_tokens // block
        out.append((full, gpu, full - gpu, -(-rec.cpu_hit_tokens // block)))
    return out


def _tier_rows(counts: list[tuple[int, int, int, int]], tiers: ReplayTiers) -> list[dict[str, Any]]:
    totals = [sum(c[i] for c in counts) for i in range(4)]
    names = [GPU, CPU] if tiers.cpu_blocks else [GPU]
    rows = []
    for i, name in enumerate(names):
        lookup, hit = totals[2 * i], totals[2 * i + 1]
        rows.append({"name": name, "lookup_blocks": lookup, "hit_blocks": hit, "hit_ratio": hit / lookup if lookup else 0.0})
    return rows


def tier_hits(trace: Trace, records: list[RequestRecord], tiers: ReplayTiers) -> list[dict[str, Any]]:
    """Per tier: blocks looked up, blocks hit, and their ratio, over the whole replay."""
    rows = _tier_rows(block_counts(trace, records), tiers)
    capacity = {GPU: tiers.gpu_blocks, CPU: tiers.cpu_blocks}
    for row in rows:
        row["capacity_blocks"] = capacity[row["name"]]
    return rows


def timeline(trace: Trace, records: list[RequestRecord], tiers: ReplayTiers, buckets: int = 50) -> list[dict[str, Any]]:
    """Per-tier hit ratio over time: the trace's time span cut into ``buckets`` equal windows.

    A request belongs to the window its timestamp falls in (the last window
    includes its end); empty windows are left out.
    """
    buckets = max(1, min(buckets, MAX_TIMELINE_BUCKETS))
    stamps = [r.timestamp_ms for r in trace.requests]
    t0, t1 = min(stamps), max(stamps)
    width = (t1 - t0) / buckets or 1.0
    grouped: list[list[tuple[int, int, int, int]]] = [[] for _ in range(buckets)]
    for ts, counts in zip(stamps, block_counts(trace, records)):
        grouped[min(int((ts - t0) / width), buckets - 1)].append(counts)
    return [
        {
            "start_ms": t0 + b * width,
            "end_ms": t0 + (b + 1) * width,
            "requests": len(group),
            "tiers": _tier_rows(group, tiers),
        }
        for b, group in enumerate(grouped)
        if group
    ]
