"""Scenario flags shared by every command that simulates, and their validation into a ``Scenario``.

A pydantic error becomes a click usage error (exit 2) that names the flag, not
the field: ``--gpu-tokens: Input should be greater than or equal to 1``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import click

from sim.blocks.policies import GPU_POLICY_NAMES
from sim.blocks.pool import FreeOrder, Granularity
from sim.tiers.chunk_store import CHUNK_POLICIES, CPU_BACKENDS
from sim.workloads.presets import PRESETS, UnknownPreset
from sim.workloads.questions import QUESTION_MODES, REPEAT_MODES

# The scenario models (pydantic) are imported when a command builds a scenario, not when it is defined:
# ``kvscope curve TRACE`` and ``kvscope replay`` take these flags' definitions but never a scenario.
if TYPE_CHECKING:
    from pydantic import ValidationError

    from sim.bounds.budget import Cost
    from sim.costs.model import CostModel
    from sim.workloads.scenario import Scenario

# (flag, field, click type, help)
FLAGS: list[tuple[str, str, Any, str]] = [
    ("--docs", "docs", int, "number of documents"),
    ("--doc-tokens", "doc_tokens", int, "tokens per document"),
    ("--question-tokens", "question_tokens", str, "tokens of the question after each document, or one per document: 13,40,7"),
    ("--questions", "questions", click.Choice(QUESTION_MODES), "fresh: a new question every pass; same: asked again"),
    ("--output-tokens", "output_tokens", int, "tokens generated per request; their KV grows the request's GPU blocks"),
    ("--shared-prefix-tokens", "shared_prefix_tokens", int, "a system prompt shared by every prompt"),
    ("--gpu-tokens", "gpu_tokens", int, "GPU KV cache size in tokens, as vLLM logs it"),
    ("--cpu-gb", "cpu_gb", float, "CPU tier size in GiB (LMCache max_local_cpu_size; vllm-native: --kv-offloading-size)"),
    ("--cpu-tokens", "cpu_tokens", int, "CPU tier size in tokens (instead of --cpu-gb)"),
    ("--disk-gb", "disk_gb", float, "add a disk tier of this many GiB"),
    ("--disk-tokens", "disk_tokens", int, "add a disk tier of this many tokens"),
    ("--block-size", "block_size", int, "GPU block size in tokens"),
    ("--chunk-size", "chunk_size", int, "CPU chunk size in tokens (a multiple of the block size)"),
    ("--passes", "passes", str, "comma-separated pass orders: forward, reverse, random@SEED, zipf@SEED, 3/1/2"),
    ("--granularity", "granularity", click.Choice(get_args(Granularity)), "cache whole documents or 16-token blocks"),
    ("--model", "model", str, "model whose KV bytes per token size the tiers"),
    ("--kv-bytes-per-token", "kv_bytes_per_token", int, "override the model's KV bytes per token"),
    ("--free-order", "free_order", click.Choice(get_args(FreeOrder)), "vLLM's free-queue order"),
    ("--gpu-policy", "gpu_policy", click.Choice(GPU_POLICY_NAMES), "GPU eviction policy (lru is vLLM's)"),
    ("--cpu-policy", "cpu_policy", click.Choice(CHUNK_POLICIES), "CPU tier eviction policy (lru is LMCache's default)"),
    (
        "--cpu-backend", "cpu_backend", click.Choice(CPU_BACKENDS),
        "offload rules: lmcache (LMCache's own), vllm-native (vLLM's OffloadingConnector) or brief (the seed's)",
    ),
    ("--blocks-per-chunk", "blocks_per_chunk", int, "vllm-native: GPU blocks per offload block (vLLM's blocks_per_chunk)"),
    ("--store-threshold", "store_threshold", int, "vllm-native: offload a block on its Nth offer (vLLM's store_threshold)"),
    ("--offload-prompt-only", "offload_prompt_only", click.BOOL, "vllm-native: true (vLLM's default) or false to offload generated blocks too"),
    ("--seed", "seed", int, "seed for random and zipf orders"),
]
FIELD_TO_FLAG = {field: flag for flag, field, _, _ in FLAGS}
FIELD_TO_FLAG.update(costs="--costs", preset="--preset", storage_tiers="--storage-tier")


def scenario_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--preset``, every scenario flag, ``--no-cpu``, ``--save-unfull-chunk`` and ``--costs``."""
    for flag, field, kind, help_text in reversed(FLAGS):
        func = click.option(flag, field, type=kind, default=None, help=help_text)(func)
    func = repeat_options(func)
    func = click.option(
        "--storage-tier", "storage_tiers", multiple=True,
        help="a tier behind the CPU (and disk), repeatable, searched in order: NAME:SIZE[:POLICY[:LOAD_MS_PER_TOKEN]]"
        "[:admission=N], SIZE in GiB (8) or tokens (50000t), N: a chunk is stored on its Nth offer",
    )(func)
    func = click.option("--no-cpu", is_flag=True, help="run the GPU tier alone")(func)
    func = click.option("--save-unfull-chunk", is_flag=True, default=None, help="also store a prompt's last partial chunk")(func)
    func = click.option(
        "--costs", "costs_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help="cost profile JSON (from kvscope calibrate); default: the fit to the seed table",
    )(func)
    func = click.option(
        "--preset", default="seed-lab", show_default=True, help=f"starting point: {', '.join(PRESETS)}"
    )(func)
    return func


