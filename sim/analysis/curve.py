"""Plain-LRU hit-ratio curves of block streams: a trace's flattened blocks, or a scenario's requests' blocks.

The curve is a model, not the vLLM pool. It feeds every block reference in
order to a plain LRU of ``C`` blocks and counts each block that is found,
whereas the GPU tier (``sim.blocks.pool``) only hits a prompt's cached *prefix*, never
hits the last token's block, holds a running request's blocks in use, and
frees a finished prompt's blocks tail first (so a prompt's head outlives its
tail; in a plain LRU, the head, touched first, goes first). The curve is what
libCacheSim simulates on the same stream, and where a capacity lies on it
says how much reuse a trace holds at that size; ``sim.simulation.replay`` gives the
pool's own figures at one size.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

from sim.analysis.stack_distance import StackProfile, curve_capacities, stack_profile
from sim.traces.reader import Trace

if TYPE_CHECKING:
    from sim.workloads.scenario import Scenario

MAX_CURVE_POINTS = 10_000


def trace_stream(trace: Trace) -> array:
    """Each request's ``hash_ids`` as listed, request after request (partial tail blocks included)."""
    return trace.block_stream()


def scenario_stream(scenario: Scenario) -> list[int]:
    """The full GPU blocks of every request of a scenario, in request order."""
    from sim.workloads.requests import build_requests

    stream: list[int] = []
    for req in build_requests(scenario):
        stream.extend(req.block_keys)
    return stream


def curve_points(profile: StackProfile, points: int = 100, capacities: list[int] | None = None) -> list[dict[str, Any]]:
    """``{"capacity_blocks", "hit_ratio", "hit_blocks"}`` per capacity, as ``kvscope curve --json`` prints them."""
    if not 1 <= points <= MAX_CURVE_POINTS:
        raise ValueError(f"points must be from 1 to {MAX_CURVE_POINTS:,}, got {points}")
    chosen = capacities if capacities is not None else curve_capacities(profile.distinct, points)
    return [
        {"capacity_blocks": c, "hit_ratio": profile.hit_ratio(c), "hit_blocks": profile.hits(c)}
        for c in chosen
    ]


def lru_curve(stream: list[int] | array, points: int = 100, capacities: list[int] | None = None) -> dict[str, Any]:
    """The stream's plain-LRU curve with the figures that frame it."""
    profile = stack_profile(stream)
    return {
        "references": profile.references,
        "distinct_blocks": profile.distinct,
        "max_hit_ratio": profile.hit_ratio(profile.distinct),
        "points": curve_points(profile, points, capacities),
    }
