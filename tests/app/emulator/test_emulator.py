"""``kvscope emulate``: the vLLM API it serves, over real uvicorn on loopback, and the counters behind ``/metrics``.

The golden scenario used below, on a 640-token GPU (40 blocks of 16, one the
null block: 39 usable) with 256-token chunks:

- prompt A and prompt B are 600 distinct words = 600 tokens each: 37 full
  blocks + 1 partial block = 38 blocks; 2 full chunks (512 tokens).
- A runs: it takes blocks 1..38, leaving block 39 free. Freed in vLLM's order,
  the queue is [38 (A's partial block, no hash: front), 39, A's full blocks
  tail first: 37, 36, ..., 1 (A's head block)].
- B runs: it pops 38 blocks from the front: 38, 39 and 37..2, evicting all of
  A's full blocks but its head (block 1).
- A again: the GPU hits its head block only: 16 tokens. Its two chunks are in
  CPU: the chunk-aligned hit is 512 tokens, of which 512 - 16 = 496 are loaded
  from CPU; 600 - 512 = 88 are computed. vLLM asks its connector about the
  600 - 16 = 584 tokens the GPU did not have.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from live_servers import ROOT, emulator, run_kvscope

from app.live import prom

MODEL = "qwen2.5-1.5b"
WORDS_A = " ".join(f"alpha{i}" for i in range(600))
WORDS_B = " ".join(f"beta{i}" for i in range(600))


@pytest.fixture(scope="module")
def small_cpu() -> Iterator[str]:
    with emulator("--gpu-tokens", "640", "--speed", "200", "--enable-prompt-tokens-details") as url:
        yield url


@pytest.fixture(scope="module")
def small_gpu_only() -> Iterator[str]:
    with emulator("--gpu-tokens", "640", "--speed", "200", "--no-cpu-tier") as url:
        yield url


def complete(url: str, prompt: str, **extra: object) -> httpx.Response:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 3, **extra}
    return httpx.post(url + "/v1/completions", json=body, timeout=30)


def metrics(url: str) -> prom.CacheCounters:
    return prom.CacheCounters.read(prom.parse(httpx.get(url + "/metrics", timeout=10).text))


def emulator_state(url: str) -> dict:
    return httpx.get(url + "/kvscope/emulator", timeout=10).json()


# -- the tokenizer and keys -----------------------------------------------------


def test_tokenizer_ids_do_not_depend_on_the_process_hash_seed() -> None:
    # Python's str hash changes with PYTHONHASHSEED; the tokenizer must not.
    code = "from sim.blocks.prompt_keys import tokenize; print(tokenize('the same words give the same ids'))"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
    ids = json.loads(outputs.pop())
    assert len(ids) == 7 and ids[1] == ids[5]  # one id per word; "same" twice


def test_prompt_keys_share_exactly_the_common_full_blocks() -> None:
    from sim.blocks.prompt_keys import request_for_tokens, tokenize
    from sim.blocks.request import Units

    # 40 common words then different tails: blocks 0 and 1 (tokens 0-31) are equal, block 2 (32-47)
    # holds words 40+ and differs; a prompt of 50 tokens has 3 full blocks and no full 256-token chunk.
    common = " ".join(f"w{i}" for i in range(40))
    a = request_for_tokens(tokenize(common + " " + " ".join(f"a{i}" for i in range(10))), Units(16, 256))
    b = request_for_tokens(tokenize(common + " " + " ".join(f"b{i}" for i in range(10))), Units(16, 256))
    assert a.prompt_tokens == b.prompt_tokens == 50
    assert a.block_keys[:2] == b.block_keys[:2] and a.block_keys[2] != b.block_keys[2]
    assert len(a.block_keys) == 3 and a.alloc_blocks == 4 and a.max_hit_blocks == 3
    assert a.chunk_keys == []


@pytest.mark.parametrize("unit", [1, 5, 16])
def test_prompt_keys_built_a_unit_at_a_time_are_the_chain_keys_of_its_tokens(unit: int) -> None:
    import random

    from sim.blocks.hashing import chain_keys, token_unit_keys

    # chain_keys walks the prompt token by token as one-token segments; token_unit_keys must give the same keys
    # (the emulator's cache and its KV events depend on them), for prompts ending inside a unit, on its
    # boundary, and shorter than one unit (no full unit: no key).
    rng = random.Random(unit)
    for n in [0, 1, unit - 1, unit, unit + 1, 3 * unit, 3 * unit + 2, 101]:
        tokens = [rng.randrange(151_936) for _ in range(n)]
        assert token_unit_keys(tokens, unit) == chain_keys([(t, 1) for t in tokens], unit)[0], n


# -- the API ------------------------------------------------------------------------


def test_models_and_cache_config_report_the_emulated_gpu(small_cpu: str) -> None:
    models = httpx.get(small_cpu + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert models["data"][0]["max_model_len"] == 39 * 16  # every block but the null block
    labels = prom.info_labels(prom.parse(httpx.get(small_cpu + "/metrics").text))
    assert labels is not None
    assert (labels["block_size"], labels["num_gpu_blocks"]) == ("16", "40")
    # The CPU tier as vLLM labels KV offloading (vllm/config/cache.py kv_offloading_size / _backend).
    assert (labels["kv_offloading_size"], labels["kv_offloading_backend"]) == ("1.5", "lmcache")


def test_without_a_cpu_tier_the_cache_config_reports_no_offloading(small_gpu_only: str) -> None:
    labels = prom.info_labels(prom.parse(httpx.get(small_gpu_only + "/metrics").text))
    assert labels is not None and (labels["kv_offloading_size"], labels["kv_offloading_backend"]) == ("None", "native")
    assert prom.Offload.read(labels).configured is None


def test_tokenize_counts_one_token_per_word(small_cpu: str) -> None:
    answer = httpx.post(small_cpu + "/tokenize", json={"model": MODEL, "prompt": "  three\twords\nhere "}).json()
    assert answer["count"] == 3 and len(answer["tokens"]) == 3


def test_streamed_completion_has_vllm_chunks_usage_and_done(small_cpu: str) -> None:
    body = {"model": MODEL, "prompt": "a b c d e", "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", small_cpu + "/v1/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        data = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"]]
    assert len(texts) == 4 and all(texts)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]] == [None, None, None, "length"]
    usage = chunks[-1]
    assert usage["choices"] == []
    assert usage["usage"]["prompt_tokens"] == 5 and usage["usage"]["completion_tokens"] == 4
    assert all(c["object"] == "text_completion" and c["model"] == MODEL for c in chunks)


def test_plain_completion_reports_usage(small_cpu: str) -> None:
    answer = complete(small_cpu, "one two three")
    assert answer.status_code == 200
    data = answer.json()
    assert data["usage"]["prompt_tokens"] == 3 and data["usage"]["total_tokens"] == 6
    assert data["choices"][0]["finish_reason"] == "length" and data["choices"][0]["text"]


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"model": "other-model", "prompt": "x"}, 404, "does not exist"),
        ({"model": MODEL, "prompt": ""}, 400, "empty"),
        ({"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ({"model": MODEL, "prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream=True"),
        ({"model": MODEL, "prompt": " ".join(["w"] * 700)}, 400, "maximum context length is 624"),
        ({"model": MODEL}, 400, "prompt"),
    ],
)
def test_bad_requests_get_vllm_style_errors(small_cpu: str, body: dict, status: int, fragment: str) -> None:
    answer = httpx.post(small_cpu + "/v1/completions", json=body, timeout=30)
    assert answer.status_code == status
    assert fragment in answer.json()["error"]["message"]


# -- cache behaviour and counters ---------------------------------------------------


def _golden(url: str) -> tuple[prom.CacheCounters, dict]:
    """Run A, B, A (see the module docstring); the counters' change over the second A, and its record."""
    for prompt in (WORDS_A, WORDS_B):
        assert complete(url, prompt).status_code == 200
    before = metrics(url)
    answer = complete(url, WORDS_A)
    assert answer.status_code == 200
    return metrics(url).delta(before), answer.json()


