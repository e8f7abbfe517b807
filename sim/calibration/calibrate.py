"""Calibration: fit the cost model's constants by least squares to a table of measured p50 and mean TTFT.

Two inputs. A table cell is one (configuration, pass) with its measured p50 and mean. The
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

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.bounds import jsontext, textfile
from sim.bounds.budget import checkpoint
from sim.calibration.measurements import CONFIG_ALIASES, MAX_TTFT_MS, Measurement, MeasurementError, parse_text
from sim.calibration.readers import Repeat, kind_of, read_measurements
from sim.costs.model import COEFFICIENTS, DISK_TO_CPU_LOAD_RATIO, CostModel
from sim.engine.loop import RequestRecord
from sim.numeric import stats
from sim.numeric.identify import Identifiability, analyse
from sim.numeric.lstsq import nnls
from sim.simulation.run import engines
from sim.workloads.requests import build_requests, units
from sim.workloads.scenario import Scenario

FITTED = ("overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "store_ms_per_token")
# Records without times (the fit supplies them): constructed, since a model for real use must cost something.
_ZERO = CostModel.model_construct(**{name: 0.0 for name in COEFFICIENTS}, source="zero")


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
    """A fit: the constants, the per-cell errors, R^2 (over cells, or over requests for a per-request fit)."""

    costs: CostModel
    cells: list[dict[str, Any]]
    r2: float
    method: str = "cells"
    requests: int = 0
    undetermined: tuple[str, ...] = ()  # constants the data says nothing about (left at 0 or derived)
    identifiability: Identifiability | None = None  # what the design determines among the fitted constants

    @property
    def max_error(self) -> float:
        return max(max(abs(c["p50_error"]), abs(c["mean_error"])) for c in self.cells)

    def profile(self) -> dict[str, Any]:
        """The cost profile JSON that ``--costs`` reads: the constants and how well they fit."""
        return {
            "costs": self.costs.model_dump(mode="json"),
            "fit": {
                "method": self.method,
                "requests": self.requests,
                "r2": round(self.r2, 6),
                "max_error": round(self.max_error, 4),
                "undetermined": list(self.undetermined),
                "identifiability": self.identifiability.to_dict() if self.identifiability else None,
                "cells": self.cells,
            },
        }


def load_profile(path: Path) -> CostModel:
    """The constants of a cost profile (``Calibration.profile()``'s JSON, or a bare ``CostModel`` object)."""
    try:
        text = textfile.read_text(path)
    except textfile.FileProblem as exc:
        raise ValueError(f"{path}: {exc}") from None
    return parse_profile(text, str(path))[0]


def parse_profile(text: str, name: str) -> tuple[CostModel, dict[str, Any]]:
    """A profile's constants and its ``fit`` (empty for a bare ``CostModel``); errors name ``name`` and the field."""
    try:
        data = jsontext.loads(text)
    except ValueError as exc:
        raise ValueError(f"{name}: not a cost profile ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{name}: not a cost profile (expected a JSON object)")
    where, values = ("costs.", data["costs"]) if "costs" in data else ("", data)
    if not isinstance(values, dict):
        raise ValueError(f"{name}: not a cost profile (costs: expected a JSON object)")
    try:
        costs = CostModel(**values)
    except ValidationError as exc:
        detail = "; ".join(  # an error of the whole model (two constants together) has no field to name
            ((f"{where}{'.'.join(map(str, e['loc']))}: " if e["loc"] else "") + e["msg"].removeprefix("Value error, ")) for e in exc.errors()
        )
        raise ValueError(f"{name}: not a cost profile ({detail})") from None
    fit = data.get("fit") if "costs" in data else None
    return costs, fit if isinstance(fit, dict) else {}


def read_table(path: Path | None = None) -> list[Cell]:
    """A table with columns ``config, pass, order, p50_ms, mean_ms`` (the seed table by default)."""
    if path is None:
        return parse_table(resources.files("sim").joinpath("data/seed_table.csv").read_text())
    return parse_table(textfile.read_text(path))


def parse_table(text: str) -> list[Cell]:
    """``read_table``'s work on the table's text."""
    cells = []
    for line, row in enumerate(textfile.DictReader(text.splitlines(), error=ValueError), start=2):
        try:
            config = row["config"].strip().lower()
            p50, mean = float(row["p50_ms"]), float(row["mean_ms"])
            cells.append(Cell(CONFIG_ALIASES.get(config, config), int(row["pass"]), row["order"], p50, mean))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"line {line}: expected config, pass, order, p50_ms, mean_ms ({exc})") from None
        for name, value in (("p50_ms", p50), ("mean_ms", mean)):
            if not 0 <= value <= MAX_TTFT_MS:  # also false for NaN
                raise ValueError(f"line {line}: {name} must be from 0 to {MAX_TTFT_MS:,} ms, got {row[name]}")
        checkpoint()
    if not cells:
        raise ValueError("the table has no cells (a header, then one line per config and pass)")
    return cells


