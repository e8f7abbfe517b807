"""Completions and chat completions in vLLM's response shapes, streamed or whole, timed by the engine's steps.

A batch of prompts is one engine request per prompt, all entering the engine
at the request's arrival (``backend``); each prompt's ``n`` choices share its
request, as vLLM's parallel sampling shares the prompt's KV, and get each of
its tokens together. A token is sent when the step that sampled it ends: the
first when the prompt's prefill is done, the others one per decode step.
Choice ``index`` is ``prompt * n + choice`` (vllm/entrypoints/openai/
completion/serving.py, ``i = output.index + prompt_idx * num_choices``). The
emulated model never emits an end-of-sequence token: it stops at
``max_tokens`` or at a stop string.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from app.emulator.backend import Backend, Prefill, Ticket
from app.emulator.text import Output
from sim.bounds import jsontext


@dataclass(frozen=True, slots=True)
class Job:
    """One prompt of a request: its tokens, the text echoed before its answer, and each choice's output."""

    tokens: list[int]
    echo: str
    output: Output


@dataclass(frozen=True, slots=True)
class Shape:
    """What kind of answer: completion or chat, and the options that change its shape."""

    chat: bool
    model: str
    n: int
    logprobs: int | None
    include_usage: bool
    cached_details: bool

    @property
    def object(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    @property
    def chunk_object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"


class Reply:
    """One request's answer."""

    def __init__(self, backend: Backend, shape: Shape, jobs: Sequence[Job], arrived: float) -> None:
        self.backend, self.shape, self.jobs, self.arrived = backend, shape, list(jobs), arrived
        prefix = "chatcmpl" if shape.chat else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    # -- pieces of vLLM's shapes --------------------------------------------------

    def _envelope(self, obj: str, choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "object": obj, "created": self.created, "model": self.shape.model, "choices": choices}
        if usage is not None:
            out["usage"] = usage
        return out

    def usage(self, prefills: Sequence[Prefill], completion_tokens: int) -> dict[str, Any]:
        """vllm/entrypoints/serve/engine/protocol.py UsageInfo; cached_tokens with --enable-prompt-tokens-details."""
        prompt_tokens = sum(p.prompt_tokens for p in prefills)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
        }
        if self.shape.cached_details:
            usage["prompt_tokens_details"] = {"cached_tokens": sum(p.cached_tokens for p in prefills)}
        return usage

    def _logprobs(self, pieces: Sequence[str], offset: int) -> dict[str, Any] | None:
        """The emulated model puts probability 1 on each word it says: logprob 0.0, the word its only top choice."""
        if self.shape.logprobs is None:
            return None
        if self.shape.chat:
            def entry(piece: str) -> dict[str, Any]:
                return {"token": piece, "logprob": 0.0, "bytes": list(piece.encode())}

            top = self.shape.logprobs
            return {"content": [{**entry(p), "top_logprobs": [entry(p)] if top else []} for p in pieces]}
        offsets = []
        for piece in pieces:
            offsets.append(offset)
            offset += len(piece)
        return {
            "text_offset": offsets,
            "token_logprobs": [0.0] * len(pieces),
            "tokens": list(pieces),
            "top_logprobs": [{p: 0.0} for p in pieces],
        }

    def _choice(
        self, index: int, text: str, pieces: Sequence[str], offset: int, finish: str | None, stop: str | None, whole: bool
    ) -> dict[str, Any]:
        """A choice: ``text`` for a completion; for a chat, a ``message`` (whole answers) or a ``delta`` (chunks)."""
        logprobs = self._logprobs(pieces, offset)
        if not self.shape.chat:
            return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish, "stop_reason": stop}
        said = {"message": {"role": "assistant", "content": text, "refusal": None}} if whole else {"delta": {"content": text}}
        return {"index": index, **said, "logprobs": logprobs, "finish_reason": finish, "stop_reason": stop}

    # -- the engine ---------------------------------------------------------------

    def _submit(self, inbox: asyncio.Queue[tuple[int, int]]) -> list[Ticket]:
        """Every prompt enters the engine at once (no await in between), keyed by its index in ``jobs``."""
        tickets: list[Ticket] = []
        try:
            for k, job in enumerate(self.jobs):
                tickets.append(self.backend.submit(job.tokens, len(job.output.pieces), self.arrived, inbox, k))
        except BaseException:
            for t in tickets:
                self.backend.abort(t)
            raise
        return tickets

    @staticmethod
    async def _next(inbox: asyncio.Queue[tuple[int, int]]) -> tuple[int, int]:
        """The next sampled token: (prompt index, token index)."""
        k, step = await inbox.get()
        if step < 0:
            raise RuntimeError("the emulator's engine stopped")
        return k, step

    def _prefills(self, tickets: Sequence[Ticket]) -> list[Prefill]:
        prefills = [t.prefill for t in tickets]
        assert all(p is not None for p in prefills)
        return prefills  # type: ignore[return-value]

    # -- whole answers ------------------------------------------------------------

    async def whole(self) -> dict[str, Any]:
        inbox: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
        tickets = self._submit(inbox)
        try:
            for _ in range(sum(len(job.output.pieces) for job in self.jobs)):
                await self._next(inbox)
        except BaseException:
            for t in tickets:
                self.backend.abort(t)
            raise
        choices = []
        generated = 0
        for k, (job, ticket) in enumerate(zip(self.jobs, tickets, strict=True)):
            out = job.output
            self.backend.finish(ticket, len(out.pieces) * self.shape.n)
            generated += len(out.pieces) * self.shape.n
            for j in range(self.shape.n):
                choices.append(
                    self._choice(k * self.shape.n + j, job.echo + out.text, out.pieces, len(job.echo), out.finish_reason, out.stop_reason, True)
                )
        return self._envelope(self.shape.object, choices, self.usage(self._prefills(tickets), generated))

    # -- streams ------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[str]:
        """Server-sent events in vLLM's order: chunks as their steps end, the usage chunk if asked for, ``[DONE]``."""
        inbox: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
        tickets = self._submit(inbox)
        sent = [0] * len(self.jobs)
        try:
            for _ in range(sum(len(job.output.pieces) for job in self.jobs)):
                k, step = await self._next(inbox)
                yield "".join(_event(chunk) for chunk in self._chunks(k, step))
                sent[k] = step + 1
            if self.shape.include_usage:
                generated = sum(sent) * self.shape.n
                yield _event(self._envelope(self.shape.chunk_object, [], self.usage(self._prefills(tickets), generated)))
            yield "data: [DONE]\n\n"
        finally:
            for k, ticket in enumerate(tickets):
                if sent[k] == len(self.jobs[k].output.pieces):
                    self.backend.finish(ticket, sent[k] * self.shape.n)
                else:
                    self.backend.abort(ticket)

    def _chunks(self, k: int, step: int) -> list[dict[str, Any]]:
        job = self.jobs[k]
        out = job.output
        last = step == len(out.pieces) - 1
        finish = out.finish_reason if last else None
        stop = out.stop_reason if last else None
        chunks = []
        for j in range(self.shape.n):
            index = k * self.shape.n + j
            if self.shape.chat and step == 0:
                # chat_completion/serving.py: the first chunk of each choice carries the role and empty content.
                role = {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
                chunks.append(self._envelope(self.shape.chunk_object, [role], None))
                if job.echo:
                    # ... then, with echo, the last message's content in a chunk of its own.
                    echo = {"index": index, "delta": {"content": job.echo}, "logprobs": None, "finish_reason": None}
                    chunks.append(self._envelope(self.shape.chunk_object, [echo], None))
            text = out.pieces[step]
            offset = len(job.echo) + sum(len(p) for p in out.pieces[:step])
            if step == 0 and job.echo and not self.shape.chat:
                # completion/serving.py: the prompt is echoed together with the first token.
                text = job.echo + text
            choice = self._choice(index, text, out.pieces[step:step + 1], offset, finish, stop, False)
            chunks.append(self._envelope(self.shape.chunk_object, [choice], None))
        return chunks


def _event(data: dict[str, Any]) -> str:
    return f"data: {jsontext.dumps(data)}\n\n"
