"""An arbitrary prompt as the tiers see it: text -> token ids (a deterministic tokenizer) -> block and chunk keys.

The emulator serves prompts it has never seen, so it cannot use a workload's
content ids. Its tokenizer is deliberately simple and documented:

- the text is split on whitespace (``str.split()``); every word is one token;
- a word's token id is the first 8 bytes of its BLAKE2b digest (UTF-8),
  modulo ``VOCAB_SIZE``. BLAKE2b, not Python's ``hash``: string hashing is
  randomised per process, and the same text must give the same ids in every
  process and on every machine.

Token ids then become prefix-chained keys as ``sim.blocks.hashing.chain_keys`` makes
them (``token_unit_keys``), each token a one-token segment: a GPU block's key
covers its 16 token ids and its parent's key (vLLM's block hash), a CPU chunk's key is the key of its last
block (so it too covers the whole prefix, like LMCache's chunk hash).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache

from sim.blocks.hashing import token_unit_keys
from sim.blocks.request import SHARED_DOC, Request, Units

# Qwen2.5's vocabulary size: ids look like a real tokenizer's.
VOCAB_SIZE = 151_936


@lru_cache(maxsize=65_536)
def token_id(word: str) -> int:
    """The token id of one word: stable across processes (BLAKE2b, not ``hash``)."""
    digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % VOCAB_SIZE


def tokenize(text: str) -> list[int]:
    """One token per whitespace-separated word."""
    return list(map(token_id, text.split()))


def request_for_tokens(
    tokens: Sequence[int], units: Units, seq: int = 0, pass_: int = 1, order: str = "live", doc: int = SHARED_DOC
) -> Request:
    """The engine's view of a prompt: its full blocks' keys and its full chunks' keys.

    Only full blocks and full chunks are cached (vLLM; LMCache with
    ``save_unfull_chunk=false``); at most ``n - 1`` tokens can hit because
    vLLM recomputes the last one.
    """
    n = len(tokens)
    if n < 1:
        raise ValueError("a prompt needs at least one token")
    if units.chunk % units.block:
        raise ValueError(f"chunk size ({units.chunk}) must be a multiple of block size ({units.block})")
    block_keys = token_unit_keys(tokens, units.block)
    ratio = units.chunk // units.block
    return Request(
        seq=seq,
        pass_=pass_,
        order=order,
        doc=doc,
        prompt_tokens=n,
        block_keys=block_keys,
        alloc_blocks=-(-n // units.block),
        max_hit_blocks=(n - 1) // units.block,
        chunk_keys=block_keys[ratio - 1 :: ratio],
        last_chunk_tokens=units.chunk,
    )