def _features(r: RequestRecord) -> list[float]:
    return [1.0, float(r.computed_tokens), float(r.cpu_hit_tokens), float(r.stored_tokens)]


def _tier_records(scenario: Scenario) -> dict[str, list[RequestRecord]]:
    """Every run's records with the tiers alone (no costs): where each request's tokens came from."""
    requests = build_requests(scenario)
    return {engine.run: engine.run_all(requests) for engine in engines(scenario.model_copy(update={"costs": _ZERO}))}


def fit(scenario: Scenario, cells: list[Cell], anchors: tuple[Anchor, ...] = ()) -> Calibration:
    """Fit overhead, prefill, CPU load and store costs to the cells; the disk cost follows the CPU's."""
    records = _tier_records(scenario)
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
    present = [j for j in range(len(FITTED)) if any(r[j] for r in rows)]
    identified = analyse([[r[j] for j in present] for r in rows], targets, [coef[j] for j in present], [FITTED[j] for j in present])

    values = dict(zip(FITTED, coef))
    values["load_disk_ms_per_token"] = values["load_cpu_ms_per_token"] * DISK_TO_CPU_LOAD_RATIO
    costs = CostModel(**values, source="least-squares fit")
    cell_errors, r2 = _report(scenario.model_copy(update={"costs": costs}), cells)
    return Calibration(costs, cell_errors, r2, identifiability=identified)


def _report(scenario: Scenario, cells: list[Cell]) -> tuple[list[dict[str, Any]], float]:
    from sim.simulation.run import simulate

    result = simulate(scenario)
    passes = {(run["name"], p["pass"]): p for run in result["runs"] for p in run["passes"]}
    return _cell_errors(cells, passes)