def test_a_re_read_after_eviction_hits_the_head_block_on_gpu_and_the_rest_from_cpu(small_cpu: str) -> None:
    moved, answer = _golden(small_cpu)
    assert (moved.gpu_queries, moved.gpu_hits) == (600, 16)
    assert (moved.external_queries, moved.external_hits) == (584, 496)
    assert answer["usage"]["prompt_tokens_details"] == {"cached_tokens": 16 + 496}
    last = emulator_state(small_cpu)["requests"][-1]
    assert (last["gpu_hit_tokens"], last["cpu_hit_tokens"], last["computed_tokens"]) == (16, 496, 88)


def test_without_a_cpu_tier_the_re_read_computes_all_but_the_head_block(small_gpu_only: str) -> None:
    moved, answer = _golden(small_gpu_only)
    assert (moved.gpu_queries, moved.gpu_hits) == (600, 16)
    # vLLM without a KV connector exports the external counters all the same (vllm/v1/metrics/loggers.py
    # creates them unconditionally): they stay 0. No prompt details unless asked for.
    assert moved.external_queries == 0 and moved.external_hits == 0
    assert answer["usage"]["prompt_tokens_details"] is None
    last = emulator_state(small_gpu_only)["requests"][-1]
    assert (last["gpu_hit_tokens"], last["cpu_hit_tokens"], last["computed_tokens"]) == (16, 0, 584)


