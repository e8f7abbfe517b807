"""``kvscope explain``'s result: per run, per pass (or trace window), misses by cause, the infinite-cache bound and
the capacities that would have hit, with every request's attribution."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from sim.blocks.request import Request
from sim.engine.loop import Engine, RequestRecord
from sim.explain.capacity import DEFAULT_MAX_RUNS, fill_needs
from sim.explain.observer import attach, key_slots
from sim.explain.summary import needs, totals


def explain_run(
    engine: Engine,
    requests: Sequence[Request],
    groups: Sequence[tuple[dict[str, Any], Sequence[int]]] | None = None,
    max_runs: int = DEFAULT_MAX_RUNS,
    seqs: set[int] | None = None,
) -> dict[str, Any]:
    """Attribute a fresh ``engine``'s run of ``requests`` and search the capacities (bounded by ``max_runs``).

    ``groups`` are (label, record indexes) to total apart, e.g. trace windows;
    by default the passes. ``seqs`` limits the capacity search to those requests.
    """
    attach(engine, slots=key_slots(requests))
    records = engine.run_all(list(requests))
    work = fill_needs(engine.spec, requests, records, engine.costs, max_runs, seqs)
    if groups is None:
        groups = _passes(records)
    return {
        "name": engine.run,
        "tiers": [asdict(t) for t in engine.tier_infos()],
        "groups": [{**label, **_group([records[i] for i in idx])} for label, idx in groups],
        "totals": _group(records),
        "capacity_search": work,
        "requests": [r.to_dict() for r in records],
    }


def _passes(records: Sequence[RequestRecord]) -> list[tuple[dict[str, Any], list[int]]]:
    by_pass: dict[int, list[int]] = {}
    for i, r in enumerate(records):
        by_pass.setdefault(r.pass_, []).append(i)
    return [({"pass": p, "order": records[idx[0]].order}, idx) for p, idx in sorted(by_pass.items())]


def _group(records: Sequence[RequestRecord]) -> dict[str, Any]:
    return {
        "requests": len(records),
        "prompt_tokens": sum(r.prompt_tokens for r in records),
        "computed_tokens": sum(r.computed_tokens for r in records),
        **totals(records),
        "needs": needs(records),
    }


def time_windows(stamps: Sequence[float], windows: int) -> list[tuple[dict[str, Any], list[int]]]:
    """Record indexes grouped into ``windows`` equal spans of time (empty ones left out), as trace windows."""
    t0, t1 = min(stamps), max(stamps)
    width = (t1 - t0) / windows or 1.0
    grouped: list[list[int]] = [[] for _ in range(windows)]
    for i, ts in enumerate(stamps):
        grouped[min(int((ts - t0) / width), windows - 1)].append(i)
    return [
        ({"window": w + 1, "start_ms": t0 + w * width, "end_ms": t0 + (w + 1) * width}, idx)
        for w, idx in enumerate(grouped)
        if idx
    ]