def _cell_errors(cells: list[Cell], passes: dict[tuple[str, int], dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    """Measured against predicted p50 and mean per cell, and R^2 over those values."""
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
    from sim.workloads.presets import preset_fields

    return Scenario(**preset_fields("seed-lab"))


def fit_seed_table() -> Calibration:
    """The default calibration: the seed-lab scenario fitted to the shipped seed table and the brief's anchors."""
    return fit(seed_scenario(), read_table(), SEED_ANCHORS)


# -- per-request files ------------------------------------------------------
#
# A per-request measurement file says more than a table: every request is a
# row of the linear model ``ttft = overhead + prefill * computed + load_cpu *
# cpu + store * stored (+ load_disk * disk)``. Its token counts come from the
# file's hit columns when every row has them (the simulator's files, live mode
# with /metrics), else from re-simulating the scenario the run used.

SAMPLE_COEFFICIENTS = ("overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "store_ms_per_token", "load_disk_ms_per_token")


@dataclass(frozen=True, slots=True)
class Sample:
    """One measured request: its cost features (in ``SAMPLE_COEFFICIENTS`` order) and its TTFT."""

    config: str
    pass_: int
    order: str
    features: tuple[float, float, float, float, float]
    ttft_ms: float


def _has_cpu(config: str, rows: list[Measurement]) -> bool:
    return "cpu" in config or any((r.cpu_hit_tokens or 0) > 0 for r in rows if r.config == config)


def samples_from_hits(rows: list[Measurement], chunk_tokens: int) -> list[Sample]:
    """Features from the file's own hit columns.

    A file without ``stored_tokens`` (live mode) gets the write-through
    estimated as the engine does it: every full chunk ending past the hit
    prefix, for a configuration with a CPU tier.
    """
    cpu_configs = {c for c in {r.config for r in rows} if _has_cpu(c, rows)}
    out = []
    for r in rows:
        assert r.computed_tokens is not None and r.cpu_hit_tokens is not None
        stored = r.stored_tokens
        if stored is None:
            hit_end = r.prompt_tokens - r.computed_tokens
            full = r.prompt_tokens // chunk_tokens
            stored = max(0, full - hit_end // chunk_tokens) * chunk_tokens if r.config in cpu_configs else 0
        features = (1.0, float(r.computed_tokens), float(r.cpu_hit_tokens), float(stored), float(r.disk_hit_tokens or 0))
        out.append(Sample(r.config, r.pass_, r.order, features, r.ttft_ms))
    return out


def samples_from_scenario(rows: list[Measurement], scenario: Scenario) -> list[Sample]:
    """Features from re-simulating ``scenario``: each row is matched to the simulated request of its run and seq."""
    records = {run: {r.seq: r for r in recs} for run, recs in _tier_records(scenario).items()}
    out = []
    for r, rec in matched(rows, records):
        features = (1.0, float(rec.computed_tokens), float(rec.cpu_hit_tokens), float(rec.stored_tokens), float(rec.disk_hit_tokens))
        out.append(Sample(r.config, r.pass_, r.order, features, r.ttft_ms))
    return out


def matched(rows: list[Measurement], records: dict[str, dict[int, Any]]) -> list[tuple[Measurement, Any]]:
    """Each row with the simulated request (``records``: run -> seq -> a record with ``pass_`` and ``doc``) of its
    configuration and seq; ``MeasurementError`` naming the row when the scenario has no such request."""
    out = []
    for r in rows:
        run = records.get(r.config)
        if run is None:
            raise MeasurementError(
                f"configuration {r.config!r} is not a run of the scenario ({', '.join(records)}); "
                "name configurations gpu, gpu+cpu (or vllm, lmcache)"
            )
        rec = run.get(r.seq)
        if rec is None or (rec.pass_, rec.doc) != (r.pass_, r.doc):
            expected = "no such request" if rec is None else f"doc {rec.doc} in pass {rec.pass_}"
            raise MeasurementError(
                f"{r.config} request seq {r.seq} reads doc {r.doc} in pass {r.pass_}, but the scenario's has "
                f"{expected}: give the scenario the run used (--preset, --docs, --passes, ...)"
            )
        out.append((r, rec))
    return out


def fit_samples(samples: list[Sample], method: str) -> Calibration:
    """Non-negative least squares over requests, weighted by 1/TTFT (relative error, as the table fit)."""
    if not samples:
        raise ValueError("no requests to fit")
    has_disk = any(s.features[4] for s in samples)
    cols = [0, 1, 2, 3, 4] if has_disk else [0, 1, 2, 3]
    rows = []
    for s in samples:
        weight = 1.0 / max(s.ttft_ms, 1e-3)
        rows.append([s.features[j] * weight for j in cols])
    targets = [s.ttft_ms / max(s.ttft_ms, 1e-3) for s in samples]
    solution = nnls(rows, targets)
    values = dict(zip((SAMPLE_COEFFICIENTS[j] for j in cols), solution))
    # Identifiability over the constants the data touches (an all-zero column is "not in the data" instead).
    present = [i for i, j in enumerate(cols) if any(s.features[j] for s in samples)]
    identified = analyse(
        [[r[i] for i in present] for r in rows], targets, [solution[i] for i in present],
        [SAMPLE_COEFFICIENTS[cols[i]] for i in present],
        shapes=len({tuple(s.features[cols[i]] for i in present) for s in samples}),
    )
    if not has_disk:
        values["load_disk_ms_per_token"] = values["load_cpu_ms_per_token"] * DISK_TO_CPU_LOAD_RATIO
    undetermined = tuple(SAMPLE_COEFFICIENTS[j] for j in range(1, 5) if not any(s.features[j] for s in samples))
    costs = CostModel(**values, source=f"least-squares fit ({method})")

    predicted = [costs.ttft_ms(int(f[1]), int(f[2]), int(f[4]), int(f[3])) for f in (s.features for s in samples)]
    errors, r2 = request_fit_figures(samples, predicted)
    return Calibration(costs, errors, r2, method, len(samples), undetermined, identified)


def request_fit_figures(samples: Sequence[Any], predicted: Sequence[float]) -> tuple[list[dict[str, Any]], float]:
    """A per-request fit's figures: measured against predicted p50 and mean per (config, pass), and R^2 over the
    requests. ``samples`` have ``config``, ``pass_``, ``order`` and ``ttft_ms``; ``predicted`` one TTFT each."""
    avg = stats.mean([s.ttft_ms for s in samples])
    ss_res = sum((s.ttft_ms - p) ** 2 for s, p in zip(samples, predicted))
    ss_tot = sum((s.ttft_ms - avg) ** 2 for s in samples)
    groups: dict[tuple[str, int], list[tuple[Any, float]]] = {}
    for s, p in zip(samples, predicted):
        groups.setdefault((s.config, s.pass_), []).append((s, p))
    cells, passes = [], {}
    for key, members in groups.items():
        measured = stats.summary([s.ttft_ms for s, _ in members])
        cells.append(Cell(key[0], key[1], members[0][0].order, measured["p50_ms"], measured["mean_ms"]))
        passes[key] = stats.summary([p for _, p in members])
    errors, _ = _cell_errors(cells, passes)
    return errors, 1 - ss_res / ss_tot if ss_tot else 1.0


def calibrate_measurements(rows: list[Measurement], scenario: Scenario) -> Calibration:
    """Fit a per-request file: from its hit columns if every row has them, else by re-simulating ``scenario``."""
    if all(r.has_hits for r in rows):
        return fit_samples(samples_from_hits(rows, units(scenario).chunk), "per request, hit tokens from the file")
    return fit_samples(samples_from_scenario(rows, scenario), "per request, hit tokens re-simulated")


def repeat_of(scenario: Scenario) -> Repeat:
    """The long_doc_qa flags a scenario's repeated pass stands for, to read that run's files in the same order."""
    spec = next((p for p in scenario.passes if p.repeat_mode is not None), None)
    if spec is None:
        return Repeat(docs=scenario.docs, doc_tokens=scenario.doc_tokens)
    return Repeat(spec.repeat_mode, spec.repeat_count, spec.seed, spec.hit_miss_ratio, scenario.docs, scenario.doc_tokens)


def calibrate_file(path: Path, scenario: Scenario) -> Calibration:
    """A per-request file (CSV or JSONL, with ``ttft_ms``), a long_doc_qa run (a round's file, with its sibling, or
    their folder), or a table (``p50_ms, mean_ms`` per cell). Failed long_doc_qa requests are left out."""
    path = Path(path)
    if path.is_dir():
        return calibrate_measurements(read_measurements(path, repeat=repeat_of(scenario)).rows, scenario)
    try:
        text = textfile.read_text(path)
    except textfile.FileProblem as exc:
        raise MeasurementError(str(exc)) from None
    if path.suffix != ".jsonl" and kind_of(text) == "long_doc_qa":
        return calibrate_measurements(read_measurements(path, repeat=repeat_of(scenario)).rows, scenario)
    return calibrate_text(text, scenario, jsonl=path.suffix == ".jsonl")


def calibrate_text(text: str, scenario: Scenario, jsonl: bool = False, name: str = "the file") -> Calibration:
    """``calibrate_file``'s work on the file's text (an upload, say); JSONL is also recognised by its first ``{``, a
    long_doc_qa round by its columns (``name`` tells a warmup round from a query round)."""
    head = text.lstrip().split("\n", 1)[0]
    header = [c.strip() for c in head.split(",")]
    if not head.startswith("{") and "ttft_ms" not in header and {"p50_ms", "mean_ms"} <= set(header):
        try:
            return fit(scenario, parse_table(text))
        except ValueError as exc:
            raise MeasurementError(str(exc)) from None
    if not jsonl and kind_of(text) == "long_doc_qa":
        # A round's text names no configuration: it is taken as the scenario's run with the most tiers (gpu+cpu
        # when the scenario has a CPU tier; give the scenario no CPU tier for a run against vLLM alone).
        run = [engine.run for engine in engines(scenario.model_copy(update={"costs": _ZERO}))][-1]
        found = read_measurements(text if "\n" in text else text + "\n", name=name, config=run, repeat=repeat_of(scenario))
        return calibrate_measurements(found.rows, scenario)
    return calibrate_measurements(parse_text(text, jsonl=jsonl or head.startswith("{")), scenario)
