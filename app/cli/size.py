"""``kvscope size``: KV bytes per token of a model, the CPU memory documents need, and the GPU tokens a budget holds."""

from __future__ import annotations

from pathlib import Path

import click

from app.cli.save_run import keeps_nothing
from app.cli.table import format_table
from app.web.model_fields import bounds
from sim.blocks.kv import MODELS, UnknownModel, load_config, model_shape, sizing
from sim.bounds import jsontext
from sim.workloads.scenario import Scenario


def _scenario_int(name: str) -> dict[str, object]:
    """A flag for one of the scenario's whole-number fields: its limits and default, as the scenario defines them."""
    low, high = bounds(Scenario, name)
    return {"type": click.IntRange(low, high), "default": Scenario.model_fields[name].default, "show_default": True}


@click.command("size")
@keeps_nothing
@click.option("--model", default=None, help=f"a known model: {', '.join(MODELS)}")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None, help="a Hugging Face config.json instead of --model")
@click.option("--docs", **_scenario_int("docs"), help="documents to hold")
@click.option("--doc-tokens", **_scenario_int("doc_tokens"), help="tokens per document")
@click.option("--chunk-size", **_scenario_int("chunk_size"), help="CPU chunk size (only full chunks are stored)")
@click.option("--gpu-memory-gb", type=click.FloatRange(min=0, min_open=True), default=None, help="GPU memory left for KV cache, GiB")
@click.option("--list", "list_models", is_flag=True, help="list the known models, their KV bytes per token and Hugging Face ids")
@click.option("--json", "as_json", is_flag=True, help="print as JSON")
def command(
    model: str | None, config_file: Path | None, docs: int, doc_tokens: int, chunk_size: int,
    gpu_memory_gb: float | None, list_models: bool, as_json: bool,
) -> None:
    """Size a CPU tier from a model's KV bytes per token (layers x KV heads x head dim x 2 x dtype bytes)."""
    if list_models:
        rows = [[m.name, m.layers, m.kv_heads, m.head_dim, m.bytes_per_token, m.hf_id] for m in MODELS.values()]
        click.echo(format_table(["model", "layers", "kv heads", "head dim", "bytes/token", "Hugging Face id"], rows,
                                [False, True, True, True, True, False]))
        return
    if model and config_file:
        raise click.UsageError("give --model or --config, not both")
    try:
        shape = load_config(config_file) if config_file else model_shape(model or "qwen2.5-1.5b")
    except UnknownModel as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--config") from None
    report = sizing(shape, docs, doc_tokens, chunk_size, gpu_memory_gb)
    stored_tokens = report["cpu_stored_tokens"]
    if as_json:
        click.echo(jsontext.dumps(report, indent=1))
        return
    click.echo(f"{shape.name}: {shape.description}")
    click.echo(f"{docs} documents x {doc_tokens:,} tokens = {docs * doc_tokens:,} tokens = {report['gib_for_tokens']:.3f} GiB of KV")
    click.echo(f"CPU tier (full {chunk_size}-token chunks only): {stored_tokens:,} tokens = {report['cpu_gib_needed']:.3f} GiB needed")
    if gpu_memory_gb is not None:
        click.echo(f"{gpu_memory_gb:g} GiB of GPU KV memory holds {report['gpu_kv_tokens']:,} tokens")
