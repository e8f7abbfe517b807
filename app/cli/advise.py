"""``kvscope advise``: the cheapest GPU/CPU/disk configuration whose simulated TTFT meets a target, with the commands to start it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from app.cli.executors import executor, progress, workers_option
from app.cli.save_run import keeps_nothing
from app.cli.scenario_flags import build_scenario, describe, scenario_options, within_budget
from app.cli.serving_flags import options_of, take_serving
from app.cli.table import format_table
from sim.advise.candidate import TIERS, Target
from sim.advise.prices import GPU_MEMORY_GIB, Deployment, Prices, load_prices
from sim.advise.search import Space, advise, advise_cost
from sim.advise.workloads import ScenarioWorkload, TraceWorkload, Workload
from sim.blocks.kv import KV_CACHE_DTYPES, load_config
from sim.bounds import jsontext
from sim.engine.events import tier_label
from sim.sched.replay_serving import ReplayServing
from sim.sched.serving import Serving
from sim.simulation.replay import MAX_CHUNK_BLOCKS


def _prices(prices_file: Path | None, gpu_hour: float | None, dram: float | None, nvme: float | None) -> Prices | None:
    if prices_file is not None:
        try:
            return load_prices(prices_file)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--prices") from None
    given = {"gpu_hour": gpu_hour, "dram_gib_hour": dram, "nvme_gib_hour": nvme}
    if all(v is None for v in given.values()):
        return None
    for name, flag in (("gpu_hour", "--gpu-hour"), ("dram_gib_hour", "--dram-gib-hour")):
        if given[name] is None:
            raise click.BadParameter(f"missing: prices need {flag} too (or a --prices file)", param_hint=flag)
    try:
        return Prices(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise click.BadParameter(err["msg"], param_hint="--" + str(err["loc"][0]).replace("_", "-")) from None


@click.command("advise")
@keeps_nothing
@scenario_options
@click.option("--trace", "trace", default=None,
              help="replay this trace (Mooncake or Bailian JSONL, or a bundled name: mooncake-synthetic) instead of the scenario; "
              "a tier not bought is the least the trace needs (GPU) or absent (CPU)")
@click.option("--measurements", "measurements_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="replay a measurement file's requests (its first configuration's documents and passes) instead of the scenario")
@click.option("--chunk-blocks", type=click.IntRange(1, MAX_CHUNK_BLOCKS), default=1, show_default=True, help="with --trace: trace blocks per CPU chunk")
@click.option("--p50-ms", type=float, default=None, help="TTFT p50 target, ms")
@click.option("--p90-ms", type=float, default=None, help="TTFT p90 target, ms")
@click.option("--hit-ratio", type=float, default=None, help="a floor on the prefix hit ratio (all tiers)")
@click.option("--pass", "pass_", type=click.IntRange(min=1), default=None, help="put the target on this pass only")
@click.option("--buy", default="gpu", show_default=True, help=f"tiers whose size may change: {','.join(TIERS)}")
@click.option("--points", type=click.IntRange(2, 200), default=8, show_default=True, help="sizes tried per bought tier")
@click.option("--policies", default=None, help="offload policies to try (default: every one the engine has)")
@click.option("--backends", default=None, help="offload backends to try (default: the scenario's own, --cpu-backend)")
@click.option("--prices", "prices_file", type=click.Path(dir_okay=False, path_type=Path), default=None, help="JSON: gpu_hour, dram_gib_hour, nvme_gib_hour")
@click.option("--gpu-hour", type=float, default=None, help="$ per GPU-hour")
@click.option("--dram-gib-hour", type=float, default=None, help="$ per GiB-hour of DRAM")
@click.option("--nvme-gib-hour", type=float, default=None, help="$ per GiB-hour of NVMe")
@click.option("--gpu-type", type=click.Choice(list(GPU_MEMORY_GIB)), default="h100-80gb", show_default=True)
@click.option("--gpus", type=click.IntRange(1, 1024), default=1, show_default=True)
@click.option("--tp", type=click.IntRange(1, 1024), default=1, show_default=True, help="tensor-parallel size")
@click.option("--gpu-memory-utilization", type=click.FloatRange(0, 1, min_open=True), default=0.9, show_default=True)
@click.option("--weights-gib", type=click.FloatRange(min=0), default=0.0, show_default=True, help="model weights, all ranks")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None, help="a Hugging Face config.json for the KV size (its _name_or_path, if any, is the model the commands start)")
@click.option("--kv-cache-dtype", type=click.Choice(list(KV_CACHE_DTYPES)), default="auto", show_default=True)
@click.option("--replicas", "replica_counts", default=None, metavar="LIST",
              help="search fleets of each many replicas (1,2,4), each with a candidate's tiers, behind --router, at --rate")
@click.option("--router", "routers", multiple=True, metavar="NAME",
              help="with --replicas: a router to try, repeatable; the best one's figures count (default: affinity)")
@workers_option("candidates")
@click.option("--top", type=click.IntRange(1, 100), default=10, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the advice as JSON")
@options_of(ReplayServing, steps=False)
def command(
    trace: str | None, measurements_file: Path | None, chunk_blocks: int, p50_ms: float | None, p90_ms: float | None, hit_ratio: float | None, pass_: int | None, buy: str, points: int,
    policies: str | None, backends: str | None, prices_file: Path | None, gpu_hour: float | None, dram_gib_hour: float | None,
    nvme_gib_hour: float | None, gpu_type: str, gpus: int, tp: int, gpu_memory_utilization: float, weights_gib: float,
    config_file: Path | None, kv_cache_dtype: str, replica_counts: str | None, routers: tuple[str, ...],
    workers: int | None, ray_address: str | None, top: int, as_json: bool, **flags: Any,
) -> None:
    """Search GPU, CPU and disk tier sizes (and offload policies and backends) for the cheapest configuration whose
    simulated TTFT meets --p50-ms / --p90-ms (on --pass N, or all passes) or --hit-ratio.

    Under load (--rate, --concurrency, a scheduler flag, or --timed with --trace) vLLM's scheduler serves the
    requests overlapping: TTFT counts queueing, GPU sizes start at the working set in flight, and each row gives the
    highest rate it sustains within the target (requests/s per replica).

    With --replicas, the cheapest fleet instead: so many replicas of a candidate, behind the best of --router, its
    requests arriving as --rate or --concurrency say, each replica vLLM's scheduler loop (a scenario only)."""
    given: ReplayServing = take_serving(flags, ReplayServing)
    timed, speedup = given.timed, given.speedup
    serving = Serving.model_validate(given.model_dump(include=set(Serving.model_fields), exclude_none=True))
    if timed and trace is None:
        raise click.UsageError("--timed: needs --trace (the timestamps are the trace's)")
    under_load = serving if serving.stepped or timed else None
    scenario = build_scenario(**flags)
    shape = scenario.kv_shape
    if config_file is not None:
        try:
            shape = load_config(config_file)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--config") from None
    if config_file is not None or kv_cache_dtype != "auto":
        scenario = scenario.model_copy(update={"kv_bytes_per_token": shape.with_cache_dtype(kv_cache_dtype).bytes_per_token})
    if trace is not None and measurements_file is not None:
        raise click.UsageError("give --trace or --measurements, not both")
    if measurements_file is not None:
        from sim.calibration.measured import scenario_from_measurements
        from sim.calibration.readers import read_measurements

        try:
            scenario = scenario_from_measurements(read_measurements(measurements_file).rows, scenario)
        except ValueError as exc:  # the reader's message names the line; the file is named here, as analyze does
            raise click.BadParameter(f"{measurements_file}: {exc}", param_hint="--measurements") from None
        except ValidationError as exc:
            raise click.BadParameter(f"{measurements_file}: {describe(exc)}", param_hint="--measurements") from None
    workload: Workload = ScenarioWorkload(scenario, under_load)
    if trace is not None:
        from app.cli.trace_options import load

        loaded = load(trace, None)
        workload = TraceWorkload(trace, scenario.model, scenario.bytes_per_token, loaded.block_tokens, chunk_blocks,
                                 serving=under_load, speedup=(speedup or 1.0) if timed else None)
    if pass_ is not None and pass_ > workload.passes:
        raise click.BadParameter(f"the workload has {workload.passes} passes, got {pass_}", param_hint="--pass")
    try:
        target = Target(p50_ms, p90_ms, pass_, hit_ratio)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--p50-ms/--p90-ms/--hit-ratio") from None
    counts = (1,)
    if replica_counts is not None:
        if trace is not None or measurements_file is not None:
            raise click.UsageError("--replicas: a fleet is searched over a scenario; not with --trace or --measurements")
        counts, workload = fleet_workload(scenario, replica_counts, routers, serving, target.figure)
    elif routers:
        raise click.UsageError("--router: needs --replicas (a fleet search)")
    split = lambda text: tuple(t.strip() for t in text.split(",") if t.strip()) if text else ()  # noqa: E731
    try:
        space = Space(split(buy), points, None, split(policies), split(backends), counts)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--" + str(exc).split(":")[0]) from None
    prices = _prices(prices_file, gpu_hour, dram_gib_hour, nvme_gib_hour)
    deployment = Deployment(gpu_type=gpu_type, gpus=gpus, tp=tp, gpu_memory_utilization=gpu_memory_utilization, weights_gib=weights_gib)

    try:
        # The working set in flight is measured before the grid exists: its one run is checked first.
        within_budget(workload.working_set_cost(), "a smaller workload")
        within_budget(advise_cost(workload, space, deployment, top), "fewer points, tiers, policies or a smaller workload", where="--points")
        model_id = shape.hf_id if config_file is not None else None
        with executor(workers, ray_address) as pool:
            advice = advise(workload, target, space, deployment, prices, pool, progress("advise", "candidates"), top,
                            kv_cache_dtype, model_id)
    except ValueError as exc:
        message = str(exc)
        field = message.split(":")[0]
        if field in ("buy", "policies", "backends", "points", "pass"):
            raise click.BadParameter(message, param_hint="--" + field) from None
        raise click.UsageError(message) from None
    if as_json:
        click.echo(jsontext.dumps(advice.to_dict(), indent=1))
        return
    _print(advice, prices is not None)


