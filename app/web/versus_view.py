"""What the page draws of ``sim.calibration.versus``: the per-pass table, the requests listed, the chart's series, and in words
which scenario was simulated."""

from __future__ import annotations

from typing import Any

from sim.calibration.versus import STATS

MAX_LISTED_REQUESTS = 2_000  # rows of the per-request table; the chart and the per-pass table use every request
MAX_CHART_REQUESTS = 20_000
STAT_LABELS = {"p50_ms": "p50", "mean_ms": "mean", "p90_ms": "p90", "p99_ms": "p99"}


def scenario_words(summary: dict[str, Any], passes: list[dict[str, Any]]) -> str:
    """The simulated scenario in a line: documents, prompt, passes (as the file names them), the GPU and CPU sizes."""
    cpu = summary.get("cpu_capacity_tokens")
    tiers = f"GPU {summary['gpu_tokens']:,} tokens" + (f", CPU {cpu:,} tokens" if cpu else ", no CPU tier")
    words = ", ".join(f"{p['pass']} {p['order']}" for p in passes[:8]) + (f" and {len(passes) - 8} more" if len(passes) > 8 else "")
    return f"{summary['docs']:,} documents, {summary['prompt_tokens']:,}-token prompts, passes {words}; {tiers}"


def versus_view(result: dict[str, Any]) -> dict[str, Any]:
    """The template's and the chart's data (``result`` is ``sim.calibration.versus.measured_vs_predicted``'s)."""
    passes, requests, series = [], [], []
    for i, run in enumerate(result["runs"]):
        for p in run["passes"]:
            passes.append({"run": run["name"], "index": i, "measured_as": run["measured_as"], **p})
        shown = run["requests"][:MAX_CHART_REQUESTS]
        series.append(
            {
                "run": run["name"], "index": i, "measured_as": run["measured_as"],
                "x": [r["seq"] for r in shown],
                "measured": [r["measured_ms"] for r in shown] if run["measured_as"] else [],
                "predicted": [r["predicted_ms"] for r in shown],
                "info": [[r["pass"], r["order"], r["doc"], r["error_pct"]] for r in shown],
            }
        )
        if run["measured_as"]:
            requests += [{"run": run["name"], "index": i, **r} for r in run["requests"]]
    return {
        "source": result["scenario_source"],
        "note": result["scenario_note"],
        "scenario": scenario_words(result["scenario"], result["runs"][0]["passes"]),
        "costs": result["scenario"]["costs"].get("source", ""),
        "passes": passes,
        "stats": [(name, STAT_LABELS[name]) for name in STATS],
        "requests": requests[:MAX_LISTED_REQUESTS],
        "requests_total": len(requests),
        "not_simulated": result["not_simulated"],
        "chart": {"series": series, "truncated": any(len(r["requests"]) > MAX_CHART_REQUESTS for r in result["runs"])},
    }
