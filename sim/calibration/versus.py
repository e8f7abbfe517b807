"""Measured beside predicted: a measurement file's requests matched to a simulation of the same scenario, with errors.

``measured_vs_predicted(found, given)`` simulates (with vLLM's scheduler at
the file's requests in flight, when they overlapped) the file's own scenario
where the file names one (every request's document known, one prompt
length: its documents, prompt length and passes, with the tiers, sizes and
costs of ``given``), else ``given`` itself, and pairs each measured request
with the simulated request of the same configuration at the same place in
its run (checking pass and document). Every run of the scenario is shown,
measured or not, so a file of ``gpu+cpu`` alone still shows what ``gpu``
would have given. The error is predicted minus measured: positive when the
model is slower than the server was.
"""

from __future__ import annotations

from typing import Any

from sim.calibration.measured import scenario_from_measurements
from sim.calibration.measurements import UNKNOWN_DOC, Measurement, MeasurementError
from sim.calibration.readers import MeasurementSet
from sim.numeric import stats
from sim.sched.serving import Serving
from sim.sched.simulate import served_result
from sim.simulation.run import scenario_summary, simulate
from sim.workloads.scenario import Scenario

QUANTILES = {"p50_ms": 0.5, "p90_ms": 0.9, "p99_ms": 0.99}
STATS = ("p50_ms", "mean_ms", "p90_ms", "p99_ms")


def summary(values: list[float]) -> dict[str, float]:
    """p50, mean, p90 and p99 of TTFTs, in ms, exact (rounded once, where written: sim.numeric.figures)."""
    out = {name: stats.quantile(values, q) for name, q in QUANTILES.items()}
    out["mean_ms"] = stats.mean(values)
    return {name: out[name] for name in STATS}


def error(predicted: float, measured: float) -> tuple[float, float | None]:
    """(predicted - measured in ms, the same in % of measured; None when nothing was measured to divide by)."""
    diff = predicted - measured
    return diff, 100 * diff / measured if measured > 0 else None  # exact: rounded once, where written


def scenario_for(found: MeasurementSet, given: Scenario) -> tuple[Scenario, str, str]:
    """The scenario to simulate, where it comes from (``file`` or ``given``) and what that means, in words."""
    rows = found.rows
    if any(r.doc == UNKNOWN_DOC for r in rows):
        return given, "given", "the file does not name every request's document, so the scenario given is simulated"
    # long_doc_qa's prompts are the documents alone: no question after them.
    base = given.replace(question_tokens=0) if found.kind == "long_doc_qa" else given
    try:
        scenario = scenario_from_measurements(rows, base)
    except ValueError as exc:
        return given, "given", f"{str(exc).removeprefix('measurements: ')}, so the scenario given is simulated"
    return scenario, "file", (
        f"documents, prompt length and passes read from the file ({scenario.docs} documents of {scenario.prompt_tokens:,}-token "
        "prompts); tiers, sizes, policies and costs from the scenario given"
    )


def config_names(configs: list[str], runs: list[str]) -> dict[str, str]:
    """The scenario's run each configuration of the file was measured on: its own name, or, for the one name that is
    no run (a long_doc_qa folder's, say), the run with the most tiers."""
    out = {c: c for c in configs if c in runs}
    strangers = [c for c in configs if c not in runs]
    if len(strangers) == 1 and runs[-1] not in out:
        out[strangers[0]] = runs[-1]
    return out