def _load_line(info: dict[str, Any]) -> str:
    serving, rate = info["serving"], info["rate_per_s"]
    if info["timestamps"]:
        arrivals = "at the trace's timestamps" + (f" ({rate:,.2f} requests/s)" if rate else " (all at once)")
    elif "rate" in serving:
        arrivals = f"at {rate:,g} requests/s (Poisson, seed {serving['arrival_seed']})"
    else:
        arrivals = f"{serving['concurrency']} in flight"
    return (f"under load: requests {arrivals}; vLLM's scheduler with --max-num-batched-tokens "
            f"{serving['max_num_batched_tokens']} --max-num-seqs {serving['max_num_seqs']}"
            + ("" if info["working_set_tokens"] is None else
               f"; GPU sizes from the working set in flight, {info['working_set_tokens']:,} tokens"))


def fleet_workload(
    scenario: Any, replica_counts: str, routers: tuple[str, ...], serving: Any, figure: str,
) -> tuple[tuple[int, ...], Workload]:
    """The replica counts and the fleet workload the flags give, each checked as ``kvscope fleet`` checks it."""
    from app.cli.fleet import fleet_settings
    from app.cli.fleet_sweep import numbers
    from sim.advise.fleet import DEFAULT_ROUTER, FleetWorkload

    counts = tuple(numbers(replica_counts, "--replicas"))
    chosen = routers or (DEFAULT_ROUTER,)
    for n in counts:
        fleet_settings(n, chosen, None)
    from sim.sched.simulate import refusal

    if (refused := refusal(scenario, serving)) is not None:
        raise click.BadParameter(refused[1], param_hint="--" + refused[0].replace("_", "-"))
    return counts, FleetWorkload(scenario, serving=serving, routers=chosen, figure=figure)


