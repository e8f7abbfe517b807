"""``kvscope fleet``: N replicas behind each router given, over a scenario or a trace at its timestamps; a table per
router, or the JSON result with each request's ``replica``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli import fleet_sweep
from app.cli.executors import workers_option
from app.cli.fleet_sweep import numbers
from app.cli.save_run import keeps_nothing
from app.cli.scenario_flags import FIELD_TO_FLAG, build_scenario, load_costs, scenario_options, within_budget
from app.cli.serving_flags import (
    check_new,
    flag_of,
    serving_line,
    serving_options,
    take_serving,
    usage_error,
    write_ledgers,
)
from app.cli.table import format_table
from sim.bounds import jsontext
from sim.fleet.replicas import MAX_REPLICAS, FleetError
from sim.fleet.routers import ROUTER_NAMES
from sim.fleet.settings import DEFAULT_ROUTERS
from sim.sched.replay_serving import MAX_SPEEDUP, MIN_SPEEDUP

if TYPE_CHECKING:
    from sim.costs.model import CostModel
    from sim.fleet.settings import FleetSettings
    from sim.sched.arrivals import Arrivals
    from sim.sched.serving import Serving
    from sim.simulation.replay import ReplayTiers
    from sim.traces.reader import Trace
    from sim.workloads.scenario import Scenario

FLEET_FLAGS = {"replicas": "--replicas", "routers": "--router", "shared_tier": "--shared-tier"}
# With --trace the trace is the workload: these flags say nothing then.
WORKLOAD_FIELDS = ("docs", "doc_tokens", "question_tokens", "questions", "output_tokens", "shared_prefix_tokens",
                   "passes", "granularity", "free_order", "gpu_policy", "cpu_policy", "seed", "disk_gb", "disk_tokens",
                   "repeat_mode", "repeat_count", "shuffle_seed", "hit_miss_ratio", "blocks_per_chunk",
                   "store_threshold", "offload_prompt_only", "save_unfull_chunk")


@click.command("fleet")
@scenario_options
@click.option("--replicas", default="2", show_default=True,
              help=f"replicas behind the router, each with its own GPU and tiers (at most {MAX_REPLICAS}); with --sweep a list: 1,2,4")
@click.option("--router", "routers", multiple=True, metavar="NAME",
              help=f"a router to compare, repeatable: {', '.join(ROUTER_NAMES)} (default: {', '.join(DEFAULT_ROUTERS)})")
@click.option("--shared-tier", default=None, metavar="SPEC",
              help="one tier behind every replica's own (LMCache's remote backend, a Mooncake store): "
              "NAME:SIZE[:POLICY[:LOAD_MS_PER_TOKEN]], SIZE in GiB (8) or tokens (50000t); needs a CPU tier")
@click.option("--trace", default=None, metavar="FILE",
              help="a Mooncake or Bailian trace (or mooncake-synthetic) as the workload, its requests arriving at "
              "their timestamps; sizes then per replica in tokens: --gpu-tokens (required), --cpu-tokens")
@click.option("--speedup", type=click.FloatRange(MIN_SPEEDUP, MAX_SPEEDUP), default=None,
              help="with --trace: the gaps between timestamps divided by this (2: the trace in half its time)")
@click.option("--json", "as_json", is_flag=True, help="print the whole result as JSON, one record per request and router")
@click.option("--sweep", is_flag=True,
              help="one row per combination of --replicas (a list), --router and --gpu-sizes / --cpu-sizes, run side by side")
@click.option("--gpu-sizes", default=None, metavar="LIST", help="with --sweep: each replica's GPU tokens to try, e.g. 20000t,40000t (or GiB)")
@click.option("--cpu-sizes", default=None, metavar="LIST", help="with --sweep: each replica's CPU tier to try, in GiB or tokens (50000t), 0 for none: 0,8,32")
@workers_option("configurations (with --sweep)")
@serving_options
@keeps_nothing
def command(
    replicas: str, routers: tuple[str, ...], shared_tier: str | None, trace: str | None, speedup: float | None,
    as_json: bool, steps_file: Path | None, sweep: bool, gpu_sizes: str | None, cpu_sizes: str | None,
    workers: int | None, ray_address: str | None, **flags: Any,
) -> None:
    """Serve the workload with N replicas behind each router given, each replica vLLM's scheduler over its own GPU
    and tiers (and the shared tier), on one clock: hit ratios beside a pooled and an unbounded cache, TTFT, load.

    A scenario's requests arrive as --concurrency (1 by default) or --rate say; a trace's at its timestamps unless
    --concurrency or --rate is given. Not kept in the runs database (--no-save is accepted).

    With --sweep, one row per configuration instead (replicas, router, tier sizes), on --workers local processes
    (every core by default) or the Ray cluster at --ray ADDRESS."""
    serving = take_serving(flags)
    counts = numbers(replicas, "--replicas")
    checked = [fleet_settings(n, routers, shared_tier) for n in counts]  # each count within the limits
    settings = checked[0]
    if speedup is not None and (trace is None or serving.concurrency is not None or serving.rate is not None):
        raise click.UsageError("--speedup: needs --trace at its timestamps (not with --concurrency or --rate)")
    if sweep:
        if steps_file is not None:
            raise click.UsageError("--steps: a sweep runs many fleets; write ledgers with one fleet run")
        _sweep(counts, settings, trace, flags, serving, speedup or 1.0, gpu_sizes, cpu_sizes, workers, ray_address, as_json)
        return
    given = [f for f, v in (("--gpu-sizes", gpu_sizes), ("--cpu-sizes", cpu_sizes), ("--workers", workers), ("--ray", ray_address)) if v is not None]
    if given or len(counts) > 1:
        raise click.UsageError(f"{', '.join(given) or '--replicas'}: a list of configurations needs --sweep")
    check_new(steps_file)
    try:
        if trace is not None:
            result, ledgers = _trace(trace, flags, serving, settings, speedup or 1.0)
        else:
            result, ledgers = _scenario(flags, serving, settings)
    except FleetError as exc:
        raise click.BadParameter(str(exc), param_hint=FLEET_FLAGS[exc.field]) from None
    except ValueError as exc:  # what the engines refuse (a request larger than a replica's pool, ...)
        raise click.UsageError(str(exc)) from None
    write_ledgers(steps_file, ledgers)
    if as_json:
        click.echo(jsontext.dumps(result, indent=1))
        return
    # Arrivals that do not wait for the server (a rate, timestamps): the serving line says when they outran it.
    click.echo(render(result, open_loop=serving.rate is not None or (trace is not None and serving.concurrency is None)))


def _sweep(
    counts: list[int], settings: FleetSettings, trace: str | None, flags: dict[str, Any], serving: Serving, speedup: float,
    gpu_sizes: str | None, cpu_sizes: str | None, workers: int | None, ray_address: str | None, as_json: bool,
) -> None:
    from sim.fleet.sweep import ScenarioFleet, TraceFleet, configurations

    shared = settings.shared_tier.text if settings.shared_tier is not None else None
    workload: ScenarioFleet | TraceFleet
    if trace is None:
        scenario = _scenario_checked(flags, serving)
        per_token: int | None = scenario.bytes_per_token
        workload = ScenarioFleet(scenario, serving, shared)
    else:
        per_token = None
        gpus = fleet_sweep.sizes(gpu_sizes, "--gpu-sizes", None)
        if flags.get("gpu_tokens") is None and gpus[0] is not None:
            flags = {**flags, "gpu_tokens": gpus[0]}  # the sweep's sizes stand for --gpu-tokens
        loaded, tiers, costs, arrivals = _trace_inputs(trace, flags, serving, speedup)
        for g in gpus[1:]:
            try:
                _trace_tiers(loaded, {**flags, "gpu_tokens": g})  # each size checked as --gpu-tokens is
            except click.BadParameter as exc:
                raise click.BadParameter(f"{g}t: {exc.message}", param_hint="--gpu-sizes") from None
        workload = TraceFleet(loaded, tiers, costs, serving, arrivals, shared)
    try:
        configs = configurations(counts, settings.routers, fleet_sweep.sizes(gpu_sizes, "--gpu-sizes", per_token),
                                 fleet_sweep.sizes(cpu_sizes, "--cpu-sizes", per_token))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    fleet_sweep.run(workload, configs, workers, ray_address, as_json, trace or "--replicas")


def fleet_settings(replicas: int, routers: tuple[str, ...], shared_tier: str | None) -> FleetSettings:
    from pydantic import ValidationError

    from sim.fleet.settings import FleetSettings

    given: dict[str, Any] = {"replicas": replicas, "shared_tier": shared_tier}
    if routers:
        given["routers"] = routers
    try:
        return FleetSettings(**given)
    except ValidationError as exc:
        raise usage_error(exc, lambda field: FLEET_FLAGS.get(field, flag_of(field))) from None


def _scenario_checked(flags: dict[str, Any], serving: Serving) -> Scenario:
    from sim.sched.simulate import refusal

    scenario = build_scenario(**flags)
    if (refused := refusal(scenario, serving)) is not None:
        raise click.BadParameter(refused[1], param_hint=FIELD_TO_FLAG.get(refused[0], "--" + refused[0].replace("_", "-")))
    return scenario


def _scenario(flags: dict[str, Any], serving: Serving, settings: FleetSettings) -> tuple[dict[str, Any], dict[str, Any]]:
    from sim.fleet.simulate import scenario_fleet_cost, simulate_fleet

    scenario = _scenario_checked(flags, serving)
    within_budget(scenario_fleet_cost(scenario, serving, settings))
    return simulate_fleet(scenario, serving, settings)


def _trace_inputs(
    name: str, flags: dict[str, Any], serving: Serving, speedup: float,
) -> tuple[Trace, ReplayTiers, CostModel | None, Arrivals | None]:
    """The trace, each replica's tiers, the cost profile and the arrivals (None: as ``serving`` says)."""
    from app.cli.trace_options import load
    from sim.sched.replay_serving import ReplayServing
    from sim.simulation.replay import ReplayError

    given = [FIELD_TO_FLAG.get(f, "--" + f.replace("_", "-")) for f in WORKLOAD_FIELDS if flags.get(f) not in (None, ())]
    if given:
        raise click.UsageError(f"{', '.join(given)}: the trace is the workload; not with --trace")
    loaded = load(name, flags.get("block_size"))
    tiers = _trace_tiers(loaded, flags)
    costs = load_costs(flags["costs_file"]) if flags.get("costs_file") is not None else None
    timed = serving.concurrency is None and serving.rate is None
    try:
        arrivals = ReplayServing(timed=True, speedup=speedup).trace_arrivals(loaded.timestamps_ms) if timed else None
    except ReplayError as exc:
        raise _replay_error(exc) from None
    return loaded, tiers, costs, arrivals


