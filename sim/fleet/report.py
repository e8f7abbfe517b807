"""A fleet run's figures: per request its replica and the tokens its route lost, per replica its hits, load and KV
usage, and over the fleet its hit ratio beside two bounds, TTFT percentiles and load imbalance.

Hit tokens are a prompt's tokens not computed (its GPU hit and what its tiers
loaded), over the prompt tokens: the ratio the bounds give too. The bounds
serve the same requests in order, one at a time: ``pooled`` through one
engine whose every tier is the replicas' summed (a shared tier once), and
``unbounded`` through a cache that never evicts (every full block seen before
hits, up to the last token vLLM recomputes). Load imbalance is the busiest
replica's over the mean (1 is even), by requests and by computed tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sim.blocks.request import Request
from sim.costs.model import CostModel
from sim.engine.loop import Engine, RequestRecord, TierSpec
from sim.engine.result import tier_hits
from sim.fleet.clock import FleetRun, Route
from sim.numeric.stats import DECIMALS
from sim.sched.report import run_summary
from sim.sched.stepped import SteppedRun
from sim.tiers.offload import OffloadTier


def route_fields(route: Route, max_hit_blocks: int, block: int) -> dict[str, Any]:
    """A request's route: the replica chosen, the one whose GPU held the longest prefix of it (the chosen one on a
    tie), and the tokens it could have hit there but not where it went."""
    held = [min(h, max_hit_blocks) for h in route.held_blocks]
    best = max(range(len(held)), key=lambda i: (held[i], i == route.replica, -i))
    return {
        "replica": route.replica,
        "held_tokens": held[route.replica] * block,
        "best_replica": best,
        "best_held_tokens": held[best] * block,
        "lost_tokens": (held[best] - held[route.replica]) * block,
    }


def hit_tokens(records: Sequence[RequestRecord]) -> int:
    return sum(r.prompt_tokens - r.computed_tokens for r in records)


def ratio(part: int, whole: int) -> float:
    return round(part / whole, 6) if whole else 0.0


def replica_rows(run: FleetRun, capacity_blocks: int) -> list[dict[str, Any]]:
    """Per replica: requests routed, prompt, hit and computed tokens (hits per tier), and its KV usage over time."""
    rows = []
    for i, steps in enumerate(run.steps):
        mine = [r for r, route in zip(run.records, run.routes) if route.replica == i]
        span = sum(s.dt_ms for s in steps)
        # The blocks each step's batch held, over the step's duration: the time-weighted mean over the replica's busy
        # time, and the peak. (vLLM's gauge is read after the step, its finished requests' blocks already freed.)
        used = [(s.held_blocks / capacity_blocks, s.dt_ms) for s in steps]
        prompt = sum(r.prompt_tokens for r in mine)
        rows.append({
            "replica": i,
            "requests": len(mine),
            "steps": len(steps),
            "busy_ms": round(span, DECIMALS),
            "prompt_tokens": prompt,
            "hit_tokens": hit_tokens(mine),
            "gpu_hit_tokens": sum(r.gpu_hit_tokens for r in mine),
            "tier_hits": tier_hits(mine),
            "computed_tokens": sum(r.computed_tokens for r in mine),
            "hit_ratio": ratio(hit_tokens(mine), prompt),
            "kv_usage_mean": round(sum(u * dt for u, dt in used) / span, 6) if span > 0 else 0.0,
            "kv_usage_peak": round(max((u for u, _ in used), default=0.0), 6),
        })
    return rows


def imbalance(values: Sequence[int]) -> float:
    """The largest over the mean: 1 when even, the replica count when one replica has it all."""
    mean = sum(values) / len(values) if values else 0
    return round(max(values) / mean, 6) if mean else 1.0


def fleet_summary(run: FleetRun, replicas: list[dict[str, Any]], bounds: dict[str, float]) -> dict[str, Any]:
    """The fleet's figures: TTFT percentiles and throughput as a single server's, hit ratios, imbalance, lost tokens."""
    steps = sorted((s for per in run.steps for s in per), key=lambda s: s.t_ms + s.dt_ms)
    served = run_summary(SteppedRun(run.records, run.flights, steps, run.queue_ms))
    prompt = sum(r.prompt_tokens for r in run.records)
    return {
        **served,
        "prompt_tokens": prompt,
        "hit_tokens": hit_tokens(run.records),
        "hit_ratio": ratio(hit_tokens(run.records), prompt),
        **{f"{name}_hit_ratio": value for name, value in bounds.items()},
        "load_imbalance": imbalance([r["requests"] for r in replicas]),
        "work_imbalance": imbalance([r["computed_tokens"] for r in replicas]),
    }


def pooled_spec(spec: TierSpec, replicas: int, shared: OffloadTier | None) -> TierSpec:
    """One engine's tiers of the replicas' summed sizes: the usable GPU blocks summed (one null block), each offload
    tier times the replicas, a shared tier once."""
    block = spec.units.block
    null = 1 if spec.reserve_null_block else 0
    usable = spec.gpu_tokens // block - null
    times = [replace(t, capacity_tokens=t.capacity_tokens * replicas) for t in spec.more_tiers]
    return replace(
        spec,
        gpu_tokens=(usable * replicas + null) * block,
        cpu_tokens=spec.cpu_tokens * replicas if spec.cpu_tokens else None,
        disk_tokens=spec.disk_tokens * replicas if spec.disk_tokens else None,
        more_tiers=(*times, *([shared] if shared is not None else [])),
    )


def unbounded_hit_tokens(requests: Sequence[Request], block: int, chunk: int | None) -> int:
    """Tokens a cache that never evicts would serve: each prompt's longest run of full blocks seen before, up to
    the last token vLLM recomputes; with an offload tier (``chunk`` its unit) its run of chunks seen before, which
    may load up to that last token (``Engine.lmcache_load``), the partial last block included."""
    seen: set[int] = set()
    seen_chunks: set[int] = set()
    total = 0
    for req in requests:
        keys = req.block_keys[: req.prompt_tokens // block]
        hit = 0
        for key in keys[: req.max_hit_blocks]:
            if key not in seen:
                break
            hit += 1
        tokens = hit * block
        if chunk is not None and req.chunk_keys:
            found = 0
            for key in req.chunk_keys:
                if key not in seen_chunks:
                    break
                found += 1
            whole = found == len(req.chunk_keys)
            own = (found - 1) * chunk + req.last_chunk_tokens if whole else found * chunk
            tokens = max(tokens, min(own, req.prompt_tokens - 1))
            seen_chunks.update(req.chunk_keys)
        total += tokens
        seen.update(keys)
    return total


def bounds(
    requests: Sequence[Request], spec: TierSpec, replicas: int, shared: OffloadTier | None, costs: CostModel | None,
) -> dict[str, float]:
    """The two bounds' hit ratios: ``pooled`` (one cache of the summed size) and ``unbounded``."""
    prompt = sum(r.prompt_tokens for r in requests)
    pooled = Engine("pooled", pooled_spec(spec, replicas, shared), costs).run_all(list(requests))
    return {
        "pooled": ratio(hit_tokens(pooled), prompt),
        "unbounded": ratio(unbounded_hit_tokens(requests, spec.units.block, spec.units.chunk if spec.cpu_tokens else None), prompt),
    }
