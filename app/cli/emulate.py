"""``kvscope emulate``: serve a vLLM-compatible API backed by the simulator, to try live mode without a GPU."""

from __future__ import annotations

from pathlib import Path

import click
import uvicorn
from pydantic import ValidationError

from app.cli.emulate_kv_events import kv_events_options, publish_kv_events
from app.cli.listen import bound_url, listen
from app.cli.scenario_flags import load_costs
from app.emulator.config import EmulatorConfig
from app.emulator.server import make_emulator_app
from sim.blocks.kv import MODELS

_FLAGS = {
    "gpu_tokens": "--gpu-tokens", "cpu_gb": "--cpu-gb", "model": "--model", "speed": "--speed",
    "block_size": "--block-size", "chunk_size": "--chunk-size", "max_model_len": "--max-model-len",
    "served_model_name": "--served-model-name", "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_num_seqs": "--max-num-seqs",
}


@click.command("emulate")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on (0.0.0.0 for every interface)")
@click.option("--port", type=click.IntRange(0, 65_535), default=8000, show_default=True, help="port to listen on")
@click.option("--gpu-tokens", type=int, default=21_520, show_default=True, help="GPU KV cache size in tokens, as vLLM logs it")
@click.option("--cpu-gb", type=float, default=1.5, show_default=True, help="CPU tier size in GiB (LMCache max_local_cpu_size)")
@click.option("--no-cpu-tier", is_flag=True, help="emulate vLLM alone, without a CPU tier")
@click.option("--model", default="qwen2.5-1.5b", show_default=True, help=f"served model name, one of: {', '.join(MODELS)}")
@click.option(
    "--served-model-name", "served_model_name", multiple=True,
    help="a name clients may ask for, as vLLM's flag (repeat for aliases; the first is reported); default: --model",
)
@click.option("--speed", type=float, default=1.0, show_default=True, help="divide every delay by this (10 = ten times faster)")
@click.option("--block-size", type=int, default=16, show_default=True, help="GPU block size in tokens")
@click.option("--chunk-size", type=int, default=256, show_default=True, help="CPU chunk size in tokens")
@click.option("--max-model-len", type=int, default=None, help="longest prompt + completion (default: what the GPU holds)")
@click.option(
    "--max-num-batched-tokens", type=int, default=EmulatorConfig().max_num_batched_tokens, show_default=True,
    help="tokens one scheduler step may compute, as vLLM's flag",
)
@click.option(
    "--max-num-seqs", type=int, default=EmulatorConfig().max_num_seqs, show_default=True,
    help="requests running at once, as vLLM's flag",
)
@click.option(
    "--enable-prompt-tokens-details", is_flag=True,
    help="report usage.prompt_tokens_details.cached_tokens, as vLLM does with this flag",
)
@click.option(
    "--costs", "costs_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="cost profile JSON (from kvscope calibrate); default: the fit to the seed table",
)
@kv_events_options
def command(
    host: str, port: int, gpu_tokens: int, cpu_gb: float, no_cpu_tier: bool, model: str,
    served_model_name: tuple[str, ...], speed: float,
    block_size: int, chunk_size: int, max_model_len: int | None, max_num_batched_tokens: int, max_num_seqs: int,
    enable_prompt_tokens_details: bool,
    costs_file: Path | None, kv_events: str | None, kv_events_replay: str | None, kv_events_topic: str,
) -> None:
    """Serve vLLM's OpenAI API (/v1/models, /v1/completions, /v1/chat/completions, /tokenize, /detokenize,
    /health, /ping, /version, /metrics) like vLLM (with LMCache unless --no-cpu-tier), with TTFTs from the
    cost model.

    \b
    Requests are batched as vLLM batches them: vLLM's scheduler (FCFS, chunked
    prefill, --max-num-batched-tokens, --max-num-seqs) runs step after step,
    each step taking its modelled time / --speed, and a token leaves when the
    step that sampled it ends: the first when the prompt's prefill is done,
    the rest one per decode step. A request joins the first step after its
    arrival; the emulator's own processing does not add to its TTFT. A client
    that disconnects aborts its request.
    A prompt is one token per whitespace-separated word; chat messages are
    rendered with ChatML (<|im_start|>role ... <|im_end|>)."""
    try:
        config = EmulatorConfig(
            gpu_tokens=gpu_tokens, cpu_gb=None if no_cpu_tier else cpu_gb, model=model, speed=speed,
            served_model_name=served_model_name or None,
            block_size=block_size, chunk_size=chunk_size, max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
            prompt_tokens_details=enable_prompt_tokens_details,
            costs=load_costs(costs_file) if costs_file is not None else None,
        )
    except ValidationError as exc:
        raise click.UsageError(_describe(exc)) from None
    app = make_emulator_app(config)
    sock = listen(host, port)  # before the banner: a port in use says so, naming --port
    cpu = "no CPU tier" if config.cpu_tokens is None else f"CPU {config.cpu_gb:g} GiB = {config.cpu_tokens:,} tokens"
    click.echo(
        f"kvscope emulator for {config.model}: GPU {config.gpu_tokens:,} tokens ({config.num_gpu_blocks:,} blocks of "
        f"{config.block_size}), {cpu}, steps of up to {config.max_num_batched_tokens:,} tokens and "
        f"{config.max_num_seqs:,} requests, speed x{config.speed:g}, on {bound_url(host, sock)}",
        err=True,
    )
    publish_kv_events(app.state.backend, kv_events, kv_events_replay, kv_events_topic)
    # uvicorn's fast stack (uvloop and httptools where installed, as kvscope serve): a 2.5 ms first-token deadline
    # at --speed 20 leaves little room for parsing. Deadlines are kept by app.emulator.deadline, not the loop's timers.
    uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)).run(sockets=[sock])


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        flag = _FLAGS.get(field, "--" + field.replace("_", "-") if field else "emulator")
        lines.append(f"{flag}: {err['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)
