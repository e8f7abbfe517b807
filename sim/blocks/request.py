"""A request as the tiers see it: its prompt's GPU block keys and offload chunk keys, and the unit sizes they count in."""

from __future__ import annotations

from dataclasses import dataclass

SHARED_DOC = -1  # owner of blocks that belong to no single document


@dataclass(slots=True)
class Request:
    """One prompt as the tiers see it.

    ``block_keys`` are the request's full GPU units (its prompt's, then those
    its generated tokens fill) and ``chunk_keys`` its prompt's CPU chunks (the last one partial, of ``last_chunk_tokens``, only with
    ``save_unfull_chunk``). The first ``shared_blocks`` blocks belong to the
    shared prefix, not to ``doc``.
    """

    seq: int
    pass_: int
    order: str
    doc: int
    prompt_tokens: int
    block_keys: list[int]
    alloc_blocks: int
    max_hit_blocks: int
    chunk_keys: list[int]
    last_chunk_tokens: int
    shared_blocks: int = 0
    shared_chunks: int = 0
    output_tokens: int = 1  # generated tokens, the sampled one included (its KV: all but the last)


class Requests(list[Request]):
    """Requests in serving order that bound their keys without a scan.

    ``key_range``: (lowest, highest, references) over every block and chunk
    key of the requests: no key lies outside ``[lowest, highest]``, and
    ``references`` counts the keys, repeats included. None when the builder
    does not know it. ``sim.explain.observer.key_slots`` reads it instead of
    scanning every key, which costs an explained run as much as a tenth of
    the run itself. A slice of the list is a plain list again.
    """

    __slots__ = ("key_range",)

    def __init__(self, requests: list[Request], key_range: tuple[int, int, int] | None) -> None:
        super().__init__(requests)
        self.key_range = key_range


@dataclass(frozen=True, slots=True)
class Units:
    """The unit sizes of a scenario's tiers, in tokens."""

    block: int
    chunk: int
