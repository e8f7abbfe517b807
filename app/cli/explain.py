"""``kvscope explain``: why requests missed, per pass (or trace window) and for one request, with the capacities
that would have hit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from app.cli import explain_served
from app.cli.replay import REPLAY_FLAGS
from app.cli.save_run import keeps_nothing
from app.cli.scenario_flags import build_scenario, scenario_options, within_budget
from app.cli.serving_flags import options_of, take_serving
from app.cli.table import format_table
from app.cli.trace_options import format_option, load
from sim.bounds import jsontext
from sim.bounds.budget import capacity_search_cost, trace_cost
from sim.explain.capacity import DEFAULT_MAX_RUNS, MAX_SEARCH_BLOCKS
from sim.explain.causes import PRECEDENCE
from sim.explain.narrate import label, sentences
from sim.explain.report import explain_run, time_windows
from sim.sched.replay_serving import ReplayServing
from sim.sched.serving import Serving
from sim.simulation.replay import (
    MAX_CHUNK_BLOCKS,
    MAX_CPU_BLOCKS,
    MAX_GPU_BLOCKS,
    ReplayError,
    ReplayTiers,
    replay_engine,
    trace_requests,
)
from sim.simulation.run import engines, scenario_summary
from sim.traces.reader import TraceFormat
from sim.workloads.estimate import simulation_cost
from sim.workloads.requests import build_requests

MAX_WINDOWS = 1000


@click.command("explain")
@keeps_nothing
@scenario_options
@click.option("--trace", "trace_name", default=None,
              help="explain a trace replay instead (a Mooncake or Bailian JSONL file, or mooncake-synthetic); "
              "--block-size is then tokens per hash id (default: the format's)")
@format_option()
@click.option("--gpu-blocks", type=click.IntRange(1, MAX_GPU_BLOCKS), default=None, help="with --trace: usable GPU blocks")
@click.option("--cpu-blocks", type=click.IntRange(1, MAX_CPU_BLOCKS), default=None, help="with --trace: a CPU tier of this many blocks")
@click.option("--chunk-blocks", type=click.IntRange(1, MAX_CHUNK_BLOCKS), default=1, show_default=True,
              help="with --trace: blocks per CPU chunk")
@click.option("--windows", type=click.IntRange(1, MAX_WINDOWS), default=10, show_default=True,
              help="with --trace: equal time windows to total apart")
@click.option("--request", "seq", type=click.IntRange(0), default=None, help="explain this request (its seq) in words")
@click.option("--max-runs", type=click.IntRange(0, 100_000), default=None,
              help=f"re-simulations allowed per configuration for the capacities (default {DEFAULT_MAX_RUNS}; with "
              f"--trace 60; and at most {MAX_SEARCH_BLOCKS:,} block lookups)")
@click.option("--json", "as_json", is_flag=True, help="print the whole explanation as JSON")
@options_of(ReplayServing)
def command(
    trace_name: str | None, fmt: TraceFormat | None, gpu_blocks: int | None, cpu_blocks: int | None,
    chunk_blocks: int, windows: int,
    seq: int | None, max_runs: int | None, as_json: bool, steps_file: Path | None,
    **flags: Any,
) -> None:
    """Why each request's prompt tokens were computed: a cause for every token, per pass (or trace window), the
    tokens an unbounded cache would have served, and the capacities at which evicted tokens would have hit.

    Capacities come from re-simulating the run at other sizes (bounded by --max-runs; what the bound leaves out
    is counted, never guessed).
    """
    given: ReplayServing = take_serving(flags, ReplayServing)
    timed, speedup = given.timed, given.speedup
    serving = Serving.model_validate(given.model_dump(include=set(Serving.model_fields), exclude_none=True))
    if timed and trace_name is None:
        raise click.UsageError("--timed: needs --trace (the timestamps are the trace's)")
    if serving.stepped or timed or steps_file is not None:
        if trace_name is not None:
            if gpu_blocks is None:
                raise click.UsageError("--gpu-blocks: needed with --trace")
            trace = load(trace_name, flags.get("block_size"), fmt)
            tiers = ReplayTiers(gpu_blocks, cpu_blocks, chunk_blocks)
            try:
                result = explain_served.trace_under_load(trace, tiers, serving, timed, speedup, steps_file)
            except ReplayError as exc:
                raise click.BadParameter(str(exc), param_hint=REPLAY_FLAGS[exc.field]) from None
        else:
            result = explain_served.explain_under_load(build_scenario(**flags), serving, steps_file)
        _under_load(result, seq, max_runs, as_json)
        return
    seqs = None if seq is None else {seq}
    if trace_name is not None:
        result = _trace(trace_name, flags.get("block_size"), fmt, gpu_blocks, cpu_blocks, chunk_blocks, windows,
                        60 if max_runs is None else max_runs, seqs)
    else:
        for name, value in (("--gpu-blocks", gpu_blocks), ("--cpu-blocks", cpu_blocks), ("--format", fmt)):
            if value is not None:
                raise click.UsageError(f"{name}: only with --trace")
        scenario = build_scenario(**flags)
        limit = DEFAULT_MAX_RUNS if max_runs is None else max_runs
        runs = len(scenario.run_names)
        within_budget(simulation_cost(scenario) + capacity_search_cost(runs, scenario.total_blocks, limit, MAX_SEARCH_BLOCKS))
        requests = build_requests(scenario)
        result = {
            "scenario": scenario_summary(scenario),
            "runs": [explain_run(e, requests, max_runs=limit, seqs=seqs) for e in engines(scenario)],
        }
    if seq is not None:
        count = len(result["runs"][0]["requests"])
        if seq >= count:
            raise click.BadParameter(f"must be below the number of requests ({count:,}), got {seq:,}", param_hint="--request")
        result["request"] = _one(result, seq)
    if as_json:
        click.echo(jsontext.dumps(result, indent=1))
    elif seq is not None:
        click.echo(_request_text(result["request"]))
    else:
        click.echo(_table(result))


def _under_load(result: dict[str, Any], seq: int | None, max_runs: int | None, as_json: bool) -> None:
    """Each request's TTFT split into its parts, against the same run alone (app.cli.explain_served)."""
    if max_runs is not None:
        raise click.UsageError("--max-runs: the capacity search runs one request at a time; not under load")
    if seq is not None:
        count = len(result["runs"][0]["requests"])
        if seq >= count:
            raise click.BadParameter(f"must be below the number of requests ({count:,}), got {seq:,}", param_hint="--request")
    if as_json:
        click.echo(jsontext.dumps(result, indent=1))
    elif seq is not None:
        click.echo(explain_served.request_text(result, seq))
    else:
        click.echo(explain_served.table(result))