def _print(advice: Any, priced: bool) -> None:
    first = advice.meets[0] if advice.meets else advice.closest
    tiers = list(first["tier_hit_ratio"])  # gpu, cpu, disk, storage tiers
    fleet = "router" in first  # a fleet search: its replicas and router lead each row, its GiB are the fleet's
    head = (["replicas", "router"] if fleet else []) + ["#", "GPU tokens", "GPU GiB", "CPU tokens", "CPU GiB", "disk GiB", "policy", "p50 ms", "p90 ms", f"hit {'/'.join(map(tier_label, tiers))}",
            "$/hour" if priced else "GiB"]
    loaded = bool(advice.load)
    if loaded:
        head.append("max req/s")

    def cells(i: int, r: dict[str, Any]) -> list[Any]:
        c, h = r["config"], r["tier_hit_ratio"]
        cost = f"{r['dollars_per_hour']:.4f}" if priced else f"{c['replicas'] * (c['gpu_gib'] + c['cpu_gib_total'] + c['disk_gib_total']):.3f}"
        out = ([c["replicas"], r["router"]] if fleet else []) + [
            i, c["gpu_tokens"], f"{c['gpu_gib']:.3f}", c["cpu_tokens"] or "-", f"{c['cpu_gib_total']:.3f}", f"{c['disk_gib_total']:.3f}",
            ",".join(c.get("policies") or [c["cpu_policy"] or "-"]), f"{r['p50_ms']:.1f}", f"{r['p90_ms']:.1f}",
            "/".join(f"{h[t]:.2f}" for t in tiers), cost,
        ]
        if loaded:
            rate = r.get("sustained_per_s")
            out.append("any" if rate is None else f"{rate:,.2f}")
        return out

    right = [True, False] * fleet + [True] * (len(head) - 2 * fleet)  # numbers right, the router's name left
    click.echo(f"{advice.candidates} candidates simulated")
    if loaded:
        click.echo(_load_line(advice.load))
    if advice.meets:
        click.echo(format_table(head, [cells(i, r) for i, r in enumerate(advice.meets, 1)], right))
        best = advice.meets[0]
        if "why_cheaper_failed" in best:
            click.echo(f"why not cheaper: {best['why_cheaper_failed']}")
    else:
        c = advice.closest
        click.echo("no configuration meets the target; the closest is:")
        click.echo(format_table(head, [cells(0, c)], right))
        click.echo("it misses: " + "; ".join(c["misses"]))
    for note in advice.notes:
        click.echo(f"note: {note}")
    for warning in advice.warnings:
        click.echo(f"warning: {warning}")
    if loaded:
        click.echo("max req/s: the highest rate of arrivals (an open loop, or the trace's timestamps sped up) at which "
                   "the row still meets the target, per replica; any: it meets even with every request at once")
    click.echo("\nto start it:")
    if fleet:
        click.echo(f"  on each of {first['config']['replicas']} replicas, behind the {first['router']} router:")
    for name in ("vllm_native", "lmcache"):
        click.echo(f"  {name}: {advice.commands[name]}")
    click.echo(f"  ({advice.commands['sizes']})")
    if "simulated" in advice.commands:
        click.echo(f"  ({advice.commands['simulated']})")
    sys.stdout.flush()