def repeat_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """LMCache long_doc_qa's workload flags, under its names: a warmup pass, then the repeated query pass."""
    func = click.option("--hit-miss-ratio", default=None, help="with --repeat-mode: e.g. 3:1, every 4th query prompt misses")(func)
    func = click.option("--shuffle-seed", type=click.IntRange(0, 2**31), default=None, help="with --repeat-mode random (default 0)")(func)
    func = click.option("--repeat-count", type=click.IntRange(1, 1000), default=None, help="with --repeat-mode (default 2)")(func)
    return click.option(
        "--repeat-mode", type=click.Choice(REPEAT_MODES), default=None,
        help="long_doc_qa's workload instead of --passes: warmup (forward), then each document --repeat-count times "
        "(tile, interleave or random); prompts are the documents alone unless --question-tokens is given",
    )(func)


def _long_doc_qa(flags: dict[str, Any]) -> None:
    """Turn the long_doc_qa flags into ``passes`` (and no question, as its prompts have none)."""
    from sim.workloads.longdocqa import (  # its readers (csv, the measurements) only when asked for
        parse_hit_miss,
        query_label,
    )

    mode, count, seed, ratio = (flags.pop(k) for k in ("repeat_mode", "repeat_count", "shuffle_seed", "hit_miss_ratio"))
    if mode is None:
        given = [f for f, v in (("--repeat-count", count), ("--shuffle-seed", seed), ("--hit-miss-ratio", ratio)) if v is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)}: needs --repeat-mode")
        return
    if flags.get("passes") is not None:
        raise click.UsageError("give --passes or --repeat-mode, not both")
    if ratio is not None:
        try:
            parse_hit_miss(ratio)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--hit-miss-ratio") from None
    flags["passes"] = "forward," + query_label(mode, count or 2, seed or 0, ratio)
    if flags.get("question_tokens") is None:
        flags["question_tokens"] = 0


def build_scenario(preset: str, no_cpu: bool = False, costs_file: Path | None = None, **flags: Any) -> Scenario:
    """Preset fields, overridden by every flag given; exits 2 naming the flag on bad input."""
    from pydantic import ValidationError

    from app.scenario_input import resolve

    _long_doc_qa(flags)
    flags["storage_tiers"] = list(flags.get("storage_tiers") or []) or None
    costs = load_costs(costs_file) if costs_file is not None else None
    try:
        return resolve(preset, flags, no_cpu, costs)
    except UnknownPreset as exc:
        raise click.BadParameter(str(exc), param_hint="--preset") from None
    except ValidationError as exc:
        raise click.UsageError(describe(exc)) from None


def within_budget(cost: Cost, fix: str = "fewer documents, passes or tokens", where: str | None = None) -> None:
    """Exit 2 when a command's estimated cost exceeds the CLI's budget (``app.budgets.cli_budget``), naming the flag
    (or ``where``: the input file at fault) and the limit."""
    from app import budgets
    from sim.bounds.budget import OverBudget

    try:
        budget = budgets.cli_budget()
    except ValueError as exc:
        raise click.UsageError(f"{budgets.CLI_ENV_VAR}: {exc}") from None
    try:
        budget.check(cost, "docs", fix + f" (or raise ${budgets.CLI_ENV_VAR})")
    except OverBudget as exc:
        raise click.UsageError(f"{where or FIELD_TO_FLAG.get(exc.field, '--' + exc.field.replace('_', '-'))}: {exc}") from None


def load_costs(path: Path) -> CostModel:
    from sim.calibration.calibrate import load_profile

    try:
        return load_profile(path)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--costs") from None


def describe(exc: ValidationError) -> str:
    """One line per problem, naming the flag and the limit."""
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        field = loc[0] if loc else ""
        flag = FIELD_TO_FLAG.get(field, "--" + field.replace("_", "-") if field else "scenario")
        where = flag + ("[" + ".".join(loc[1:]) + "]" if len(loc) > 1 else "")
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = repr(got) if isinstance(got, (int, float, str)) else ""
        suffix = f" (got {shown if len(shown) <= 80 else shown[:80] + '...'})" if field and shown else ""
        lines.append(f"{where}: {msg}{suffix}")
    return "\n".join(lines)