def _replay_error(exc: Exception) -> click.BadParameter:
    return click.BadParameter(str(exc), param_hint={"storage_tiers": "--storage-tier"}.get(getattr(exc, "field", ""), "--gpu-tokens"))


def _trace(
    name: str, flags: dict[str, Any], serving: Serving, settings: FleetSettings, speedup: float,
) -> tuple[dict[str, Any], dict[str, Any]]:
    from sim.fleet.simulate import replay_fleet, trace_fleet_cost
    from sim.simulation.replay import ReplayError

    loaded, tiers, costs, arrivals = _trace_inputs(name, flags, serving, speedup)
    within_budget(trace_fleet_cost(loaded, serving, settings), "a smaller trace", where=name)
    try:
        return replay_fleet(loaded, tiers, costs, serving, settings, arrivals)
    except ReplayError as exc:
        raise _replay_error(exc) from None


def _trace_tiers(trace: Trace, flags: dict[str, Any]) -> Any:
    """The replicas' tiers in the trace's blocks, from the sizes in tokens (as vLLM logs the GPU's, its null block in)."""
    from sim.blocks.kv import DEFAULT_MODEL, model_shape, tokens_in
    from sim.simulation.replay import ReplayError, ReplayTiers, storage_tier

    block = trace.block_tokens
    gpu_tokens = flags.get("gpu_tokens")
    if gpu_tokens is None:
        raise click.UsageError("--gpu-tokens: required with --trace (each replica's GPU KV cache, as vLLM logs it)")
    if gpu_tokens < 2 * block:
        raise click.BadParameter(f"must hold vLLM's null block and one block of {block} tokens: at least {2 * block}",
                                 param_hint="--gpu-tokens")
    cpu_tokens = flags.get("cpu_tokens")
    if cpu_tokens is None and flags.get("cpu_gb") is not None and not flags.get("no_cpu"):
        per_token = flags.get("kv_bytes_per_token") or model_shape(flags.get("model") or DEFAULT_MODEL).bytes_per_token
        cpu_tokens = tokens_in(flags["cpu_gb"], per_token)
    chunk = flags.get("chunk_size") or block
    if chunk % block:
        raise click.BadParameter(f"must be a multiple of the trace's block size ({block})", param_hint="--chunk-size")
    try:
        storage = tuple(storage_tier(text) for text in flags.get("storage_tiers") or ())
    except ReplayError as exc:
        raise click.BadParameter(str(exc), param_hint="--storage-tier") from None
    cpu_blocks = None if flags.get("no_cpu") or not cpu_tokens else max(1, cpu_tokens // block)
    return ReplayTiers(gpu_tokens // block - 1, cpu_blocks, chunk // block, flags.get("cpu_backend") or "lmcache", storage)


def render(result: dict[str, Any], open_loop: bool = False) -> str:
    """The routers side by side, then each router's replicas, then each router's serving line."""
    fleet = result["fleet"]
    bounds = fleet["bounds"]
    shared = f", shared tier {fleet['shared_tier']}" if fleet["shared_tier"] else ""
    head = (f"{fleet['replicas']} replicas of {fleet['run']}{shared}; hit ratio bounds: one pooled cache "
            f"{bounds['pooled']:.4f}, unbounded {bounds['unbounded']:.4f}")
    rows = [
        [e["router"], f"{s['hit_ratio']:.4f}", s["ttft_p50_ms"], s["ttft_p90_ms"], s["ttft_p99_ms"],
         f"{s['load_imbalance']:.2f}", s["lost_tokens"]]
        for e in result["routers"] for s in (e["summary"],)
    ]
    parts = [head, "", format_table(["router", "hit ratio", "TTFT p50 ms", "p90 ms", "p99 ms", "imbalance", "lost tokens"],
                                    rows, [False] + [True] * 6)]
    for e in result["routers"]:
        parts += ["", f"{e['router']}:", format_table(
            ["replica", "requests", "hit tokens", "hit ratio", "KV mean", "KV peak", "busy ms"],
            [[r["replica"], r["requests"], r["hit_tokens"], f"{r['hit_ratio']:.4f}", f"{r['kv_usage_mean']:.2f}",
              f"{r['kv_usage_peak']:.2f}", r["busy_ms"]] for r in e["replicas"]],
            [False] + [True] * 6,
        )]
    parts.append("")
    parts += [serving_line(e["router"], e["summary"], open_loop=open_loop) for e in result["routers"]]
    return "\n".join(parts)