def _pair(config: str, mine: list[Measurement], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(mine) != len(records):
        raise MeasurementError(
            f"configuration {config!r} has {len(mine):,} measured requests but the scenario has {len(records):,}: "
            "give the scenario the run used (documents, passes)"
        )
    out = []
    for m, p in zip(mine, records):
        if m.pass_ != p["pass"] or (m.doc != UNKNOWN_DOC and m.doc != p["doc"]):
            raise MeasurementError(
                f"{config} request seq {m.seq} reads doc {m.doc} in pass {m.pass_}, but the scenario's request there "
                f"reads doc {p['doc']} in pass {p['pass']}: give the scenario the run used"
            )
        diff, pct = error(p["ttft_ms"], m.ttft_ms)
        out.append(
            {
                "seq": p["seq"], "pass": m.pass_, "order": m.order, "doc": m.doc, "prompt_tokens": m.prompt_tokens,
                "measured_ms": m.ttft_ms, "predicted_ms": p["ttft_ms"], "error_ms": diff, "error_pct": pct,
                "predicted_gpu_hit_tokens": p["gpu_hit_tokens"], "predicted_cpu_hit_tokens": p["cpu_hit_tokens"],
                "predicted_computed_tokens": p["computed_tokens"],
                "measured_gpu_hit_tokens": m.gpu_hit_tokens, "measured_cpu_hit_tokens": m.cpu_hit_tokens,
            }
        )
    return out


def _predicted_only(records: list[dict[str, Any]], orders: dict[int, str]) -> list[dict[str, Any]]:
    return [
        {
            "seq": p["seq"], "pass": p["pass"], "order": orders.get(p["pass"], p["order"]), "doc": p["doc"], "prompt_tokens": p["prompt_tokens"],
            "measured_ms": None, "predicted_ms": p["ttft_ms"], "error_ms": None, "error_pct": None,
            "predicted_gpu_hit_tokens": p["gpu_hit_tokens"], "predicted_cpu_hit_tokens": p["cpu_hit_tokens"],
            "predicted_computed_tokens": p["computed_tokens"], "measured_gpu_hit_tokens": None, "measured_cpu_hit_tokens": None,
        }
        for p in records
    ]


def _passes(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_pass: dict[int, list[dict[str, Any]]] = {}
    for r in requests:
        by_pass.setdefault(r["pass"], []).append(r)
    out = []
    for number, rs in sorted(by_pass.items()):
        predicted = summary([r["predicted_ms"] for r in rs])
        measured = summary([r["measured_ms"] for r in rs]) if rs[0]["measured_ms"] is not None else None
        row: dict[str, Any] = {"pass": number, "order": rs[0]["order"], "requests": len(rs), "measured": measured, "predicted": predicted}
        if measured is not None:
            errors = {name: error(predicted[name], measured[name]) for name in STATS}
            row["error_ms"] = {name: e[0] for name, e in errors.items()}
            row["error_pct"] = {name: e[1] for name, e in errors.items()}
        out.append(row)
    return out


def measured_vs_predicted(found: MeasurementSet, given: Scenario) -> dict[str, Any]:
    """Per configuration of the scenario: every request and every pass, measured beside predicted, with the error.

    Raises ``MeasurementError`` when the file's requests do not fit the scenario (their count, passes or documents),
    naming the first that does not."""
    if not found.rows:
        raise MeasurementError("the file has no requests")
    scenario, source, note = scenario_for(found, given)
    if found.in_flight > 1:
        # Requests overlapped on the server (long_doc_qa's --max-inflight-requests): vLLM's scheduler serves them,
        # that many in flight, each decoding the scenario's output tokens.
        result = served_result(scenario, Serving(concurrency=found.in_flight))
        note += f"; {found.in_flight} requests in flight, as measured, served by vLLM's scheduler"
    else:
        result = simulate(scenario, explain=False)
    runs = [run["name"] for run in result["runs"]]
    configs = list(dict.fromkeys(r.config for r in found.rows))
    names = config_names(configs, runs)
    measured_on = {run: config for config, run in names.items()}
    orders = {r.pass_: r.order for r in found.rows}  # the file's words for its passes (the rebuilt scenario's are lists)
    out = []
    for run in result["runs"]:
        config = measured_on.get(run["name"])
        if config is None:
            requests = _predicted_only(run["requests"], orders)
        else:
            mine = sorted((r for r in found.rows if r.config == config), key=lambda r: r.seq)
            requests = _pair(config, mine, run["requests"])
        out.append({"name": run["name"], "measured_as": config, "requests": requests, "passes": _passes(requests)})
    return {
        "scenario": scenario_summary(scenario),
        "scenario_source": source,
        "scenario_note": note,
        "runs": out,
        "not_simulated": [c for c in configs if c not in names],
        "failures": found.failures_json(),
    }
