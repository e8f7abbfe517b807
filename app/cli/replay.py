"""``kvscope replay TRACE``: replay a Mooncake or Bailian trace through the GPU tier (a CPU tier, tiers behind it); hit ratios and TTFT."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli.save_run import save_options, save_run
from app.cli.scenario_flags import load_costs, within_budget
from app.cli.serving_flags import check_new, cli_limit, options_of, refused, serving_line, take_serving, write_ledgers
from app.cli.table import format_table
from app.cli.trace_options import block_size_option, format_option, load
from sim.bounds import jsontext
from sim.bounds.budget import trace_cost
from sim.numeric import stats
from sim.numeric.figures import ms_text
from sim.sched.replay import replay_served, served_trace_cost
from sim.sched.replay_serving import ReplayServing
from sim.simulation.replay import (
    MAX_CHUNK_BLOCKS,
    MAX_CPU_BLOCKS,
    MAX_GPU_BLOCKS,
    ReplayError,
    ReplayOutcome,
    ReplayTiers,
    run_replay,
    storage_tier,
    write_replay_json,
)
from sim.tiers.chunk_store import CPU_BACKENDS, DEFAULT_CPU_BACKEND, CpuBackend
from sim.traces.reader import Trace, TraceFormat

if TYPE_CHECKING:
    from app.runs.store import RunStore  # imported only when a run is kept (app.cli.save_run)
    from sim.costs.model import CostModel

REPLAY_FLAGS = {
    "gpu_blocks": "--gpu-blocks", "cpu_blocks": "--cpu-blocks", "chunk_blocks": "--chunk-blocks", "storage_tiers": "--storage-tier",
}


@click.command("replay")
@click.argument("trace")
@block_size_option()
@format_option()
@click.option("--gpu-blocks", type=click.IntRange(1, MAX_GPU_BLOCKS), required=True,
              help="usable GPU blocks (vLLM's null block comes on top)")
@click.option("--cpu-blocks", type=click.IntRange(1, MAX_CPU_BLOCKS), default=None, help="add a CPU tier of this many blocks")
@click.option("--chunk-blocks", type=click.IntRange(1, MAX_CHUNK_BLOCKS), default=1, show_default=True,
              help="blocks per CPU chunk")
@click.option("--cpu-backend", type=click.Choice(CPU_BACKENDS), default=DEFAULT_CPU_BACKEND, show_default=True,
              help="the CPU tier's rules: lmcache (LMCache's own), brief (the seed's), both compiled for large "
              "traces, or vllm-native (vLLM's OffloadingConnector; chunks are its offload blocks) in Python")
@click.option("--storage-tier", "storage_tiers", multiple=True,
              help="a tier behind the CPU, repeatable, searched in order: NAME:TOKENSt[:POLICY[:LOAD_MS_PER_TOKEN]]"
              "[:admission=N] (a trace has no model to size GiB)")
@click.option("--costs", "costs_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="cost profile JSON; default: the fit to the seed table")
@click.option("--json", "as_json", is_flag=True, help="print per-request records, per-tier hit ratios and the timeline as JSON")
@click.option("--no-explain", is_flag=True,
              help="with --json: leave out each miss's cause (gpu_miss, computed)")
@options_of(ReplayServing)
@save_options
def command(
    trace: str, block_size: int | None, fmt: TraceFormat | None, gpu_blocks: int, cpu_blocks: int | None, chunk_blocks: int,
    cpu_backend: CpuBackend, storage_tiers: tuple[str, ...], costs_file: Path | None, as_json: bool, no_explain: bool,
    steps_file: Path | None, db: str | None, no_save: bool, **serving_flags: Any,
) -> None:
    """Replay TRACE (a Mooncake or Qwen-Bailian JSONL file, or a bundled trace's name: mooncake-synthetic)
    through the tiers.

    Prints per-tier block hit ratios and TTFT statistics (from the cost model). One request at a time, as today,
    unless --timed, --concurrency, --rate, a scheduler flag or --steps is given: then vLLM's scheduler loop serves
    overlapping requests step by step (not kept in the runs database).
    """
    serving: ReplayServing = take_serving(serving_flags, ReplayServing)
    costs = load_costs(costs_file) if costs_file is not None else None
    loaded = load(trace, block_size, fmt)
    within_budget(trace_cost(len(loaded), loaded.total_blocks), "a smaller trace", where=trace)
    try:
        storage = tuple(storage_tier(text) for text in storage_tiers)
        tiers = ReplayTiers(gpu_blocks, cpu_blocks, chunk_blocks, cpu_backend, storage)
        if serving.stepped or steps_file is not None:
            _served(loaded, tiers, costs, serving, as_json, steps_file)
            return
        outcome = run_replay(loaded, tiers, costs, explain=as_json and not no_explain)
    except ReplayError as exc:
        raise click.BadParameter(str(exc), param_hint=REPLAY_FLAGS[exc.field]) from None
    _print(outcome, as_json)
    save_run(db, no_save, lambda store: _save(store, outcome, Path(trace)))


def _served(
    trace: Trace, tiers: ReplayTiers, costs: CostModel | None, serving: ReplayServing, as_json: bool, steps_file: Path | None,
) -> None:
    check_new(steps_file)
    within_budget(served_trace_cost(trace, serving), "a smaller trace", where=trace.name)
    try:
        limit = cli_limit(serving, trace.timestamps_ms)
        result, steps = replay_served(trace, tiers, costs, serving, limit, ledger=steps_file is not None, rows=as_json)
    except ValueError as exc:  # the stepped engine's refusals (vllm-native, a request larger than the pool), or a run
        if isinstance(exc, ReplayError):  # that outgrew the work budget as it ran
            raise
        raise refused(exc) from None
    write_ledgers(steps_file, {result["run"]: steps})
    if as_json:
        click.echo(jsontext.dumps(result, indent=1))
        return
    info = result["trace"]
    click.echo(f"{info['name']} ({info['format']}): {info['requests']:,} requests of {info['block_tokens']}-token blocks; "
               f"run {result['run']}")
    click.echo(serving_line(result["run"], result["summary"], open_loop=serving.timed or serving.rate is not None))


def _save(store: RunStore, outcome: ReplayOutcome, path: Path) -> int:
    """The replay as ``--json`` prints it (its requests left out past the store's rows per run: the trace's sha256
    and the totals still say what ran), and the trace file itself when it is small enough to keep whole."""
    from app.runs.recording import UPLOAD_KEEP_BYTES, save_replay  # with the store: only when the run is kept

    result: dict[str, Any] = outcome.head()
    if len(outcome) <= store.max_records:
        result["requests"] = list(outcome.request_rows())
    else:
        result["requests_left_out"] = f"{len(outcome):,} requests: over the {store.max_records:,} a run keeps"
    result.update(totals=outcome.totals(), timeline=outcome.timeline())
    small = path.is_file() and path.stat().st_size <= UPLOAD_KEEP_BYTES
    return save_replay(store, result, [(path.name, path.read_bytes())] if small else [])


def _print(outcome: ReplayOutcome, as_json: bool) -> None:
    if as_json:
        write_replay_json(outcome, sys.stdout)
        return
    result = {**outcome.head(), "ttft_ms": outcome.ttft_ms}
    info = result["trace"]
    click.echo(
        f"{info['name']} ({info['format']}): {info['requests']:,} requests, {info['block_references']:,} block references "
        f"({info['distinct_blocks']:,} distinct) of {info['block_tokens']} tokens; run {result['run']}"
    )
    click.echo(
        format_table(
            ["tier", "capacity blocks", "looked up", "hit", "hit ratio"],
            [[t["name"], t["capacity_blocks"], t["lookup_blocks"], t["hit_blocks"], f"{t['hit_ratio']:.4f}"] for t in result["tiers"]],
            [False, True, True, True, True],
        )
    )
    summary = stats.summary(result["ttft_ms"])
    click.echo(f"\nTTFT ms: p50 {ms_text(summary['p50_ms'])}  mean {ms_text(summary['mean_ms'])}  p90 {ms_text(summary['p90_ms'])}")
