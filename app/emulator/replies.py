"""Completions and chat completions in vLLM's response shapes, streamed or whole, timed by the backend's schedule.

A batch of prompts is one prefill per prompt (served one after another, see
``backend``); each prompt's ``n`` choices share its prefill, as vLLM's
parallel sampling shares the prompt's KV. The first token of a prompt is
sent when its prefill is due; the others follow every
``DECODE_MS_PER_TOKEN / speed`` ms, counted from that deadline. Choice
``index`` is ``prompt * n + choice`` (vllm/entrypoints/openai/completion/
serving.py, ``i = output.index + prompt_idx * num_choices``). The emulated
model never emits an end-of-sequence token: it stops at ``max_tokens`` or
at a stop string.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from app.emulator.backend import Backend, Prefill
from app.emulator.deadline import sleep_until
from app.emulator.text import Output
from sim.bounds import jsontext

# An assumption, not a measurement: the seed measured only TTFT. A 1.5B model on
# one GPU decodes a token in a few ms; the value only paces the rest of a stream.
DECODE_MS_PER_TOKEN = 5.0


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
        self.decode_s = DECODE_MS_PER_TOKEN / backend.config.speed / 1000

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

    # -- whole answers ------------------------------------------------------------

    async def whole(self) -> dict[str, Any]:
        prefills = await self._prefill_all()
        try:
            longest = max(len(job.output.pieces) for job in self.jobs)
            await sleep_until(max(p.due for p in prefills) + self.decode_s * max(0, longest - 1))
        except BaseException:
            for p in prefills:
                self.backend.release(p)
            raise
        choices = []
        generated = 0
        for k, (job, prefill) in enumerate(zip(self.jobs, prefills, strict=True)):
            out = job.output
            self.backend.finish(prefill, len(out.pieces) * self.shape.n)
            generated += len(out.pieces) * self.shape.n
            for j in range(self.shape.n):
                choices.append(
                    self._choice(k * self.shape.n + j, job.echo + out.text, out.pieces, len(job.echo), out.finish_reason, out.stop_reason, True)
                )
        return self._envelope(self.shape.object, choices, self.usage(prefills, generated))

    async def _prefill_all(self) -> list[Prefill]:
        done: list[Prefill] = []
        try:
            for job in self.jobs:
                # Every prompt takes its turn at once (no await in between), then all are awaited together.
                done.append(self.backend.schedule(job.tokens, self.arrived))
            await asyncio.gather(*(self.backend.wait(p) for p in done))
        except BaseException:
            for p in done:
                self.backend.release(p)
            raise
        return done

    # -- streams ------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[str]:
        """Server-sent events in vLLM's order: chunks as tokens are due, the usage chunk if asked for, ``[DONE]``."""
        prefills = [self.backend.schedule(job.tokens, self.arrived) for job in self.jobs]
        sent = [0] * len(self.jobs)
        try:
            events = sorted(
                (p.due + self.decode_s * step, k, step)
                for k, (job, p) in enumerate(zip(self.jobs, prefills, strict=True))
                for step in range(len(job.output.pieces))
            )
            for due, k, step in events:
                # Made before the wait, sent in one write when due: at the deadline only the write is left.
                text = "".join(_event(chunk) for chunk in self._chunks(k, step))
                if step == 0:
                    await self.backend.wait(prefills[k])
                else:
                    await sleep_until(due)
                yield text
                sent[k] = step + 1
            if self.shape.include_usage:
                generated = sum(sent) * self.shape.n
                yield _event(self._envelope(self.shape.chunk_object, [], self.usage(prefills, generated)))
            yield "data: [DONE]\n\n"
        finally:
            for k, prefill in enumerate(prefills):
                if sent[k] == len(self.jobs[k].output.pieces):
                    self.backend.finish(prefill, sent[k] * self.shape.n)
                else:
                    self.backend.release(prefill)

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
