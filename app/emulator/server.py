"""The emulator's HTTP API: the part of vLLM's OpenAI-compatible server that live mode, benchmarks and dashboards use.

``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions`` (streamed or
not, batches of prompts, ``n``, ``echo``, ``logprobs``, ``stop``),
``/tokenize``, ``/detokenize``, ``/health``, ``/ping``, ``/version`` and
``/metrics`` answer as vLLM 0.33 does, errors included: 400 with vLLM's error
body for a bad request (not FastAPI's 422), and the same body for an unknown
route. ``/kvscope/emulator`` is the emulator's own: its settings, its
counters, its recent requests and its step ledger, so that live mode can size
its shadow simulation and tests can compare ``/metrics`` with what the engine did.
Timing is ``backend``'s: vLLM's scheduler steps on the wall clock, tokens sent as their steps end.
"""

from __future__ import annotations

import time
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from app.emulator import prometheus
from app.emulator.backend import Backend
from app.emulator.config import EmulatorConfig
from app.emulator.disconnect import ClientLeft, unless_client_leaves
from app.emulator.protocol import (
    ApiError,
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
    invalid,
)
from app.emulator.replies import Job, Reply, Shape
from app.emulator.text import Vocabulary, generate, render_chat

# The vLLM release whose OpenAI server the emulator follows; /version reports it, beside the emulator's name.
VLLM_API_VERSION = "0.33.0"
_ARRIVED_KEY = "kvscope.arrived"
# vllm/entrypoints/serve/exception_handling/handlers/validation.py: at most 10 errors are listed.
_MAX_REPORTED_ERRORS = 10


