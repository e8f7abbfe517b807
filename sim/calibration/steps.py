"""Calibration of the step-time constants (``sim.sched.step_costs``) from runs with several requests in flight.

Under a closed loop (``--concurrency N``) the schedule does not depend on time:
requests arrive as others finish, and the scheduler admits them by tokens and
blocks, never by the clock. Each request's TTFT (queueing included) is then a
sum of step durations, and each step's duration is linear in the constants,
so the TTFT is linear in them too. The fit runs the stepped engine once per
constant with that constant at 1 and the others at 0 (and once with all at 0,
for what a storage tier's own load cost adds), which gives every request's
coefficient of each constant from the engine's own arithmetic; then
non-negative least squares over the measured requests, weighted by 1/TTFT as
the sequential fit is, and the same report of which constants the data
determine. An open loop's arrivals (a rate, timestamps) meet a schedule that
depends on the step times being fitted: not linear, refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.calibration.calibrate import Calibration, matched, request_fit_figures
from sim.calibration.measurements import Measurement, MeasurementError
from sim.costs.model import COEFFICIENTS, DISK_TO_CPU_LOAD_RATIO, CostModel, default_costs
from sim.engine.loop import Engine
from sim.numeric.identify import analyse
from sim.numeric.lstsq import nnls
from sim.sched.serving import Serving
from sim.sched.step_costs import StepCosts
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario

# The request part (a CostModel's, as the sequential fit names them), then what only overlapping requests show.
STEP_COEFFICIENTS = (
    "overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "store_ms_per_token", "load_disk_ms_per_token",
    "decode_ms_per_seq", "context_ms_per_token",
)
_PER_STEP = ("decode_ms_per_seq", "context_ms_per_token")


def _unit(name: str | None) -> StepCosts:
    """Step costs with ``name`` at 1 and every other constant at 0 (None: all at 0). Constructed: such a model prices
    nothing a user would run, only one constant's share of each step."""
    tokens = CostModel.model_construct(**{c: 1.0 if c == name else 0.0 for c in COEFFICIENTS}, source="unit")
    return StepCosts(tokens, *(1.0 if c == name else 0.0 for c in _PER_STEP))


@dataclass(frozen=True, slots=True)
class StepSample:
    """One measured request: its coefficient of each constant (``STEP_COEFFICIENTS`` order), what no constant
    prices (a storage tier's own load cost), and its TTFT."""

    config: str
    pass_: int
    order: str
    features: tuple[float, ...]
    offset_ms: float
    ttft_ms: float


def step_samples(rows: list[Measurement], scenario: Scenario, serving: Serving) -> list[StepSample]:
    """Each row's features, from the scenario served as ``serving`` says (a closed loop only)."""
    if serving.rate is not None:
        raise MeasurementError("rate: an open loop's schedule depends on the step times being fitted; give the run's "
                               "--concurrency (a closed loop) instead")
    requests = build_requests(scenario)
    config = serving.scheduler_config()
    per_run: dict[str, dict[int, tuple[Any, list[float]]]] = {}
    for run in scenario.run_names:
        ttfts: list[dict[int, float]] = []
        flights: dict[int, Any] = {}
        for name in (None, *STEP_COEFFICIENTS):
            engine = Engine(run, tier_spec(scenario, run), default_costs())  # its own costs unused: _unit's price the steps
            served = SteppedEngine(engine, config, costs=_unit(name)).run(requests, serving.arrivals())
            ttfts.append({f.seq: f.ttft_ms for f in served.flights})
            flights = {f.seq: f.req for f in served.flights}
        zero = ttfts[0]
        per_run[run] = {seq: (req, [zero[seq], *(t[seq] - zero[seq] for t in ttfts[1:])]) for seq, req in flights.items()}
    records = {run: {seq: req for seq, (req, _) in by_seq.items()} for run, by_seq in per_run.items()}
    out = []
    for r, req in matched(rows, records):
        offset, *features = per_run[r.config][req.seq][1]
        out.append(StepSample(r.config, r.pass_, r.order, tuple(features), offset, r.ttft_ms))
    return out


@dataclass(frozen=True)
class StepCalibration(Calibration):
    """A fit of the step constants: ``costs`` holds the request part, ``step_costs`` every constant."""

    step_costs: dict[str, float] = field(default_factory=dict)

    def profile(self) -> dict[str, Any]:
        return {**super().profile(), "step_costs": dict(self.step_costs)}


def fit_steps(samples: list[StepSample], method: str) -> StepCalibration:
    """Non-negative least squares of the step constants over the measured requests (weighted by 1/TTFT)."""
    if not samples:
        raise ValueError("no requests to fit")
    present = [j for j in range(len(STEP_COEFFICIENTS)) if any(s.features[j] for s in samples)]
    weights = [1.0 / max(s.ttft_ms, 1e-3) for s in samples]
    rows = [[s.features[j] * w for j in present] for s, w in zip(samples, weights)]
    targets = [(s.ttft_ms - s.offset_ms) * w for s, w in zip(samples, weights)]
    solution = nnls(rows, targets)
    names = [STEP_COEFFICIENTS[j] for j in present]
    identified = analyse(rows, targets, solution, names, shapes=len({tuple(s.features[j] for j in present) for s in samples}))
    values = {name: 0.0 for name in STEP_COEFFICIENTS} | dict(zip(names, solution))
    undetermined = tuple(n for n in STEP_COEFFICIENTS if n not in names)
    if "load_disk_ms_per_token" in undetermined:  # as the sequential fit: a disk costs the CPU's load, scaled
        values["load_disk_ms_per_token"] = values["load_cpu_ms_per_token"] * DISK_TO_CPU_LOAD_RATIO
    request_part = {n: values[n] for n in COEFFICIENTS}
    costs = CostModel(**request_part, source=f"least-squares fit ({method})")
    predicted = [s.offset_ms + sum(values[n] * x for n, x in zip(STEP_COEFFICIENTS, s.features)) for s in samples]
    errors, r2 = request_fit_figures(samples, predicted)
    return StepCalibration(costs, errors, r2, method, len(samples), undetermined, identified, step_costs=values)


def calibrate_steps(rows: list[Measurement], scenario: Scenario, serving: Serving) -> StepCalibration:
    """Fit the step constants to a per-request file of a run served as ``serving`` says."""
    samples = step_samples(rows, scenario, serving)
    return fit_steps(samples, f"per request, steps re-simulated at {serving.concurrency or 1} in flight")


def calibrate_steps_file(path: Path, scenario: Scenario, serving: Serving) -> StepCalibration:
    """A per-request file (CSV, JSONL, or a long_doc_qa run) of a run served as ``serving`` says."""
    from sim.calibration.calibrate import repeat_of
    from sim.calibration.readers import read_measurements

    return calibrate_steps(read_measurements(path, repeat=repeat_of(scenario)).rows, scenario, serving)
