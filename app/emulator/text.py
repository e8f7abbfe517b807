"""The emulator's text: its chat template, the words behind ``/detokenize``, and what an emulated completion says.

The tokenizer counts one token per whitespace-separated word
(``sim.blocks.prompt_keys.tokenize``). Chat messages are rendered with ChatML, the
template of the Qwen2.5 models the emulator sizes its KV by, without a
default system message::

    <|im_start|>{role}\\n{content}<|im_end|>\\n        (each message)
    <|im_start|>assistant\\n                           (the generation prompt)

so a lone user message of W words is W + 2 tokens with the generation prompt
(``<|im_start|>user`` and ``<|im_start|>assistant`` are words of their own;
``<|im_end|>`` sticks to the last word of the message).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from app.emulator.protocol import ChatMessage
from sim.blocks.prompt_keys import token_id, tokenize

# The words an emulated completion is made of (it has no model to say anything).
WORDS = ("the", "cached", "prefix", "is", "served", "from", "the", "tier", "that", "holds", "it")
# Words hashed between two yields to the event loop (Vocabulary.tokenize_aside): ~1 ms on an idle core.
SLICE_WORDS = 256
# Words remembered for /detokenize; past this many, new words are not remembered (ids print as <id>).
MAX_VOCABULARY = 200_000


def render_chat(messages: Sequence[ChatMessage], add_generation_prompt: bool = True, continue_final: bool = False) -> str:
    """The prompt text of a conversation (see the module docstring)."""
    parts = []
    for i, message in enumerate(messages):
        last = i == len(messages) - 1
        end = "" if continue_final and last else "<|im_end|>\n"
        parts.append(f"<|im_start|>{message.role}\n{message.text}{end}")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


class Vocabulary:
    """Token id -> word, for the words the emulator has tokenized (its tokenizer cannot be inverted otherwise).

    Words are remembered by ``remember``, which the server calls once an
    answer is sent, and by ``detokenize``; not as they are tokenized: a
    completion's prompt is tokenized inside its first token's deadline, and
    recording 5,000 words would take a tenth of it.
    """

    def __init__(self) -> None:
        self._words: dict[int, str] = {token_id(w): w for w in WORDS}
        self._ids: dict[str, int] = {w: i for i, w in self._words.items()}  # the same words the other way
        self._pending: list[tuple[list[int], str]] = []
        self._pending_words = 0
        self._lane = asyncio.Lock()  # FIFO: prompts are tokenized in the order they ask

    def tokenize(self, text: str) -> list[int]:
        return self.keep(tokenize(text), text)

    async def tokenize_aside(self, text: str) -> list[int]:
        """``tokenize``, one prompt at a time in the order they come, yielding to the event loop every
        ``SLICE_WORDS`` words. 5,000 words take ~15 ms: in one piece they would hold back the end of an engine
        step and other requests' tokens by as much (vLLM tokenizes in its API server process, apart from the
        engine core); interleaved with other prompts, the first to arrive would be the last to be ready, and an
        engine step waits for the prompts that arrived before it (``Backend.expect``). A worker thread would not
        do: the hashing holds the GIL, and on a loaded machine the loop waits for it far longer than a slice."""
        async with self._lane:
            words = text.split()
            known = self._ids
            ids: list[int] = []
            for i in range(0, len(words), SLICE_WORDS):
                if i:
                    await asyncio.sleep(0)
                # A word remembered from an earlier prompt is looked up, not hashed again: a document read again
                # costs a twentieth of its first reading.
                ids.extend([known[w] if w in known else token_id(w) for w in words[i : i + SLICE_WORDS]])
        return self.keep(ids, text)

    def keep(self, ids: list[int], text: str) -> list[int]:
        """Note ``text``'s words for ``remember``; returns ``ids``."""
        if len(self._words) < MAX_VOCABULARY:
            self._pending.append((ids, text))
            self._pending_words += len(ids)
            if self._pending_words >= MAX_VOCABULARY:  # keeps what waits to be remembered bounded
                self.remember()
        return ids

    def detokenize(self, ids: Sequence[int]) -> str:
        """Words joined by spaces; an id never seen prints as ``<id>``."""
        self.remember()
        return " ".join(self._words.get(i, f"<{i}>") for i in ids)

    def remember(self) -> None:
        """Record the words of the texts tokenized since the last call."""
        for ids, text in self._pending:
            if len(self._words) >= MAX_VOCABULARY:
                break
            words = text.split()
            self._words.update(zip(ids, words, strict=True))
            self._ids.update(zip(words, ids))
        self._pending.clear()
        self._pending_words = 0


@dataclass(frozen=True, slots=True)
class Output:
    """One emulated completion: its pieces (one per token), why it ended, and the stop string that ended it."""

    pieces: tuple[str, ...]
    finish_reason: str
    stop_reason: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def generate(max_tokens: int, stops: Sequence[str] = (), include_stop: bool = False) -> Output:
    """``max_tokens`` words, or fewer when a stop string appears: vLLM then ends the text before the stop string
    (after it with ``include_stop_str_in_output``) with ``finish_reason`` "stop" and ``stop_reason`` the string."""
    pieces: list[str] = []
    text = ""
    for i in range(max_tokens):
        piece = " " + WORDS[i % len(WORDS)]
        pieces.append(piece)
        searched_from = max(0, len(text) - max((len(s) for s in stops), default=0) + 1)
        text += piece
        found = [(at, stop) for stop in stops if (at := text.find(stop, searched_from)) >= 0]
        if found:
            at, stop = min(found)
            return Output(_cut(pieces, at + len(stop) if include_stop else at), "stop", stop)
    return Output(tuple(pieces), "length")


def _cut(pieces: list[str], length: int) -> tuple[str, ...]:
    """The pieces' text cut to ``length`` characters, keeping one piece per token generated (the last may be
    empty: the token that completed the stop string was generated, though none of it is shown)."""
    out: list[str] = []
    used = 0
    for piece in pieces:
        out.append(piece[: max(0, length - used)])
        used += len(piece)
    return tuple(out)
