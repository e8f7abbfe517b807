"""Summaries of records: per-pass statistics, run totals, run-to-run comparison (the JSON result's shape)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from sim.numeric import stats


class RecordLike(Protocol):
    pass_: int
    order: str
    ttft_ms: float
    gpu_hit_tokens: int | None
    cpu_hit_tokens: int | None
    disk_hit_tokens: int | None
    computed_tokens: int | None


def tier_hits(records: Iterable[RecordLike]) -> dict[str, int]:
    """Tokens loaded from each offload tier, by name, in the order the tiers first served a hit.

    Records without a per-tier map (live measurements, measurement files) count their CPU hits, and their
    ``disk_hit_tokens`` (every tier behind the CPU, flattened) as ``disk``.
    """
    out: dict[str, int] = {}
    for r in records:
        hits = getattr(r, "tier_hits", None)
        if hits is None:
            hits = {name: t for name, t in (("cpu", r.cpu_hit_tokens), ("disk", r.disk_hit_tokens)) if t}
        for name, tokens in hits.items():
            out[name] = out.get(name, 0) + tokens
    return out


def pass_summaries(records: Iterable[RecordLike]) -> list[dict[str, Any]]:
    """One summary per pass, in pass order: the JSON result's ``passes``."""
    by_pass: dict[int, list[RecordLike]] = {}
    for r in records:
        by_pass.setdefault(r.pass_, []).append(r)
    out = []
    for number in sorted(by_pass):
        rs = by_pass[number]
        ttfts = [r.ttft_ms for r in rs]
        out.append(
            {
                "pass": number,
                "order": rs[0].order,
                "requests": len(rs),
                **stats.summary(ttfts),
                "total_ms": round(sum(ttfts), 3),
                "gpu_hit_tokens": sum(r.gpu_hit_tokens or 0 for r in rs),
                "cpu_hit_tokens": sum(r.cpu_hit_tokens or 0 for r in rs),
                "disk_hit_tokens": sum(r.disk_hit_tokens or 0 for r in rs),
                "computed_tokens": sum(r.computed_tokens or 0 for r in rs),
                "tier_hits": tier_hits(rs),
            }
        )
    return out


def run_totals(records: Sequence[RecordLike]) -> dict[str, Any]:
    return totals_of(
        [r.ttft_ms for r in records],
        sum(r.gpu_hit_tokens or 0 for r in records),
        sum(r.cpu_hit_tokens or 0 for r in records),
        sum(r.disk_hit_tokens or 0 for r in records),
        sum(r.computed_tokens or 0 for r in records),
        tier_hits(records),
    )


def totals_of(
    ttfts: Sequence[float], gpu: int, cpu: int, disk: int, computed: int, hits: dict[str, int] | None = None
) -> dict[str, Any]:
    """A run's totals from its TTFTs and token sums (``run_totals`` for records; a replay's columns directly).

    ``hits``: tokens per offload tier by name; without it, a CPU tier's alone.
    """
    return {
        "requests": len(ttfts),
        **stats.summary(ttfts),
        "total_ms": round(sum(ttfts), 3),
        "gpu_hit_tokens": gpu,
        "cpu_hit_tokens": cpu,
        "disk_hit_tokens": disk,
        "computed_tokens": computed,
        "tier_hits": hits if hits is not None else ({"cpu": cpu} if cpu else {}),
    }


def comparison(runs: Sequence[dict[str, Any]], baseline: str = "gpu") -> list[dict[str, Any]]:
    """Speed-ups of every other run over ``baseline``, per pass: the JSON result's ``comparison``."""
    base = next((r for r in runs if r["name"] == baseline), None)
    if base is None:
        return []
    base_passes = {p["pass"]: p for p in base["passes"]}
    out = []
    for run in runs:
        if run["name"] == baseline:
            continue
        for p in run["passes"]:
            b = base_passes.get(p["pass"])
            if b is None:
                continue
            out.append(
                {
                    "pass": p["pass"],
                    "order": p["order"],
                    "baseline": baseline,
                    "candidate": run["name"],
                    # exact, as the summaries: rounded once where written (sim.numeric.figures)
                    "p50_speedup": stats.speedup(b["p50_ms"], p["p50_ms"]),
                    "mean_speedup": stats.speedup(b["mean_ms"], p["mean_ms"]),
                }
            )
    return out
