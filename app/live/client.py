"""An async client for one vLLM server: what it serves, how big its GPU cache is, its tokenizer, its counters, TTFT.

Every failure becomes a ``TargetError`` whose message names the target, the
endpoint and what went wrong (refused, timed out, an HTTP error, not vLLM),
without the target's URL: messages reach the browser, URLs stay on the server.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from app.live import prom
from app.live.targets import Target

# After a request, vLLM's counters may lag its response by a logging step: poll this often, this long.
SETTLE_POLL_S = 0.02
SETTLE_TIMEOUT_S = 2.0


class TargetError(Exception):
    """A target failed; the message says which, where and why."""


@dataclass(slots=True)
class TargetInfo:
    """What a probe found: the model, the GPU cache's shape, and what the metrics allow."""

    name: str
    model: str
    max_model_len: int | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    has_counters: bool = False
    has_external_counters: bool = False
    offload: prom.Offload = field(default_factory=lambda: prom.Offload(None, None))
    emulator: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def capacity_tokens(self) -> int | None:
        """The GPU KV cache in tokens, as vLLM logs it: ``num_gpu_blocks x block_size``."""
        if self.block_size is None or self.num_gpu_blocks is None:
            return None
        return self.block_size * self.num_gpu_blocks

    @property
    def cpu_tier_label(self) -> str | None:
        """What the server says about its CPU tier: the emulator exactly, vLLM through its cache config labels."""
        if self.emulator is not None:
            gb = self.emulator.get("cpu_gb")
            return f"lmcache, {gb:g} GiB" if isinstance(gb, int | float) else "none"
        return self.offload.describe()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "healthy": True,
            "model": self.model,
            "max_model_len": self.max_model_len,
            "block_size": self.block_size,
            "num_gpu_blocks": self.num_gpu_blocks,
            "capacity_tokens": self.capacity_tokens,
            "metrics": self.has_counters,
            "external_metrics": self.has_external_counters,
            "cpu_tier": self.cpu_tier_label,
            "emulator": self.emulator is not None,
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True, slots=True)
class Completion:
    """One streamed completion: TTFT and what the usage chunk said."""

    ttft_ms: float
    started_at: str
    prompt_tokens: int | None
    cached_tokens: int | None
    sent_s: float = 0.0  # time.perf_counter() when its first byte was written: TTFT's start, overlaps' arrival times


