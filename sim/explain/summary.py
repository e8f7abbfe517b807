"""Summaries of attributed records: misses by cause, the infinite-cache bound, and the capacities that would have hit.

``totals`` adds to a pass or run summary (the JSON result's ``passes`` and
``totals``): ``gpu_miss`` and ``computed`` summed by cause, and the bound,
i.e. the tokens a stack of unbounded tiers would have served under the same
rules (``infinite_hit_tokens``) beside those served (``served_tokens``).
``needs`` gives the distribution of ``needed_tokens`` per tier.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from sim.explain.causes import ordered


class Attributed(Protocol):
    pass_: int
    prompt_tokens: int
    computed_tokens: int
    gpu_miss: dict[str, int] | None
    computed: dict[str, int] | None
    evicted_misses: list[dict[str, Any]] | None
    infinite_hit_tokens: int | None


def _sum_maps(maps: Iterable[dict[str, int] | None]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in maps:
        for cause, tokens in (m or {}).items():
            out[cause] = out.get(cause, 0) + tokens
    return ordered(out)


def totals(records: Sequence[Attributed]) -> dict[str, Any]:
    """Misses by cause and the infinite-cache bound over ``records`` (empty if they are not attributed)."""
    column_totals = getattr(records, "totals", None)
    if column_totals is not None:
        return column_totals()  # a compiled replay's columns (sim.explain.columns) sum themselves
    if not records or records[0].gpu_miss is None:
        return {}
    prompt = sum(r.prompt_tokens for r in records)
    served = prompt - sum(r.computed_tokens for r in records)
    bound = sum(r.infinite_hit_tokens or 0 for r in records)
    return {
        "gpu_miss": _sum_maps(r.gpu_miss for r in records),
        "computed": _sum_maps(r.computed for r in records),
        "served_tokens": served,
        "infinite_hit_tokens": bound,
        "hit_ratio": round(served / prompt, 4) if prompt else 0.0,
        "infinite_hit_ratio": round(bound / prompt, 4) if prompt else 0.0,
    }


def add_totals(summaries: list[dict[str, Any]], records: Sequence[Attributed]) -> list[dict[str, Any]]:
    """Each pass summary (``sim.engine.result.pass_summaries``) with its pass's ``totals`` added."""
    for summary in summaries:
        summary.update(totals([r for r in records if r.pass_ == summary["pass"]]))
    return summaries


def needs(records: Sequence[Attributed]) -> dict[str, dict[str, Any]]:
    """Per tier: how many requests lost tokens to its evictions, and the capacities that would have hit.

    ``needed_tokens`` lists the distinct answers with how many requests each;
    ``all_hit_tokens`` is the largest answer: with that capacity every such
    request would have kept all its evicted tokens (None while any answer is
    missing: unreachable, or beyond the work bound).
    """
    out: dict[str, dict[str, Any]] = {}
    for rec in records:
        for entry in rec.evicted_misses or ():
            tier = out.setdefault(
                entry["tier"], {"requests": 0, "evicted_tokens": 0, "first_hit_tokens": {}, "needed_tokens": {}, "unknown": 0}
            )
            tier["requests"] += 1
            tier["evicted_tokens"] += entry["tokens"]
            for key in ("first_hit_tokens", "needed_tokens"):
                value = entry.get(key)
                if value is not None:
                    tier[key][value] = tier[key].get(value, 0) + 1
            if entry.get("needed_tokens") is None:
                tier["unknown"] += 1
    for tier in out.values():
        for key in ("first_hit_tokens", "needed_tokens"):
            tier[key] = [{"tokens": t, "requests": n} for t, n in sorted(tier[key].items())]
        known = tier["needed_tokens"]
        tier["all_hit_tokens"] = known[-1]["tokens"] if known and not tier["unknown"] else None
    return out
