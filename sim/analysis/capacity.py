"""Capacity curves: hit tokens and predicted TTFT per pass against a tier's capacity, with the thresholds marked.

The GPU curve runs the GPU tier alone at block and at document granularity;
the CPU curve runs ``gpu+cpu`` at the scenario's GPU size, from no CPU tier at
all (capacity 0) upwards. Every point is a direct simulation of the scenario
at that capacity (the workload is built once per curve). The thresholds are
``sim.analysis.sweep``'s: where pass 2 of a same-order re-read first hits the GPU, and
where it starts / stops being served from CPU; they and the scenario's own
capacity are added to the grid, so that the curve passes through them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sim.analysis.sweep import cpu_thresholds, gpu_threshold, sweep_cost
from sim.blocks.kv import gib_for
from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.engine.result import pass_summaries
from sim.sched.limit import StepLimit
from sim.sched.records import served_records
from sim.sched.serving import Serving
from sim.sched.simulate import step_work
from sim.simulation.run import scenario_summary, tier_spec
from sim.bounds.budget import Cost
from sim.workloads.estimate import curve_cost, simulation_cost
from sim.workloads.requests import build_requests, units
from sim.workloads.scenario import Scenario

MAX_POINTS = 400
MAX_CURVE_BLOCKS = 100_000_000  # points x prompt blocks per simulation: bounds one curve's work
CSV_COLUMNS = (
    "tier", "granularity", "capacity_tokens", "capacity_gib", "pass", "order", "gpu_hit_tokens", "cpu_hit_tokens",
    "p50_ms", "mean_ms", "marks",
)


class CurveTooLarge(ValueError):
    """The curve would simulate more than the bound allows; the message names the limit."""


@dataclass(frozen=True)
class Mark:
    """A capacity worth pointing at on a curve."""

    key: str  # current, gpu_block, gpu_doc, cpu_any_hit, cpu_all_served, no_cpu
    label: str
    capacity_tokens: int


def _grid(lo: int, hi: int, points: int, step: int, marks: list[Mark]) -> list[int]:
    """``points`` capacities from ``lo`` to ``hi``, evenly spaced and rounded to ``step`` tokens, plus the marks within."""
    raw = [lo] if points == 1 or hi <= lo else [lo + (hi - lo) * i / (points - 1) for i in range(points)]
    grid = {max(lo, round(x / step) * step) for x in raw}
    return sorted(grid | {m.capacity_tokens for m in marks if lo <= m.capacity_tokens <= hi})


def _marks(*candidates: tuple[str, str, int | None]) -> list[Mark]:
    """The marks whose capacity is known (a threshold beyond the searched range is None)."""
    return [Mark(key, label, tokens) for key, label, tokens in candidates if tokens is not None]


@dataclass(frozen=True, slots=True)
class Served:
    """How every run of a curve is served: ``serving`` None, one request at a time; ``limit`` the work budget."""

    serving: Serving | None = None
    limit: StepLimit | None = None

    @property
    def stepped(self) -> bool:
        return self.serving is not None and self.serving.stepped


def _points(
    base: Scenario, run: str, field: str, capacities: list[int], marks: list[Mark], load: Served
) -> list[dict[str, Any]]:
    """The run simulated at each capacity of one tier (``field`` of its ``TierSpec``); one workload for all."""
    requests = build_requests(base)
    spec = tier_spec(base, run)
    costs = base.costs or default_costs()
    return [
        _point(Engine(run, replace(spec, **{field: c}), costs), requests, c, base.bytes_per_token, marks, load)
        for c in capacities
    ]


def _curve(tier: str, run: str, scenario: Scenario, marks: list[Mark], curves: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tier": tier, "run": run, "scenario": scenario_summary(scenario), "marks": [m.__dict__ for m in marks], "curves": curves}


def _check_work(scenario: Scenario, points: int, runs: int) -> None:
    work = points * runs * scenario.total_blocks
    if points > MAX_POINTS:
        raise CurveTooLarge(f"at most {MAX_POINTS} points, got {points}")
    if work > MAX_CURVE_BLOCKS:
        raise CurveTooLarge(
            f"{points} points x {runs} run(s) x {scenario.total_blocks:,} blocks per simulation is {work:,} blocks; "
            f"the limit is {MAX_CURVE_BLOCKS:,}: use fewer points or a smaller scenario"
        )


def _point(
    engine: Engine, requests: list, capacity_tokens: int, bytes_per_token: int, marks: list[Mark], load: Served
) -> dict[str, Any]:
    records = served_records(engine, requests, load.serving, load.limit)
    return {
        "capacity_tokens": capacity_tokens,
        "capacity_gib": round(gib_for(capacity_tokens, bytes_per_token), 6),
        "marks": [m.key for m in marks if m.capacity_tokens == capacity_tokens],
        "passes": [
            {k: p[k] for k in ("pass", "order", "gpu_hit_tokens", "cpu_hit_tokens", "p50_ms", "mean_ms")}
            for p in pass_summaries(records)
        ],
    }


def gpu_curve(
    scenario: Scenario, points: int = 50, lo_tokens: int | None = None, hi_tokens: int | None = None, load: Served = Served()
) -> dict[str, Any]:
    """The GPU tier alone at ``points`` capacities, at block and at document granularity (block only under load:
    the scheduler serves blocks, whole documents are one request at a time)."""
    _check_work(scenario, points, 1 if load.stepped else 2)
    prompt_blocks = -(-scenario.prompt_tokens // scenario.block_size)
    # Past holding every document's blocks (and a spare prompt's worth), nothing changes.
    everything = (scenario.docs + 1) * prompt_blocks * scenario.block_size + scenario.block_size
    hi = hi_tokens or max(everything, scenario.gpu_tokens)
    marks = _marks(
        ("current", "this scenario's GPU cache", scenario.gpu_tokens),
        ("gpu_block", "same-order re-read first hits (blocks)", gpu_threshold(scenario, "block", load.serving, load.limit)),
        ("gpu_doc", "same-order re-read first hits (whole documents)", gpu_threshold(scenario, "doc", load.serving, load.limit)),
    )
    curves = []
    for granularity in ("block",) if load.stepped else ("block", "doc"):
        # The curve sets the GPU size itself; the scenario's own size may be too small for the other granularity.
        smallest = scenario.model_copy(update={"granularity": granularity}).min_gpu_tokens
        base = scenario.replace(
            granularity=granularity, gpu_tokens=max(scenario.gpu_tokens, smallest),
            cpu_gb=None, cpu_tokens=None, disk_gb=None, disk_tokens=None,
        )
        grid = _grid(max(lo_tokens or 0, base.min_gpu_tokens), hi, points, scenario.block_size, marks)
        curves.append({"granularity": granularity, "points": _points(base, "gpu", "gpu_tokens", grid, marks, load)})
    return _curve("gpu", "gpu", scenario, marks, curves)


def cpu_curve(
    scenario: Scenario, points: int = 50, lo_tokens: int | None = None, hi_tokens: int | None = None, load: Served = Served()
) -> dict[str, Any]:
    """``gpu+cpu`` at ``points`` CPU capacities (and none), with the scenario's GPU tier and granularity."""
    _check_work(scenario, points + 1, 1)
    chunk = units(scenario).chunk
    base = scenario.replace(cpu_gb=None, disk_gb=None, disk_tokens=None, cpu_tokens=chunk)
    current = scenario.cpu_capacity_tokens
    hi = hi_tokens or max((scenario.docs + 1) * -(-scenario.prompt_tokens // chunk) * chunk, current or 0)
    any_hit, all_served = cpu_thresholds(scenario, load.serving, load.limit)
    marks = _marks(
        ("no_cpu", "no CPU tier (GPU alone)", 0),
        ("current", "this scenario's CPU tier", current),
        ("cpu_any_hit", "same-order re-read: first CPU hits", any_hit),
        ("cpu_all_served", "same-order re-read: all served from CPU", all_served),
    )
    grid = _grid(max(lo_tokens or chunk, chunk), hi, points, chunk, marks)
    pts = _points(base, "gpu", "gpu_tokens", [base.gpu_tokens], marks, load)
    pts[0].update(capacity_tokens=0, capacity_gib=0.0, marks=["no_cpu"])  # the GPU alone: no CPU capacity
    pts += _points(base, "gpu+cpu", "cpu_tokens", grid, marks, load)
    return _curve("cpu", "gpu+cpu", scenario, marks, [{"granularity": scenario.granularity, "points": pts}])


def load_curve_cost(scenario: Scenario, tier: str, points: int, load: Served) -> Cost:
    """``curve_cost``, and under load each point's steps (``step_work``, a few marks beside the grid) and the
    thresholds' searches, each of whose probes is a run served step by step too."""
    if load.serving is None or not load.stepped:
        return curve_cost(scenario, tier, points)
    sims = points + 4  # the grid and its marks (current, the thresholds; no_cpu)
    base = simulation_cost(scenario, runs=("gpu" if tier == "gpu" else "gpu+cpu",), records=False)
    return (base + step_work(scenario, load.serving, runs=1)).times(sims) + sweep_cost(scenario, load.serving)


def csv_rows(curve: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (curve, capacity, pass): the long form for a spreadsheet (``CSV_COLUMNS``)."""
    rows = []
    for c in curve["curves"]:
        for point in c["points"]:
            for p in point["passes"]:
                rows.append(
                    {
                        "tier": curve["tier"],
                        "granularity": c["granularity"],
                        "capacity_tokens": point["capacity_tokens"],
                        "capacity_gib": point["capacity_gib"],
                        **{k: p[k] for k in ("pass", "order", "gpu_hit_tokens", "cpu_hit_tokens", "p50_ms", "mean_ms")},
                        "marks": " ".join(point["marks"]),
                    }
                )
    return rows
