"""Workloads: the requests of a scenario (documents x passes), each with its GPU block keys and CPU chunk keys.

A request is a document followed by a question; by default the question differs
per pass (a re-read asks something new), so only the document part can be
reused; ``questions="same"`` asks it again unchanged. A request that generates
more than one token grows its KV as vLLM's decode does. In
``doc`` granularity a whole document (with any shared prefix) is one unit in
every tier and the question is never cached: the lab's first exercise.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from sim.blocks.hashing import ChainState, chain_keys, partial_key
from sim.blocks.request import Request, Requests, Units
from sim.bounds.budget import checkpoint
from sim.workloads.longdocqa import forced_misses, repeat_order
from sim.workloads.scenario import PassSpec, Scenario

# Content ids: ints only, so key hashing does not depend on PYTHONHASHSEED.
_SHARED_CONTENT = 1
_DOC_CONTENT = 1_000_000
_QUESTION_CONTENT = 1_000_000_000
_MISS_CONTENT = 2_000_000_000  # + seq: a document made unique, as long_doc_qa's forced misses are
_OUTPUT_CONTENT = 3_000_000_000  # + seq: the tokens a request generates, its own


def units(scenario: Scenario) -> Units:
    if scenario.granularity == "doc":
        doc_unit = scenario.shared_prefix_tokens + scenario.doc_tokens
        return Units(doc_unit, doc_unit)
    return Units(scenario.block_size, scenario.offload_unit_tokens)


def pass_orders(scenario: Scenario) -> list[list[int]]:
    """The document order of every pass."""
    return [_order(scenario, spec, i) for i, spec in enumerate(scenario.passes)]


def _order(scenario: Scenario, spec: PassSpec, index: int) -> list[int]:
    n = scenario.docs
    rng = random.Random(f"{scenario.seed}:{spec.seed}:{index}")
    match spec.order:
        case "forward":
            return list(range(n))
        case "reverse":
            return list(range(n - 1, -1, -1))
        case "random":
            docs = list(range(n))
            rng.shuffle(docs)
            return docs
        case "zipf":
            weights = [1.0 / (rank + 1) ** spec.zipf_alpha for rank in range(n)]
            return rng.choices(range(n), weights=weights, k=spec.requests or n)
        case "repeat":
            assert spec.repeat_mode is not None
            return repeat_order(n, spec.repeat_count, spec.repeat_mode, spec.seed)
        case _:
            assert spec.docs is not None
            return list(spec.docs)


@dataclass
class WorkloadBuilder:
    """Builds requests, hashing each document's part once and only the question per request."""

    scenario: Scenario
    unit: Units = field(init=False)
    _doc_chain: dict[int, tuple[list[int], ChainState]] = field(default_factory=dict, init=False)
    # Every distinct key hashed so far -> its id: 0, 1, 2, ... in order of first appearance.
    _ids: dict[int, int] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.unit = units(self.scenario)

    def requests(self) -> Requests:
        out: list[Request] = []
        for pass_index, (spec, docs) in enumerate(zip(self.scenario.passes, pass_orders(self.scenario))):
            misses = forced_misses(len(docs), spec.hit_miss_ratio)
            for i, doc in enumerate(docs):
                checkpoint()
                out.append(self.request(len(out), pass_index + 1, spec.label, doc, fresh=i in misses))
        # Every key is a dense id (``_dense``), so the ids handed out bound them all.
        ids = len(self._ids)
        refs = sum(len(r.block_keys) + len(r.chunk_keys) for r in out)
        return Requests(out, (0, ids - 1, refs) if ids else None)

    def request(self, seq: int, pass_: int, order: str, doc: int, fresh: bool = False) -> Request:
        """``fresh``: the document's text made unique (a forced miss), so nothing of it can hit."""
        s = self.scenario
        n = s.prompt_tokens_of(doc)
        block, chunk = self.unit.block, self.unit.chunk
        doc_keys, state = self._chain(_MISS_CONTENT + seq) if fresh else self._doc_keys(doc)
        if s.granularity == "doc":
            # The question is computed every time and never cached.
            max_hit = min(len(doc_keys), (n - 1) // block)
            return Request(seq, pass_, order, doc, n, doc_keys, len(doc_keys), max_hit, list(doc_keys), chunk)
        # A fresh question differs per pass (a re-read asks something new); the same one is asked every pass.
        asked = doc if s.questions == "same" else pass_ * s.docs + doc
        more, end = chain_keys([(_QUESTION_CONTENT + asked, s.question_length(doc))], block, state)
        keys = doc_keys + self._dense(more)
        ratio = chunk // block
        chunk_keys = keys[ratio - 1 :: ratio]  # LMCache saves no decode KV (save_decode_cache is off by default)
        last_chunk_tokens = chunk
        if s.save_unfull_chunk and n % chunk:
            tail = partial_key(end) if end.filled else hash((keys[-1], chunk)) & 0x7FFF_FFFF_FFFF_FFFF
            chunk_keys.append(self._dense([tail])[0])
            last_chunk_tokens = n % chunk
        if s.output_tokens > 1:
            # vLLM's decode: each generated token but the last gets KV in the request's blocks, and full
            # blocks are hashed over all the request's tokens and cached like the prompt's.
            generated, _ = chain_keys([(_OUTPUT_CONTENT + seq, s.output_tokens - 1)], block, end)
            keys = keys + self._dense(generated)
        return Request(
            seq,
            pass_,
            order,
            doc,
            n,
            keys,
            -(-(n + s.output_tokens - 1) // block),
            (n - 1) // block,
            chunk_keys,
            last_chunk_tokens,
            shared_blocks=s.shared_prefix_tokens // block,
            shared_chunks=s.shared_prefix_tokens // chunk,
            output_tokens=s.output_tokens,
        )

    def _doc_keys(self, doc: int) -> tuple[list[int], ChainState]:
        cached = self._doc_chain.get(doc)
        if cached is None:
            cached = self._doc_chain[doc] = self._chain(_DOC_CONTENT + doc)
        return cached

    def _chain(self, content: int) -> tuple[list[int], ChainState]:
        """Keys of the shared prefix (if any) followed by a document's worth of ``content``."""
        s = self.scenario
        segments = [(content, s.doc_tokens)]
        if s.shared_prefix_tokens:
            segments.insert(0, (_SHARED_CONTENT, s.shared_prefix_tokens))
        keys, state = chain_keys(segments, self.unit.block)
        return self._dense(keys), state

    def _dense(self, keys: list[int]) -> list[int]:
        """Hashed keys as dense ids: the same key gets the same id, distinct keys distinct ids.

        Equal ids mean equal prefixes exactly as equal hashes did, and the engine
        only compares keys, so its results do not change; small dense ids let an
        explain run keep its eviction history in a list indexed by key
        (sim.explain.observer.key_slots) instead of a dict of every key ever evicted.
        """
        ids = self._ids
        return [ids.setdefault(k, len(ids)) for k in keys]


def build_requests(scenario: Scenario) -> Requests:
    return WorkloadBuilder(scenario).requests()
