"""The emulator through the official ``openai`` client and vLLM's edges, over real uvicorn on loopback.

Every expectation cites where vLLM 0.33 (``vllm/`` in its wheel) defines the
behaviour. The emulator's tokenizer counts one token per whitespace-separated
word; chat messages are rendered with ChatML, so one user message of W words
is W + 2 tokens (``<|im_start|>user``, the words, ``<|im_start|>assistant``;
``<|im_end|>`` sticks to the last word).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest

from live_servers import emulator, run_async

MODEL = "qwen2.5-1.5b"
ALIAS = "Qwen/Qwen2.5-1.5B-Instruct"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    # 640 GPU tokens: 40 blocks of 16, one the null block, so max_model_len = 39 x 16 = 624.
    with emulator(
        "--gpu-tokens", "640", "--speed", "200", "--enable-prompt-tokens-details",
        "--served-model-name", ALIAS, "--served-model-name", MODEL,
    ) as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-none", max_retries=0)


def words(tag: str, count: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=30)


# -- the official client -----------------------------------------------------------


def test_chat_completion_through_the_openai_client_reports_usage_and_cached_tokens(client: openai.OpenAI) -> None:
    # 300 words -> 302 prompt tokens. The second identical request finds the first's full blocks on the GPU:
    # 302 tokens = 18 full blocks (288 tokens) + 14; all 18 hit (vLLM never hits the last token, 288 < 302).
    messages = [{"role": "user", "content": words("chat", 300)}]
    first = client.chat.completions.create(model=ALIAS, messages=messages, max_tokens=5)
    again = client.chat.completions.create(model=ALIAS, messages=messages, max_tokens=5)
    assert first.object == "chat.completion" and first.model == ALIAS
    assert first.choices[0].message.role == "assistant" and first.choices[0].message.content
    assert first.choices[0].finish_reason == "length"
    assert (first.usage.prompt_tokens, first.usage.completion_tokens, first.usage.total_tokens) == (302, 5, 307)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert again.usage.prompt_tokens_details.cached_tokens == 288


def test_streamed_chat_sends_the_role_first_then_content_then_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "a b c"}], max_tokens=3, stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    # chat_completion/serving.py: the first chunk has role "assistant" and empty content.
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    content = [c.choices[0].delta.content for c in chunks[1:] if c.choices]
    assert len(content) == 3 and all(content)
    assert [c.choices[0].finish_reason for c in chunks[1:] if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 3 + 2
    assert all(c.object == "chat.completion.chunk" and c.model == ALIAS for c in chunks)


def test_completions_through_the_openai_client_streamed_and_not(client: openai.OpenAI) -> None:
    whole = client.completions.create(model=MODEL, prompt=words("cmp", 40), max_tokens=4, temperature=0.0)
    assert whole.object == "text_completion" and whole.choices[0].text and whole.usage.prompt_tokens == 40
    pieces = [
        c for c in client.completions.create(
            model=MODEL, prompt=words("cmp", 40), max_tokens=4, stream=True, stream_options={"include_usage": True},
        )
    ]
    assert "".join(c.choices[0].text for c in pieces if c.choices) == whole.choices[0].text
    # 40 tokens = 2 full blocks (32 tokens) cached by the first request.
    assert pieces[-1].usage.prompt_tokens_details.cached_tokens == 32


def test_concurrent_openai_streams_share_the_engines_steps() -> None:
    # Two streamed chats through openai's AsyncOpenAI at once, 200 words each (202 tokens with the template), 40
    # tokens each, at speed 1: the first is prefilled in a step (~45 ms) and decodes for 39 more (~23 ms each,
    # ~0.9 s), so the second, sent at the same time, arrives while it runs, is prefilled in one of its steps and
    # from then on both decode in the same steps, as vLLM batches them. Each stream gets its 40 tokens.
    import asyncio

    async def chat(client: openai.AsyncOpenAI, tag: str) -> list[str]:
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": words(tag, 200)}], max_tokens=40, stream=True,
        )
        return [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]

    async def both(base: str) -> list[list[str]]:
        async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="sk-none", max_retries=0) as client:
            return list(await asyncio.gather(chat(client, "p"), chat(client, "q")))

    with emulator("--no-cpu-tier") as base:
        answers = run_async(both(base))
        steps = httpx.get(base + "/kvscope/emulator", timeout=10).json()["steps"]
    assert [len([c for c in a if c]) for a in answers] == [40, 40]
    assert any(len(s["scheduled"]) == 2 for s in steps), steps  # steps scheduling both requests
    assert sum(len(s["scheduled"]) for s in steps) == 2 * 40  # each request in 40 steps: its prefill, 39 decodes


def test_an_unknown_model_is_a_not_found_error_naming_the_aliases(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="other", prompt="x", max_tokens=1)
    # serve/engine/serving.py _check_model.
    assert caught.value.body["message"] == f"The model `other` does not exist. Valid aliases: {ALIAS}, {MODEL}."


# -- vLLM's edges, over HTTP -------------------------------------------------------------


def test_max_tokens_may_reach_the_context_length_and_null_means_the_default(url: str) -> None:
    # renderers/params.py allows max_tokens up to max_model_len (624); serve/utils/api_utils.py get_max_tokens
    # then clamps it to what the prompt leaves: 624 - 4 = 620 tokens generated.
    answer = post(url, "/v1/completions", {"prompt": "w x y z", "max_tokens": 624}).json()
    assert answer["usage"]["completion_tokens"] == 620 and answer["choices"][0]["finish_reason"] == "length"
    # completion/protocol.py normalize_null_max_tokens: null is the default, 16.
    answer = post(url, "/v1/completions", {"prompt": "w x y z", "max_tokens": None}).json()
    assert answer["usage"]["completion_tokens"] == 16


def test_batch_prompts_get_one_choice_each_and_summed_usage(url: str) -> None:
    answer = post(url, "/v1/completions", {"prompt": ["a b", "c d e"], "max_tokens": 2}).json()
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    assert answer["usage"]["prompt_tokens"] == 5 and answer["usage"]["completion_tokens"] == 4
    answer = post(url, "/v1/completions", {"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 1, "n": 2}).json()
    # Choice index = prompt x n + choice (completion/serving.py): 4 choices, 3 + 2 prompt tokens, 4 x 1 generated.
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2, 3]
    assert answer["usage"]["prompt_tokens"] == 5 and answer["usage"]["completion_tokens"] == 4


def test_echo_logprobs_and_stop_shape_the_answer(url: str) -> None:
    answer = post(url, "/v1/completions", {"prompt": "say this", "max_tokens": 3, "echo": True}).json()
    assert answer["choices"][0]["text"].startswith("say this ")
    answer = post(url, "/v1/completions", {"prompt": "p", "max_tokens": 3, "logprobs": 1}).json()
    logprobs = answer["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == 3 and logprobs["token_logprobs"] == [0.0, 0.0, 0.0]
    assert "".join(logprobs["tokens"]) == answer["choices"][0]["text"]
    # A stop string ends the text before it, finish_reason "stop", stop_reason the string (vLLM's detokenizer).
    answer = post(url, "/v1/completions", {"prompt": "p", "max_tokens": 50, "stop": ["prefix"]}).json()
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == "prefix"
    assert "prefix" not in choice["text"] and choice["text"]


def test_detokenize_version_ping_and_tokenize_of_messages(url: str) -> None:
    ids = post(url, "/tokenize", {"prompt": "hello emulated world"}).json()["tokens"]
    assert post(url, "/detokenize", {"tokens": ids}).json() == {"prompt": "hello emulated world"}
    assert httpx.get(url + "/version").json()["version"]
    assert httpx.get(url + "/ping").status_code == 200 and httpx.post(url + "/ping").status_code == 200
    counted = post(url, "/tokenize", {"messages": [{"role": "user", "content": "one two three"}]}).json()
    assert counted["count"] == 3 + 2


@pytest.mark.parametrize(
    ("path", "body", "message", "param"),
    [
        # sampling_params.py _verify_args.
        ("/v1/completions", {"prompt": "x", "temperature": -1}, "temperature must be non-negative, got -1.0.", "temperature"),
        ("/v1/completions", {"prompt": "x", "temperature": 2.5}, "temperature must be in [0, 2], got 2.5.", "temperature"),
        ("/v1/completions", {"prompt": "x", "n": 0}, "n must be at least 1, got 0.", None),
        ("/v1/completions", {"prompt": "x", "n": 2, "temperature": 0}, "n must be 1 when using greedy sampling, got 2.", None),
        ("/v1/completions", {"prompt": "x", "stop": [""]}, "stop cannot contain an empty string.", None),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens must be at least 1, got 0.", "max_tokens"),
        # completion/protocol.py validators.
        ("/v1/completions", {"prompt": ""}, "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"),
        ("/v1/completions", {"prompt": "x", "logprobs": -2}, "`logprobs` must be a positive value or -1.", "logprobs"),
        # renderers/params.py: output over the context, then a prompt over it.
        (
            "/v1/completions", {"prompt": "x", "max_tokens": 625},
            "max_tokens=625 cannot be greater than max_model_len=624. Please request fewer output tokens.", "max_tokens",
        ),
        (
            "/v1/completions", {"prompt": words("w", 700)},
            "This model's maximum context length is 624 tokens. However, your prompt contains 700 input tokens, "
            "which exceeds this limit even without any output tokens. Please reduce the length of the input prompt.",
            "input_tokens",
        ),
        (
            "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 700},
            "max_completion_tokens=700 cannot be greater than max_model_len=624. Please request fewer output tokens.",
            "max_completion_tokens",
        ),
        # chat_completion/protocol.py check_logprobs.
        (
            "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
            "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs",
        ),
    ],
)
def test_bad_requests_are_refused_with_vllm_messages(url: str, path: str, body: dict, message: str, param: str | None) -> None:
    answer = post(url, path, body)
    assert answer.status_code == 400
    assert answer.json() == {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}


def test_unknown_routes_answer_in_vllm_error_shape(url: str) -> None:
    # serve/exception_handling/handlers/http.py: the status phrase is the type.
    answer = httpx.get(url + "/v1/no-such-route")
    assert answer.status_code == 404
    assert answer.json() == {"error": {"message": "Not Found", "type": "Not Found", "param": None, "code": 404}}


def test_a_streamed_chat_with_echo_sends_the_last_message_after_the_role(url: str) -> None:
    body = {
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "partial answer"}],
        "add_generation_prompt": False, "continue_final_message": True, "echo": True, "max_tokens": 2, "stream": True,
    }
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as response:
        data = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    deltas = [d["choices"][0]["delta"] for d in data]
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[1] == {"content": "partial answer"}
    assert len(deltas) == 4


def test_metrics_are_labelled_with_the_served_model_name(url: str) -> None:
    from app.live import prom

    samples = prom.parse(httpx.get(url + "/metrics").text)
    queries = [s for s in samples if s.name == "vllm:prefix_cache_queries_total"]
    assert [s.labels["model_name"] for s in queries] == [ALIAS]


# -- clients that leave ------------------------------------------------------------


def _running(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:num_requests_running"))


def _until(predicate: Callable[[], bool], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_client_that_leaves_cancels_its_request(streamed: bool) -> None:
    # vLLM cancels a request whose client disconnected: a whole answer's handler runs beside a task that waits for
    # the ASGI http.disconnect and is cancelled when it comes (vllm/entrypoints/serve/utils/api_utils.py:53-65
    # listen_for_disconnect, 68-110 with_cancellation, on completion/api_router.py:50 and chat_completion/
    # api_router.py:57); a stream is Starlette's StreamingResponse (completion/api_router.py:74-77), which does the
    # same for its generator; the engine then aborts it (vllm/v1/engine/async_llm.py:807-811).
    # Without max_tokens a chat may generate all that the context leaves: the default 21,520-token GPU is 1,345
    # blocks, 1,344 usable, so max_model_len is 21,504, and a 7-token prompt leaves 21,497 tokens, one per decode
    # step of the cost model's ~23 ms fixed cost: about 8 minutes of decode. Here the client leaves a moment after the request is running; the request must be
    # gone from vllm:num_requests_running within a few seconds (the step it was in ends, then it is aborted).
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "one two three"}], "stream": streamed})
    with emulator() as base:
        host, port = base.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=10)
        try:
            sock.sendall(
                f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n{body}".encode()
            )
            assert _until(lambda: _running(base) == 1, within_s=5)
            if streamed:  # the stream has begun: its first tokens came (the headers may come in a packet of their own)
                seen = b""
                while b"data:" not in seen:
                    chunk = sock.recv(65_536)
                    assert chunk, "the stream closed before its first token"
                    seen += chunk
        finally:
            sock.close()
        assert _until(lambda: _running(base) == 0, within_s=3), "the request runs on for a client that left"
