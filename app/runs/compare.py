"""Two runs side by side: what differs in their scenarios and cost constants, and per (configuration, pass)
their p50, mean and hit tokens with the change from the first to the second."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from app.runs.recording import rows_of
from app.runs.store import RunStore, StoreError
from sim.calibration.measurements import Measurement
from sim.engine.result import pass_summaries
from sim.numeric.stats import speedup
from sim.workloads.scenario import PassSpec

# A change of less than this (relative) is not highlighted: TTFTs are rounded to the microsecond.
SAME_WITHIN = 0.005
MAX_SERIES_POINTS = 20_000  # per run, for the overlaid TTFT chart


class NotComparable(StoreError):
    """One of two runs has no requests to compare (a ``kvscope watch`` keeps KV events); ``field`` is ``a`` or ``b``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _changes(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Fields whose values differ; nothing when either run has none (an imported measurement file has no scenario)."""
    if not a or not b:
        return []
    return [{"field": k, "a": a.get(k), "b": b.get(k)} for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _scenario(fields: dict[str, Any] | None) -> dict[str, Any] | None:
    """A kept scenario as compared: passes as their text (``forward,reverse``); its costs are compared apart."""
    if not fields:
        return None
    out = {k: v for k, v in fields.items() if k != "costs"}
    try:
        out["passes"] = ",".join(PassSpec.model_validate(p).text for p in fields.get("passes") or [])
    except ValidationError:
        pass
    return out


def _cells(rows: list[Measurement]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Per (configuration, pass, order): a trace's pass 1 is not a scenario's pass 1 forward."""
    by_config: dict[str, list[Measurement]] = {}
    for r in rows:
        by_config.setdefault(r.config, []).append(r)
    return {(config, p["pass"], p["order"] or ""): p for config, rs in by_config.items() for p in pass_summaries(rs)}


NOTHING_IN_COMMON = "no configuration and pass in common: each row is one run's alone"


def without_scenario_text(view: dict[str, Any]) -> str:
    """``run 4 (replay) has no scenario``, for the CLI and the page."""
    runs = [f"run {r['id']} ({r['kind']})" for r in view["without_scenario"]]
    return f"{' and '.join(runs)} {'have' if len(runs) > 1 else 'has'} no scenario"


def _without_requests(field: str, run: Any) -> NotComparable:
    what = "it keeps KV events, not requests" if run.info.kind == "watch" else "it has no requests"
    return NotComparable(field, f"run {run.id} ({run.info.kind}) cannot be compared: {what}")


def _change(a: float | None, b: float | None) -> float | None:
    """b relative to a: 1.25 is 25% higher. None when either is missing or a is 0."""
    if a is None or b is None or a == 0:
        return None
    return b / a  # exact: rounded once, where written


def series(rows: list[Measurement]) -> list[dict[str, Any]]:
    """Per configuration, each request's TTFT in request order (x counts the configuration's requests from 0, as every view numbers requests)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows[:MAX_SERIES_POINTS]:
        s = out.setdefault(r.config, {"config": r.config, "x": [], "ttft_ms": []})
        s["x"].append(len(s["x"]))
        s["ttft_ms"].append(r.ttft_ms)
    return list(out.values())


def offload_tiers(cells: list[dict[str, Any]]) -> list[str]:
    """The offload tiers any pass loaded from, in the order first seen (the CPU always, as the tables' first)."""
    names = ["cpu"]
    for cell in cells:
        names += [n for n in cell["tier_hits"] if n not in names]
    return names


def _tier_cell(ca: dict[str, Any] | None, cb: dict[str, Any] | None, tier: str) -> dict[str, Any]:
    va = None if ca is None else ca["tier_hits"].get(tier, 0)
    vb = None if cb is None else cb["tier_hits"].get(tier, 0)
    return {"a": va, "b": vb, "change": _change(va, vb)}


def diff(store: RunStore, a_id: int, b_id: int) -> dict[str, Any]:
    """``/api/runs/{a}/diff/{b}`` and ``kvscope runs diff A B``."""
    with store.snapshot():  # both runs as they were at once: a delete meanwhile is a NoSuchRun first, or nothing
        a, b = store.get(a_id), store.get(b_id)
        rows_a, rows_b = rows_of(store, a_id), rows_of(store, b_id)
    if a_id != b_id:  # one run alone (runs show) may have no requests; two such have nothing to compare
        for field, run, rows in (("a", a, rows_a), ("b", b, rows_b)):
            if not rows:
                raise _without_requests(field, run)
    cells_a, cells_b = _cells(rows_a), _cells(rows_b)
    tiers = offload_tiers([*cells_a.values(), *cells_b.values()])
    passes = []
    for key in sorted(set(cells_a) | set(cells_b), key=lambda k: (k[1], k[2], k[0])):
        ca, cb = cells_a.get(key), cells_b.get(key)
        row: dict[str, Any] = {"config": key[0], "pass": key[1], "order": (ca or cb or {}).get("order")}
        for name in ("requests", "p50_ms", "mean_ms", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens"):
            va, vb = (ca or {}).get(name), (cb or {}).get(name)
            row[name] = {"a": va, "b": vb, "change": _change(va, vb)}
        # Every offload tier's hits, keyed by its name (the CPU's are also cpu_hit_tokens above).
        row["tier_hits"] = {t: _tier_cell(ca, cb, t) for t in tiers}
        compared = [row[n] for n in ("requests", "p50_ms", "mean_ms", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens")]
        row["differs"] = ca is None or cb is None or any(
            c["a"] != c["b"] and (c["change"] is None or abs(c["change"] - 1) > SAME_WITHIN)
            for c in [*compared, *row["tier_hits"].values()]
        )
        row["p50_speedup_b_over_a"] = None if not (ca and cb) else speedup(ca["p50_ms"], cb["p50_ms"])
        passes.append(row)
    return {
        "a": a.info.to_dict(),
        "b": b.info.to_dict(),
        "scenarios_known": bool(a.scenario and b.scenario),  # an imported measurement file, a replay or proxy has none
        # The runs without one, by id and kind, so that a reader is told which (not a guess at why).
        "without_scenario": [{"id": r.id, "kind": r.info.kind} for r in (a, b) if not r.scenario],
        "common_passes": len(set(cells_a) & set(cells_b)),
        "scenario": _changes(_scenario(a.scenario), _scenario(b.scenario)),
        "costs": _changes(a.costs, b.costs),
        "tiers": tiers,
        "passes": passes,
        "ttft": {"a": series(rows_a), "b": series(rows_b)},
    }