class _ArrivalStamp:
    """Notes when a request arrived, before its body is read and parsed: TTFT counts from there."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[_ARRIVED_KEY] = time.perf_counter()
        await self.app(scope, receive, send)


def make_emulator_app(config: EmulatorConfig) -> FastAPI:
    backend = Backend(config)
    vocabulary = Vocabulary()
    started = int(time.time())
    names = config.served_names
    app = FastAPI(title="kvscope emulator", summary="A vLLM-compatible server backed by the kvscope simulator.")
    app.state.backend = backend
    app.add_middleware(_ArrivalStamp)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:
        # serve/exception_handling/handlers/http.py: the status phrase as the type. vLLM registers that handler
        # for fastapi.HTTPException (register.py), which the router's own 404/405 (Starlette's HTTPException) is
        # not, so a real vLLM may still answer an unknown route with FastAPI's {"detail": ...}; the emulator
        # answers every HTTP error in vLLM's error shape.
        return ApiError(exc.status_code, str(exc.detail), HTTPStatus(exc.status_code).phrase).response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # handlers/validation.py: "N validation error(s):" then one line per error; param from the first.
        errors = exc.errors()
        label = "error" if len(errors) == 1 else "errors"
        lines = [
            f"  {'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in errors[:_MAX_REPORTED_ERRORS]
        ]
        param = ".".join(str(p) for p in errors[0]["loc"]) if errors and errors[0].get("loc") else None
        message = f"{len(errors)} validation {label}:\n" + "\n".join(lines)
        return ApiError(400, message, "Bad Request", param).response()

    def check_model(name: str | None) -> None:
        # serve/engine/serving.py _check_model.
        if name and name not in names:
            raise ApiError(404, f"The model `{name}` does not exist. Valid aliases: {', '.join(names)}.", "NotFoundError", "model")

    def output_budget(tokens: list[int], requested: int | None, param: str) -> int:
        """vLLM's limits, in its order: renderers/params.py (output, then prompt, against max_model_len), then
        serve/utils/api_utils.py get_max_tokens (the output clamped to what the context leaves), then
        sampling_params.py (at least one token)."""
        context = config.context_tokens
        if requested is not None and requested > context:
            raise invalid(
                f"{param}={requested} cannot be greater than max_model_len={context}. Please request fewer output tokens.",
                param,
            )
        if len(tokens) > context:
            raise invalid(
                f"This model's maximum context length is {context} tokens. However, your prompt contains "
                f"{len(tokens)} input tokens, which exceeds this limit even without any output tokens. "
                "Please reduce the length of the input prompt.",
                "input_tokens",
            )
        budget = context - len(tokens) if requested is None else min(requested, context - len(tokens))
        if budget < 1:
            raise invalid(f"max_tokens must be at least 1, got {budget}.", "max_tokens")
        return budget

    def shape(body: CompletionRequest | ChatCompletionRequest, chat: bool) -> Shape:
        return Shape(chat, names[0], body.n, body.wanted_logprobs, body.include_usage, config.prompt_tokens_details)

    async def remember_words() -> None:
        vocabulary.remember()  # on the event loop: a plain function would run on a thread, beside the next request

    async def answer(reply: Reply, streamed: bool, request: Request) -> Response:
        # The prompt's words are remembered for /detokenize once the answer is sent, outside its deadlines.
        after = BackgroundTask(remember_words)
        if streamed:  # a client that leaves closes the stream's generator (Starlette), which releases its request
            return StreamingResponse(reply.stream(), media_type="text/event-stream", background=after)
        try:
            return JSONResponse(await unless_client_leaves(reply.whole(), request), background=after)
        except ClientLeft:
            return Response()  # as vLLM: nobody reads it

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.api_route("/ping", methods=["GET", "POST"])
    async def ping() -> Response:
        # serve/sagemaker/api_router.py: /ping answers as /health does.
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": VLLM_API_VERSION, "emulator": "kvscope"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        cards = [
            {
                "id": name, "object": "model", "created": started, "owned_by": "vllm", "root": config.model,
                "parent": None, "max_model_len": config.context_tokens, "permission": [],
            }
            for name in names
        ]
        return {"object": "list", "data": cards}

    @app.post("/tokenize")
    async def tokenize_prompt(body: TokenizeRequest) -> dict[str, Any]:
        check_model(body.model)
        if body.messages is not None:
            text = render_chat(body.messages, body.add_generation_prompt)
        elif body.prompt is not None:
            text = body.prompt
        else:
            raise invalid("Either prompt or messages must be provided.", "prompt")
        tokens = await vocabulary.tokenize_aside(text)
        return {
            "count": len(tokens),
            "max_model_len": config.context_tokens,
            "tokens": tokens,
            "token_strs": text.split() if body.return_token_strs else None,
        }

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict[str, Any]:
        check_model(body.model)
        return {"prompt": vocabulary.detokenize(body.tokens)}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(prometheus.render(backend), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/kvscope/emulator")
    async def emulator_info() -> dict[str, Any]:
        return {**backend.info(), "served_model_names": list(names)}

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> Any:
        arrived: float = request.scope.get(_ARRIVED_KEY, time.perf_counter())
        check_model(body.model)
        body.check()
        jobs = []
        for prompt in body.prompts():
            tokens = await vocabulary.tokenize_aside(prompt) if isinstance(prompt, str) else list(prompt)
            if not tokens:
                raise invalid("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
            budget = output_budget(tokens, body.max_tokens, "max_tokens")
            echo = "" if not body.echo else prompt if isinstance(prompt, str) else vocabulary.detokenize(tokens)
            jobs.append(Job(tokens, echo, generate(budget, body.stop_strings, body.include_stop_str_in_output)))
        reply = Reply(backend, shape(body, chat=False), jobs, arrived)
        return await answer(reply, body.stream, request)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
        arrived: float = request.scope.get(_ARRIVED_KEY, time.perf_counter())
        check_model(body.model)
        body.check()
        text = render_chat(body.messages, body.add_generation_prompt, body.continue_final_message)
        tokens = await vocabulary.tokenize_aside(text)
        requested, param = body.output_limit
        budget = output_budget(tokens, requested, param)
        # chat_completion/serving.py: echo repeats the last message when its role is the answer's role.
        role = "assistant" if body.add_generation_prompt else body.messages[-1].role
        last = body.messages[-1]
        echo = last.text if body.echo and last.role == role else ""
        job = Job(tokens, echo, generate(budget, body.stop_strings, body.include_stop_str_in_output))
        reply = Reply(backend, shape(body, chat=True), [job], arrived)
        return await answer(reply, body.stream, request)

    return app
