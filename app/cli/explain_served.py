"""``kvscope explain`` under load (``--concurrency``, ``--rate``, a scheduler flag, or a trace ``--timed``): each pass's
TTFT split into its parts, against the same run one request at a time, as a table, one request in words, or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.cli.scenario_flags import within_budget
from app.cli.serving_flags import check_new, cli_limit, refused, run_served, write_ledgers
from app.cli.table import format_table
from sim.numeric.figures import ms_text
from sim.sched.serving import Serving
from sim.simulation.replay import ReplayError, ReplayTiers
from sim.traces.reader import Trace
from sim.workloads.scenario import Scenario

NOTE = (
    "waiting: before its first admission and in steps that computed none of it; prefill: each of its steps' fixed "
    "cost and its own tokens; others: the other requests' tokens in the steps it shared; alone: the same run one "
    "request at a time; lost hits: alone's hit tokens minus these (evicted while others held blocks, or not yet cached)"
)


def explain_under_load(scenario: Scenario, serving: Serving, steps_file: Path | None) -> dict[str, Any]:
    from sim.sched.overlap import explain_served, overlap_cost

    return run_served(scenario, serving, steps_file, overlap_cost(scenario, serving), explain_served)


def trace_under_load(trace: Trace, tiers: ReplayTiers, serving: Serving, timed: bool, speedup: float | None,
                     steps_file: Path | None) -> dict[str, Any]:
    """The trace served as ``serving`` says (at its timestamps when ``timed``), explained against itself alone."""
    from sim.sched.overlap import explain_trace_served
    from sim.sched.replay import served_trace_cost
    from sim.sched.replay_serving import trace_arrivals

    check_new(steps_file)
    one = served_trace_cost(trace, serving)
    within_budget(one + one, "a smaller trace", where=trace.name)
    arrivals = trace_arrivals(trace.timestamps_ms, speedup or 1.0) if timed else None
    try:
        result, ledgers = explain_trace_served(trace, tiers, serving, arrivals, cli_limit(serving))
    except ValueError as exc:  # the stepped engine's refusals (a request larger than the pool), or a run that outgrew
        if isinstance(exc, ReplayError):  # the work budget as it ran; the tiers' own named
            raise
        raise refused(exc) from None
    write_ledgers(steps_file, ledgers)
    return result


def table(result: dict[str, Any]) -> str:
    rows = []
    for run in result["runs"]:
        for g in run["passes"]:
            m, a = g["mean"], g["alone_mean"]
            rows.append([
                run["name"], f"{g['pass']} {g['order']}", g["requests"], ms_text(g["ttft_p90_ms"]), ms_text(g["alone_ttft_p90_ms"]),
                ms_text(m["ttft_ms"]), ms_text(m["waiting_ms"]), ms_text(m["prefill_ms"]), ms_text(m["others_ms"]),
                ms_text(m["load_ms"] + m["store_ms"]), ms_text(a["ttft_ms"]), g["lost_hit_tokens"], g["evicted_tokens"],
                g["not_cached_tokens"],
            ])
    headers = ["config", "pass", "n", "p90 ms", "alone p90", "mean ms", "waiting", "prefill", "others", "load+store",
               "alone mean", "lost hits", "evicted", "not cached"]
    lines = [format_table(headers, rows, [False, False] + [True] * (len(headers) - 2)), ""]
    lines += [f"{run['name']}: {line(run)}" for run in result["runs"]]
    return "\n".join(lines) + "\n\n" + NOTE


def line(run: dict[str, Any]) -> str:
    t, s = run["totals"], run["serving"]
    return (f"TTFT p90 {ms_text(t['ttft_p90_ms'])} ms under load, {ms_text(t['alone_ttft_p90_ms'])} ms alone; "
            f"{s['requests_per_s']:,.2f} requests/s; the overlap cost {t['lost_hit_tokens']:,} hit tokens "
            f"({t['evicted_tokens']:,} evicted, {t['not_cached_tokens']:,} not yet cached)")


def request_text(result: dict[str, Any], seq: int) -> str:
    lines = []
    for run in result["runs"]:
        r = run["requests"][seq]
        a, o = r["alone"], r["overlap"]
        where = f"request {seq}" + (f" (pass {r['pass']}, doc {r['doc']})" if r["doc"] >= 0 else "")  # a trace has no docs
        lines.append(
            f"{where}, run {run['name']}: TTFT {ms_text(r['ttft_ms'])} ms = "
            f"waiting {ms_text(r['waiting_ms'])} + its prefill {ms_text(r['prefill_ms'])} + others' tokens "
            f"{ms_text(r['others_ms'])} ({r['others_tokens']:,} tokens in its steps) + loads {ms_text(r['load_ms'])} + "
            f"stores {ms_text(r['store_ms'])}"
        )
        lines.append(
            f"  alone: TTFT {ms_text(a['ttft_ms'])} ms, {a['gpu_hit_tokens']:,} GPU hit tokens; under load "
            f"{r['gpu_hit_tokens']:,}, with {r['pinned_blocks']:,} blocks held by other running requests at its admission"
        )
        cost = f"  the overlap cost {ms_text(o['ttft_ms'])} ms and {o['hit_tokens']:,} hit tokens"
        if o["evicted_tokens"]:
            by = ", ".join(str(s) for s in o["evicted_by"])
            cost += f"; {o['evicted_tokens']:,} GPU tokens were evicted first, by request {by}"
        if o["not_cached_tokens"]:
            cost += f"; {o['not_cached_tokens']:,} were not yet cached"
        lines.append(cost)
    return "\n".join(lines)
