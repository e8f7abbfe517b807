"""The prompts of a live run: documents and questions of random common words, sized with the server's own tokenizer.

Like the seed's, documents are random words, so no two share a prefix beyond
their first block (each starts with its number). A prompt is the shared
prefix (if any), the document, then a question that differs per pass, so
only the document part can be reused. Sizes are found by asking the server's
``/tokenize`` (common English words are one token each in most tokenizers, so
a couple of calls usually land exactly); where a tokenizer cannot land on the
exact count, the text is the longest one below it.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sim.workloads.scenario import Scenario

CountTokens = Callable[[str], Awaitable[int]]

_WORDS = (
    "time year people way day man thing woman life child world school state family student group country problem "
    "hand part place case week company system program question work government number night point home water room "
    "mother area money story fact month lot right study book eye job word business issue side kind head house "
    "service friend father power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war history party result "
    "change morning reason research girl guy moment air teacher force education foot boy age policy music market "
    "sense nation plan college interest death experience effect class control care field development role effort "
    "rate heart drug show leader light voice wife police mind price report decision son view relationship town road"
).split()
_MAX_STEPS = 40


@dataclass(frozen=True, slots=True)
class SizedText:
    text: str
    tokens: int


async def sized_text(count: CountTokens, lead: list[str], rng: random.Random, target_tokens: int) -> SizedText:
    """``lead`` followed by random words, as many as keep it at most ``target_tokens`` tokens (exactly, if the tokenizer allows)."""
    if lead and await count(" ".join(lead)) >= target_tokens:
        lead = []
    words = lead + [rng.choice(_WORDS) for _ in range(target_tokens + 16)]
    # Grow the word list until it is too long, so that the answer lies in (lo, hi).
    while await count(" ".join(words)) <= target_tokens:
        if len(words) > 8 * target_tokens + 100:
            raise ValueError(f"the tokenizer counts no more than {target_tokens} tokens in {len(words)} words")
        words += [rng.choice(_WORDS) for _ in range(max(16, len(words) // 2))]
    lo, lo_tokens, hi = 0, 0, len(words)
    k = min(max(1, target_tokens), hi - 1)
    for _ in range(_MAX_STEPS):
        tokens = await count(" ".join(words[:k]))
        if tokens == target_tokens:
            return SizedText(" ".join(words[:k]), tokens)
        if tokens < target_tokens:
            lo, lo_tokens = k, tokens
        else:
            hi = k
        if hi - lo <= 1:
            break
        # Step by the token shortfall (about one word a token); fall back to bisection when that leaves the bracket.
        k = k + target_tokens - tokens
        if not lo < k < hi:
            k = (lo + hi) // 2
    if lo == 0:
        raise ValueError(f"cannot make a text of at most {target_tokens} tokens with this tokenizer")
    return SizedText(" ".join(words[:lo]), lo_tokens)


@dataclass(slots=True)
class PromptBook:
    """The texts of a scenario's prompts, sized for one server's tokenizer."""

    shared: SizedText | None
    documents: list[SizedText]
    questions: dict[tuple[int, int], SizedText]

    def prompt(self, pass_: int, doc: int) -> str:
        question = self.questions.get((pass_, doc))
        parts = [p.text for p in (self.shared, self.documents[doc], question) if p is not None]
        return "\n\n".join(parts)


async def build_prompts(
    count: CountTokens, scenario: Scenario, pass_docs: list[tuple[int, int]], run_tag: str = ""
) -> PromptBook:
    """Size the shared prefix, every document, and a question for every (pass, document) in ``pass_docs``.

    ``run_tag`` opens every document (``Document 3 [a1b2c3]:``): a server that
    served an earlier run still holds that run's documents, and a tag keeps
    this run from hitting them. Under LRU, the older run's blocks and chunks
    are evicted before any of this run's, so the server behaves as if cold.
    """
    seed = scenario.seed

    def rng(*parts: object) -> random.Random:
        return random.Random(":".join(map(str, ("kvscope-live", seed, *parts))))

    shared = None
    if scenario.shared_prefix_tokens:
        shared = await sized_text(count, ["Instructions", f"[{run_tag}]:"], rng("shared"), scenario.shared_prefix_tokens)
    documents = [
        await sized_text(count, ["Document", f"{doc}", f"[{run_tag}]:"], rng("doc", doc), scenario.doc_tokens) for doc in range(scenario.docs)
    ]
    questions: dict[tuple[int, int], SizedText] = {}
    asked: dict[tuple[int, int], SizedText] = {}  # (pass the question was made for, doc) -> its text
    for pass_, doc in dict.fromkeys(pass_docs):
        length = scenario.question_length(doc)
        if not length:
            continue
        # A fresh question is new every pass; the same one is asked again word for word.
        key = (pass_ if scenario.questions == "fresh" else 0, doc)
        if key not in asked:
            asked[key] = await sized_text(count, ["Question", f"{key[0]}.{doc}:"], rng("question", *key), length)
        questions[(pass_, doc)] = asked[key]
    return PromptBook(shared, documents, questions)