def test_metrics_equal_the_emulator_internal_counters(small_cpu: str) -> None:
    complete(small_cpu, "some words to count")
    state = emulator_state(small_cpu)
    counters = metrics(small_cpu)
    internal = state["counters"]
    assert counters.gpu_queries == internal["prefix_cache_queries"]
    assert counters.gpu_hits == internal["prefix_cache_hits"]
    assert counters.external_queries == internal["external_prefix_cache_queries"]
    assert counters.external_hits == internal["external_prefix_cache_hits"]
    # And the counters are the sums of the per-request records (none dropped at this size).
    records = state["requests"]
    assert internal["prefix_cache_queries"] == sum(r["prompt_tokens"] for r in records)
    assert internal["external_prefix_cache_hits"] == sum(r["cpu_hit_tokens"] for r in records)


def test_ttft_histogram_counts_every_finished_request(small_cpu: str) -> None:
    complete(small_cpu, "count me")
    samples = prom.parse(httpx.get(small_cpu + "/metrics").text)
    count = prom.total(samples, ("vllm:time_to_first_token_seconds_count",))
    inf = [s.value for s in samples if s.name == "vllm:time_to_first_token_seconds_bucket" and s.labels["le"] == "+Inf"]
    assert count == emulator_state(small_cpu)["counters"]["requests"] == inf[0]


def test_delay_is_the_cost_model_ttft_divided_by_speed(small_cpu: str) -> None:
    complete(small_cpu, "a short prompt")
    last = emulator_state(small_cpu)["requests"][-1]
    assert last["delay_ms"] == pytest.approx(last["ttft_ms"] / 200, abs=0.001)


# -- the command line ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--gpu-tokens", "10"], "--gpu-tokens"),
        (["--chunk-size", "250"], "multiple of block_size"),
        (["--speed", "0"], "--speed"),
        (["--max-model-len", "30000"], "larger than the GPU KV cache"),
        (["--model", "no-such-model"], "--model"),
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--max-num-batched-tokens", "64", "--max-num-seqs", "128"], "must be at least max_num_seqs"),
    ],
)
def test_bad_emulate_flags_exit_2_naming_the_problem(args: list[str], fragment: str) -> None:
    result = run_kvscope(["emulate", "--port", "1", *args], timeout_s=30)
    assert result.returncode == 2
    assert fragment in result.stderr


def test_help_says_requests_are_batched_as_vllm_batches_them() -> None:
    result = run_kvscope(["emulate", "--help"], timeout_s=30)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "Requests are batched as vLLM batches them" in text
    assert "--max-num-batched-tokens" in text and "--max-num-seqs" in text
    assert "A client that disconnects aborts its request." in text


def test_preemptions_are_counted_under_vllms_name(small_gpu_only: str) -> None:
    # vllm/v1/metrics/loggers.py 738-741: a counter vllm:num_preemptions, written with _total; the scheduler's
    # gauges are gauges.
    text = httpx.get(small_gpu_only + "/metrics").text
    assert "# TYPE vllm:num_preemptions_total counter" in text
    assert "# TYPE vllm:num_requests_running gauge" in text and "# TYPE vllm:num_requests_waiting gauge" in text
    # Two 200-token prompts arriving together to decode 300 tokens each, on the 39 usable blocks of a 640-token
    # GPU (in process, so that they surely overlap): both are admitted with ceil(200 / 16) = 13 blocks and need
    # ceil((200 + 300 - 1) / 16) = 32 by their end; growing a block per 16 tokens each, they run out at 39, and
    # vLLM's FCFS rule preempts the newer one (it resumes once the first is done). Each still gets its 300 tokens.
    from app.emulator import prometheus
    from app.emulator.backend import Backend
    from app.emulator.config import EmulatorConfig

    backend = Backend(EmulatorConfig(gpu_tokens=640, cpu_gb=None, speed=1000))

    async def both() -> list[int]:
        inbox: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
        now = time.perf_counter()
        for k in range(2):
            backend.submit(list(range(k * 1000, k * 1000 + 200)), 300, now, inbox, k)
        got = [0, 0]
        for _ in range(600):
            k, _step = await inbox.get()
            got[k] += 1
        return got

    assert asyncio.run(both()) == [300, 300]
    assert backend.counters.preemptions >= 1
    samples = prom.parse(prometheus.render(backend))
    assert prom.total(samples, ("vllm:num_preemptions_total",)) == backend.counters.preemptions