def _trace(name: str, block_size: int | None, fmt: TraceFormat | None, gpu_blocks: int | None, cpu_blocks: int | None,
           chunk_blocks: int, windows: int, max_runs: int, seqs: set[int] | None) -> dict[str, Any]:
    if gpu_blocks is None:
        raise click.UsageError("--gpu-blocks: needed with --trace")
    trace = load(name, block_size, fmt)
    cost = trace_cost(len(trace), trace.total_blocks) + capacity_search_cost(1, trace.total_blocks, max_runs, MAX_SEARCH_BLOCKS)
    within_budget(cost, "a smaller trace", where=name)
    tiers = ReplayTiers(gpu_blocks, cpu_blocks, chunk_blocks)
    try:
        engine = replay_engine(trace, tiers)
    except ReplayError as exc:
        raise click.BadParameter(str(exc), param_hint=REPLAY_FLAGS[exc.field]) from None
    groups = time_windows(list(trace.timestamps_ms), windows)
    run = explain_run(engine, trace_requests(trace, chunk_blocks), groups, max_runs, seqs)
    return {"trace": trace.summary(), "runs": [run]}


def _one(result: dict[str, Any], seq: int) -> dict[str, Any]:
    out = []
    for run in result["runs"]:
        rec = run["requests"][seq]
        offload = len(run["tiers"]) > 1
        out.append(
            {
                "run": run["name"],
                "record": rec,
                "gpu_miss": sentences(rec, run["requests"], "gpu_miss", offload),
                "computed": sentences(rec, run["requests"], "computed", offload),
            }
        )
    return {"seq": seq, "runs": out}


def _request_text(request: dict[str, Any]) -> str:
    lines = []
    for run in request["runs"]:
        rec = run["record"]
        where = label(rec) if rec["doc"] < 0 else f"{label(rec)} (request {rec['seq']})"
        lines.append(
            f"{where}, run {run['run']}: {rec['prompt_tokens']:,} prompt tokens, "
            f"GPU hit {rec['gpu_hit_tokens']:,}, computed {rec['computed_tokens']:,}; "
            f"an unbounded cache would have served {rec['infinite_hit_tokens']:,}"
        )
        if run["gpu_miss"] != run["computed"]:
            lines.append("  GPU misses:")
            lines += [f"    {s}" for s in run["gpu_miss"]]
            lines.append("  computed (the offload tiers' verdict):")
        lines += [f"    {s}" for s in run["computed"]]
    return "\n".join(lines)


def _table(result: dict[str, Any]) -> str:
    causes = [c for c in PRECEDENCE if any(c in g.get(m, {}) for r in result["runs"] for g in r["groups"]
                                             for m in ("computed", "gpu_miss"))]
    rows = []
    for run in result["runs"]:
        offload = len(run["tiers"]) > 1
        for g in run["groups"]:
            where = f"{g['pass']} {g['order']}" if "pass" in g else f"window {g['window']}"
            for name in ("gpu_miss", "computed") if offload else ("computed",):
                needs = g["needs"].get("gpu" if name == "gpu_miss" or not offload else "cpu", {})
                rows.append(
                    [run["name"], where, "GPU misses" if name == "gpu_miss" else "computed", sum(g[name].values()),
                     *[g[name].get(c, "") for c in causes],
                     f"{g['hit_ratio']:.3f}", f"{g['infinite_hit_ratio']:.3f}", needs.get("all_hit_tokens")]
                )
    headers = ["config", "pass", "tokens", "total", *causes, "hit ratio", "bound", "all hit at tok"]
    table = format_table(headers, rows, [False, False, False] + [True] * (len(headers) - 3))
    return table + (
        "\n\nbound: the hit ratio of tiers of unbounded size under the same rules; all hit at: the smallest "
        "capacity of the tier at which every request of the pass keeps all its evicted tokens (re-simulated)"
    )
