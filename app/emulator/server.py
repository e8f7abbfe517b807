"""The emulator's HTTP API: the part of vLLM's OpenAI-compatible server that live mode and a Grafana dashboard use.

``/v1/models``, ``/v1/completions`` (streamed or not), ``/tokenize``,
``/health`` and ``/metrics`` answer as vLLM does, errors included (vLLM
answers bad requests with 400 and an OpenAI-style error body, not 422).
``/kvscope/emulator`` is the emulator's own: its settings, its counters and
its recent prefills, so that live mode can size its shadow simulation and
tests can compare ``/metrics`` with what the engine did.

The first token is sent when the cost model's TTFT (divided by ``speed``) has
passed since the request arrived; the rest follow every
``DECODE_MS_PER_TOKEN / speed`` ms.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from app.emulator import prometheus
from app.emulator.backend import Backend, Prefill
from app.emulator.config import EmulatorConfig
from sim.prompt_keys import tokenize

# An assumption, not a measurement: the seed measured only TTFT. A 1.5B model on
# one GPU decodes a token in a few ms; the value only paces the rest of a stream.
DECODE_MS_PER_TOKEN = 5.0
MAX_COMPLETION_TOKENS = 4096
# The words an emulated completion is made of (it has no model to say anything).
_WORDS = ("the", "cached", "prefix", "is", "served", "from", "the", "tier", "that", "holds", "it")


_ARRIVED_KEY = "kvscope.arrived"


class _ArrivalStamp:
    """Notes when a request arrived, before its body is read and parsed: TTFT counts from there."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[_ARRIVED_KEY] = time.perf_counter()
        await self.app(scope, receive, send)


class StreamOptions(BaseModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class CompletionRequest(BaseModel):
    """The fields of an OpenAI completion request the emulator acts on; other fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str | list[int]
    max_tokens: int = Field(default=16, ge=1, le=MAX_COMPLETION_TOKENS)
    stream: bool = False
    stream_options: StreamOptions | None = None


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class ApiError(Exception):
    """An error answered in the OpenAI format vLLM uses."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}
        return JSONResponse(body, status_code=self.status)


def make_emulator_app(config: EmulatorConfig) -> FastAPI:
    backend = Backend(config)
    started = int(time.time())
    app = FastAPI(title="kvscope emulator", summary="A vLLM-compatible server backed by the kvscope simulator.")
    app.state.backend = backend
    app.add_middleware(_ArrivalStamp)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors()
        )
        return ApiError(400, problems).response()

    def check_model(name: str | None) -> None:
        if name is not None and name != config.model:
            raise ApiError(404, f"The model `{name}` does not exist.", "NotFoundError", "model")

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": config.model, "object": "model", "created": started, "owned_by": "vllm", "root": config.model,
            "parent": None, "max_model_len": config.context_tokens, "permission": [],
        }
        return {"object": "list", "data": [card]}

    @app.post("/tokenize")
    async def tokenize_prompt(body: TokenizeRequest) -> dict[str, Any]:
        check_model(body.model)
        tokens = tokenize(body.prompt)
        return {
            "count": len(tokens),
            "max_model_len": config.context_tokens,
            "tokens": tokens,
            "token_strs": body.prompt.split() if body.return_token_strs else None,
        }

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(prometheus.render(backend), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/kvscope/emulator")
    async def emulator_info() -> dict[str, Any]:
        return backend.info()

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> JSONResponse | StreamingResponse:
        arrived: float = request.scope.get(_ARRIVED_KEY, time.perf_counter())
        check_model(body.model)
        if body.stream_options is not None and not body.stream:
            raise ApiError(400, "Stream options can only be defined when `stream=True`.", param="stream_options")
        tokens = tokenize(body.prompt) if isinstance(body.prompt, str) else list(body.prompt)
        if not tokens:
            raise ApiError(400, "The prompt is empty.", param="prompt")
        if len(tokens) + body.max_tokens > config.context_tokens:
            raise ApiError(
                400,
                f"This model's maximum context length is {config.context_tokens} tokens. However, you requested "
                f"{len(tokens) + body.max_tokens} tokens ({len(tokens)} in the messages, {body.max_tokens} in the "
                "completion). Please reduce the length of the messages or completion.",
                param="prompt",
            )
        reply = _Reply(config, body)
        if body.stream:
            return StreamingResponse(reply.stream(backend, tokens, arrived), media_type="text/event-stream")
        prefill = await backend.prefill(tokens, arrived)
        try:
            await asyncio.sleep(reply.decode_s * (body.max_tokens - 1))
        except BaseException:
            backend.release(prefill)
            raise
        backend.finish(prefill, body.max_tokens)
        text = "".join(reply.word(i) for i in range(body.max_tokens))
        return JSONResponse(reply.body([reply.choice(text, "length")], reply.usage(prefill, body.max_tokens)))

    return app


class _Reply:
    """One completion's response chunks, in vLLM's shapes."""

    def __init__(self, config: EmulatorConfig, body: CompletionRequest) -> None:
        self.config = config
        self.request = body
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.decode_s = DECODE_MS_PER_TOKEN / config.speed / 1000

    @staticmethod
    def word(i: int) -> str:
        return " " + _WORDS[i % len(_WORDS)]

    @staticmethod
    def choice(text: str, finish_reason: str | None) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}

    def body(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "object": "text_completion", "created": self.created, "model": self.config.model,
            "choices": choices,
        }
        if usage is not None:
            out["usage"] = usage
        return out

    def usage(self, prefill: Prefill, completion_tokens: int) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": prefill.prompt_tokens,
            "total_tokens": prefill.prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
        }
        if self.config.prompt_tokens_details:
            usage["prompt_tokens_details"] = {"cached_tokens": prefill.cached_tokens}
        return usage

    async def stream(self, backend: Backend, tokens: list[int], arrived: float) -> AsyncIterator[str]:
        """Server-sent events: one chunk per token, the usage chunk if asked for, then ``[DONE]``."""
        prefill = await backend.prefill(tokens, arrived)
        wanted = self.request.max_tokens
        sent = 0
        try:
            for i in range(wanted):
                if i:
                    await asyncio.sleep(self.decode_s)
                finish = "length" if i == wanted - 1 else None
                yield _event(self.body([self.choice(self.word(i), finish)], None))
                sent += 1
            options = self.request.stream_options
            if options is not None and options.include_usage:
                yield _event(self.body([], self.usage(prefill, sent)))
            yield "data: [DONE]\n\n"
        finally:
            if sent == wanted:
                backend.finish(prefill, sent)
            else:
                backend.release(prefill)


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"