class VllmClient:
    """One target's HTTP client; use as ``async with VllmClient(target) as client``."""

    def __init__(
        self, target: Target, timeout_s: float = 60.0, transport: httpx.AsyncBaseTransport | None = None,
        token: str | None = None,
    ) -> None:
        self.target = target
        self.timeout_s = timeout_s
        headers = {"user-agent": "kvscope-live"} | ({"authorization": f"Bearer {token}"} if token else {})
        self._http = httpx.AsyncClient(
            base_url=target.url, timeout=httpx.Timeout(timeout_s), transport=transport, follow_redirects=False,
            headers=headers,
        )

    async def __aenter__(self) -> VllmClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    def _fail(self, method: str, path: str, why: str) -> TargetError:
        return TargetError(f"target {self.target.name}: {method} {path}: {why}")

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            return await self._http.request(method, path, json=body)
        except httpx.TimeoutException:
            raise self._fail(method, path, f"no answer within {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise self._fail(method, path, _network_reason(exc)) from None

    async def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = await self._request(method, path, body)
        if response.status_code != 200:
            raise self._fail(method, path, f"HTTP {response.status_code}: {_error_message(response.text)}")
        try:
            return response.json()
        except ValueError:
            raise self._fail(method, path, "the answer is not JSON; is this a vLLM server?") from None

    # -- probing -----------------------------------------------------------

    async def probe(self) -> TargetInfo:
        """The served model, the GPU cache's size, and whether ``/metrics`` can attribute cache hits."""
        health = await self._request("GET", "/health")
        if health.status_code not in (200, 404):
            raise self._fail("GET", "/health", f"HTTP {health.status_code}: the server is not healthy")
        models = await self._json("GET", "/v1/models")
        try:
            card = models["data"][0]
            info = TargetInfo(self.target.name, str(card["id"]), _int(card.get("max_model_len")))
        except (KeyError, IndexError, TypeError):
            raise self._fail("GET", "/v1/models", "no model listed; is this an OpenAI-compatible server?") from None
        await self._probe_metrics(info)
        info.emulator = await self._emulator_info()
        return info

    async def _probe_metrics(self, info: TargetInfo) -> None:
        response = await self._request("GET", "/metrics")
        if response.status_code != 200:
            info.warnings.append(
                f"GET /metrics answered HTTP {response.status_code}: measuring TTFT only, without cache hits, "
                "and the shadow simulation uses the scenario's GPU size"
            )
            return
        samples = prom.parse(response.text)
        config = prom.info_labels(samples)
        if config is not None:
            info.block_size = _int(config.get("block_size"))
            info.num_gpu_blocks = _int(config.get("num_gpu_blocks"))
        info.offload = prom.Offload.read(config)
        if info.capacity_tokens is None:
            info.warnings.append(
                "/metrics has no vllm:cache_config_info with block_size and num_gpu_blocks: "
                "the shadow simulation uses the scenario's GPU size"
            )
        counters = prom.CacheCounters.read(samples)
        info.has_counters = counters.gpu_queries is not None and counters.gpu_hits is not None
        info.has_external_counters = counters.external_queries is not None and counters.external_hits is not None
        if not info.has_counters:
            info.warnings.append(
                "/metrics has no vllm:prefix_cache_queries/hits (nor the older gpu_prefix_cache_* names): "
                "measuring TTFT only, without cache hits"
            )

    async def _emulator_info(self) -> dict[str, Any] | None:
        """``kvscope emulate`` says what it emulates; a real vLLM answers 404."""
        try:
            response = await self._http.get("/kvscope/emulator")
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("emulator") == "kvscope" else None

    # -- requests ----------------------------------------------------------

    async def count_tokens(self, model: str, text: str) -> int:
        """Prompt tokens of ``text`` by the server's own tokenizer (``/tokenize``, special tokens included)."""
        data = await self._json("POST", "/tokenize", {"model": model, "prompt": text})
        count = _int(data.get("count")) if isinstance(data, dict) else None
        if count is None:
            raise self._fail("POST", "/tokenize", "the answer has no token count")
        return count

    async def token_ids(self, body: dict[str, Any]) -> list[int]:
        """The token ids of a prompt (``{"model", "prompt"}``) or a chat (``{"model", "messages"}``) by ``/tokenize``."""
        data = await self._json("POST", "/tokenize", body)
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            raise self._fail("POST", "/tokenize", "the answer has no token ids")
        return tokens

    async def counters(self) -> prom.CacheCounters:
        response = await self._request("GET", "/metrics")
        if response.status_code != 200:
            raise self._fail("GET", "/metrics", f"HTTP {response.status_code}")
        return prom.CacheCounters.read(prom.parse(response.text))

    async def counters_after(self, before: prom.CacheCounters, prompt_tokens: int) -> prom.CacheCounters:
        """The counters once they include a request of ``prompt_tokens`` (vLLM may publish them a step late)."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            after = await self.counters()
            moved = after.delta(before).gpu_queries
            if moved is None or moved >= prompt_tokens or time.monotonic() > deadline:
                return after
            await asyncio.sleep(SETTLE_POLL_S)

    async def complete(self, model: str, prompt: str, max_tokens: int) -> Completion:
        """Stream one completion; TTFT is from the request's last byte written to the read that brought its first
        non-empty token (see ``_FirstToken``)."""
        path = "/v1/completions"
        body = {
            "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True},
        }
        started_at = datetime.now(UTC).isoformat(timespec="milliseconds")
        first = _FirstToken()
        usage: dict[str, Any] | None = None
        try:
            async with self._http.stream(
                "POST", path, json=body, headers=_UNCOMPRESSED, extensions={"trace": first.trace}
            ) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode("utf-8", "replace")
                    raise self._fail("POST", path, f"HTTP {response.status_code}: {_error_message(text)}")
                done = False
                # Read to the end of the body, past [DONE] (vLLM ends the response right after it): a response left
                # unfinished closes its connection, and the next request would open a new one.
                async for read_at, line in _sse_lines(response):
                    if done or not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        continue
                    chunk = self._chunk(path, data)
                    if first.token_at is None and any((c or {}).get("text") for c in chunk.get("choices") or []):
                        first.token_at = read_at
                    if chunk.get("usage"):
                        usage = chunk["usage"]
        except httpx.TimeoutException:
            raise self._fail("POST", path, f"no answer within {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise self._fail("POST", path, _network_reason(exc)) from None
        if first.token_at is None:
            raise self._fail("POST", path, "the stream ended without a token")
        details = (usage or {}).get("prompt_tokens_details") or {}
        return Completion(
            round(first.ttft_ms(), 3), started_at, _int((usage or {}).get("prompt_tokens")), _int(details.get("cached_tokens")),
            first.sent_at,
        )

    def _chunk(self, path: str, data: str) -> dict[str, Any]:
        try:
            chunk = json.loads(data)
        except (json.JSONDecodeError, RecursionError):
            raise self._fail("POST", path, "a streamed chunk is not JSON; is this a vLLM server?") from None
        if not isinstance(chunk, dict):
            raise self._fail("POST", path, "a streamed chunk is not a JSON object")
        if "error" in chunk or chunk.get("object") == "error":
            raise self._fail("POST", path, f"the server reported an error mid-stream: {_error_message(data)}")
        return chunk


# A streamed answer is read as it arrives: nothing on the way may hold bytes back to compress them.
_UNCOMPRESSED = {"accept-encoding": "identity"}
# httpcore's trace event just before the request's first byte is written to a connected socket
# (httpcore/_async/http11.py handle_async_request: Trace("send_request_headers") around _send_request_headers,
# after the connection was taken from the pool or made; the prefix is "http11" or "http2").
_SENDING = ("http11.send_request_headers.started", "http2.send_request_headers.started")


class _FirstToken:
    """The two ends of a measured TTFT, both ``time.perf_counter()``.

    It starts just before the request's first byte is written to a connected
    socket (building and encoding the request, waiting for a connection and
    connecting are outside it, as they are outside a server's TTFT) and ends
    when the read that brought the first non-empty token returned, before
    that read is parsed. Not the last byte: the writes of a request's head
    and body are separate, other tasks may run between them, and a server
    (the emulator, vLLM's API server) may start its clock on the head, so
    the span would then be shorter than the server's. Transports that report
    no trace events (test fakes) start it just before the request is made.
    """

    __slots__ = ("sent_at", "token_at")

    def __init__(self) -> None:
        self.sent_at = time.perf_counter()
        self.token_at: float | None = None

    async def trace(self, event: str, _info: dict[str, Any]) -> None:
        if event in _SENDING:
            self.sent_at = time.perf_counter()

    def ttft_ms(self) -> float:
        assert self.token_at is not None
        return (self.token_at - self.sent_at) * 1000


async def _sse_lines(response: httpx.Response) -> AsyncIterator[tuple[float, str]]:
    """The stream's lines, each with the time the read that completed it returned (taken before any parsing)."""
    pending = ""
    async for piece in response.aiter_text():
        read_at = time.perf_counter()
        lines = (pending + piece).split("\n")
        pending = lines.pop()
        for line in lines:
            yield read_at, line.rstrip("\r")
    if pending:
        yield time.perf_counter(), pending.rstrip("\r")


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _network_reason(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "cannot connect (is the server up?)"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "the server closed the connection mid-answer"
    return f"{type(exc).__name__}: {exc}"


def _error_message(text: str) -> str:
    """The message of an OpenAI-style error body (``{"error": {"message"}}`` or vLLM's older flat one), shortened."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return text.strip()[:200] or "(empty body)"
    if isinstance(data, dict):
        inner = data.get("error")
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
        if data.get("message"):
            return str(data["message"])[:300]
        if data.get("detail"):
            return str(data["detail"])[:300]
    return text.strip()[:200]
