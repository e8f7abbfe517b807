"""Calibration: fit the cost model's constants by least squares to a table of measured p50 and mean TTFT.

A table cell is one (configuration, pass) with its measured p50 and mean. The
scenario is simulated once with the tiers alone, which gives every request's
token counts; a cell's mean is then linear in the constants, and so is its
p50 once the ordering of its requests is known, so the fit alternates between
ordering requests by predicted TTFT and solving the linear problem. Rows are
weighted by 1/measured so that a 48 ms cell counts as much as a 576 ms one.

Anchors are single measured facts given as extra rows, such as the brief's
"computing 4,864 tokens takes about 560 ms, loading them from CPU 8-9 ms";
they keep constants that the table alone cannot separate (a fixed overhead
against a small load cost) physically meaningful.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sim.costs import COEFFICIENTS, DISK_TO_CPU_LOAD_RATIO, CostModel
from sim.engine import RequestRecord
from sim.lstsq import nnls
from sim.measurements import CONFIG_ALIASES
from sim.scenario import Scenario
from sim.simulation import engines
from sim.workload import build_requests

FITTED = ("overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "store_ms_per_token")
_ZERO = CostModel(**{name: 0.0 for name in COEFFICIENTS})


@dataclass(frozen=True, slots=True)
class Cell:
    config: str
    pass_: int
    order: str
    p50_ms: float
    mean_ms: float


@dataclass(frozen=True, slots=True)
class Anchor:
    """A known cost: ``computed``, ``cpu`` and ``stored`` tokens cost ``ms`` (no fixed overhead)."""

    ms: float
    computed: int = 0
    cpu: int = 0
    stored: int = 0

    def row(self) -> list[float]:
        return [0.0, float(self.computed), float(self.cpu), float(self.stored)]


# The brief: a second-pass request loaded 4,864 tokens (19 chunks) from CPU in
# 8-9 ms; computing the same amount takes about 560 ms.
SEED_ANCHORS = (Anchor(560.0, computed=4864), Anchor(8.5, cpu=4864))


@dataclass(frozen=True)
class Calibration:
    costs: CostModel
    cells: list[dict[str, Any]]
    r2: float

    @property
    def max_error(self) -> float:
        return max(max(abs(c["p50_error"]), abs(c["mean_error"])) for c in self.cells)


def read_table(path: Path | None = None) -> list[Cell]:
    """A table with columns ``config, pass, order, p50_ms, mean_ms`` (the seed table by default)."""
    if path is None:
        text = resources.files("sim").joinpath("data/seed_table.csv").read_text()
    else:
        text = Path(path).read_text()
    cells = []
    for line, row in enumerate(csv.DictReader(text.splitlines()), start=2):
        try:
            config = row["config"].strip().lower()
            cells.append(
                Cell(CONFIG_ALIASES.get(config, config), int(row["pass"]), row["order"], float(row["p50_ms"]), float(row["mean_ms"]))
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"line {line}: expected config, pass, order, p50_ms, mean_ms ({exc})") from None
    return cells


def _features(r: RequestRecord) -> list[float]:
    return [1.0, float(r.computed_tokens), float(r.cpu_hit_tokens), float(r.stored_tokens)]


def fit(scenario: Scenario, cells: list[Cell], anchors: tuple[Anchor, ...] = ()) -> Calibration:
    """Fit overhead, prefill, CPU load and store costs to the cells; the disk cost follows the CPU's."""
    requests = build_requests(scenario)
    records: dict[str, list[RequestRecord]] = {}
    for engine in engines(scenario.model_copy(update={"costs": _ZERO})):
        records[engine.run] = engine.run_all(requests)
    groups = []
    for cell in cells:
        if cell.config not in records:
            raise ValueError(f"table names configuration {cell.config!r}; the scenario runs {', '.join(records)}")
        rs = [r for r in records[cell.config] if r.pass_ == cell.pass_]
        if not rs:
            raise ValueError(f"table names pass {cell.pass_}; the scenario has {len(scenario.passes)}")
        groups.append((cell, [_features(r) for r in rs]))

    coef = [0.0, 1.0, 0.0, 0.0]  # first ordering: by computed tokens
    for _ in range(10):
        rows, targets = [], []
        for cell, feats in groups:
            ordered = sorted(feats, key=lambda f: sum(c * v for c, v in zip(coef, f)))
            k = len(ordered)
            mid = [ordered[(k - 1) // 2], ordered[k // 2]]
            p50_row = [(a + b) / 2 for a, b in zip(*mid)]
            mean_row = [sum(col) / k for col in zip(*feats)]
            for row, y in ((p50_row, cell.p50_ms), (mean_row, cell.mean_ms)):
                rows.append([v / y for v in row])
                targets.append(1.0)
        for anchor in anchors:
            rows.append([v / anchor.ms for v in anchor.row()])
            targets.append(1.0)
        new = nnls(rows, targets)
        if new == coef:
            break
        coef = new

    values = dict(zip(FITTED, coef))
    values["load_disk_ms_per_token"] = values["load_cpu_ms_per_token"] * DISK_TO_CPU_LOAD_RATIO
    costs = CostModel(**values, source="least-squares fit")
    return Calibration(costs, *_report(scenario.model_copy(update={"costs": costs}), cells))


def _report(scenario: Scenario, cells: list[Cell]) -> tuple[list[dict[str, Any]], float]:
    from sim.simulation import simulate

    result = simulate(scenario)
    passes = {(run["name"], p["pass"]): p for run in result["runs"] for p in run["passes"]}
    out, observed, predicted = [], [], []
    for c in cells:
        p = passes[(c.config, c.pass_)]
        out.append(
            {
                "config": c.config,
                "pass": c.pass_,
                "order": c.order,
                "p50_ms": c.p50_ms,
                "p50_pred_ms": p["p50_ms"],
                "p50_error": round(p["p50_ms"] / c.p50_ms - 1, 4),
                "mean_ms": c.mean_ms,
                "mean_pred_ms": p["mean_ms"],
                "mean_error": round(p["mean_ms"] / c.mean_ms - 1, 4),
            }
        )
        observed += [c.p50_ms, c.mean_ms]
        predicted += [p["p50_ms"], p["mean_ms"]]
    avg = sum(observed) / len(observed)
    ss_res = sum((o - p) ** 2 for o, p in zip(observed, predicted))
    ss_tot = sum((o - avg) ** 2 for o in observed)
    return out, 1 - ss_res / ss_tot if ss_tot else 1.0


def seed_scenario() -> Scenario:
    from sim.presets import preset_fields

    return Scenario(**preset_fields("seed-lab"))


def fit_seed_table() -> Calibration:
    """The default calibration: the seed-lab scenario fitted to the shipped seed table and the brief's anchors."""
    return fit(seed_scenario(), read_table(), SEED_ANCHORS)
