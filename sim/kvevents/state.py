"""What a server's KV events say it holds: per medium, the resident blocks, their parent chain and their tokens.

Invariants:
- a block is resident in a medium while its reference count is above zero:
  vLLM announces a hash once per block that holds it (a recomputed last block
  of a fully cached prompt is a second block with the same hash,
  block_pool.py:283-300) and removes it once per block evicted
  (block_pool.py:650-664), so the count is the number of blocks holding it;
- a removal of a hash never announced (the subscriber joined late, or
  messages were lost) changes nothing and is counted in ``unknown_removes``;
- ``tokens`` is the sum of the resident blocks' sizes.

The count assumes vLLM's default ``kv_cache_report_mode="incremental"``; in
``"full"`` mode vLLM also re-announces reused blocks (kv_cache_manager.py:309-317),
which this state would count as extra references.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sim.kvevents.wire import (
    MEDIUM_CPU, MEDIUM_GPU, MEDIUM_STORAGE, AllBlocksCleared, BlockHash, BlockRemoved, BlockStored, KvEvent, hash_label,
    medium_of,
)


@dataclass(slots=True)
class _Block:
    refs: int
    parent: BlockHash | None
    tokens: int


@dataclass(slots=True)
class MediumState:
    """One medium's resident blocks; ``stored`` and ``removed`` count blocks announced and removed since the start."""

    name: str
    blocks: dict[BlockHash, _Block] = field(default_factory=dict)
    tokens: int = 0
    stored: int = 0
    removed: int = 0
    unknown_removes: int = 0

    def store(self, hashes: list[BlockHash], parent: BlockHash | None, block_size: int) -> None:
        blocks = self.blocks
        for h in hashes:
            block = blocks.get(h)
            if block is None:
                blocks[h] = _Block(1, parent, block_size)
                self.tokens += block_size
            else:
                block.refs += 1
            parent = h
        self.stored += len(hashes)

    def remove(self, hashes: list[BlockHash]) -> None:
        blocks = self.blocks
        for h in hashes:
            block = blocks.get(h)
            if block is None:
                self.unknown_removes += 1
                continue
            self.removed += 1
            block.refs -= 1
            if block.refs == 0:
                del blocks[h]
                self.tokens -= block.tokens

    def clear(self) -> None:
        self.blocks.clear()
        self.tokens = 0

    def refs(self) -> dict[BlockHash, int]:
        """Resident hash -> number of blocks holding it."""
        return {h: b.refs for h, b in self.blocks.items()}

    def chain(self, block_hash: BlockHash) -> list[BlockHash]:
        """The resident chain ending at this block, from its oldest resident ancestor (the prompt prefix it ends)."""
        blocks = self.blocks
        out = [block_hash]
        parent = blocks[block_hash].parent
        while parent is not None and parent in blocks and len(out) <= len(blocks):
            out.append(parent)
            parent = blocks[parent].parent
        out.reverse()
        return out

    def prefixes(self) -> list[dict[str, Any]]:
        """Resident blocks grouped by the chain they hang from, largest first.

        A prefix is a resident block whose parent is not resident (or that has
        none) with every resident block that descends from it.
        """
        blocks = self.blocks
        root_of: dict[BlockHash, BlockHash] = {}
        for h in blocks:
            path = []
            node = h
            while node not in root_of:
                parent = blocks[node].parent
                path.append(node)
                if parent is None or parent not in blocks:
                    root_of[node] = node
                    break
                node = parent
                if len(path) > len(blocks):  # a cycle cannot come from vLLM; do not loop on one
                    root_of[node] = node
                    break
            root = root_of[node]
            for p in path:
                root_of[p] = root
        groups: dict[BlockHash, list[int]] = {}
        for h, root in root_of.items():
            g = groups.setdefault(root, [0, 0])
            g[0] += 1
            g[1] += blocks[h].tokens
        out = [{"medium": self.name, "root": hash_label(r), "blocks": b, "tokens": t} for r, (b, t) in groups.items()]
        out.sort(key=lambda p: (-p["tokens"], p["root"]))
        return out

    def summary(self) -> dict[str, int]:
        return {"blocks": len(self.blocks), "tokens": self.tokens, "stored": self.stored, "removed": self.removed}


class KvState:
    """Every medium's resident blocks, built by applying decoded events in sequence order."""

    def __init__(self) -> None:
        # The GPU is always there (every vLLM has one); other media appear with their first event.
        self.media: dict[str, MediumState] = {MEDIUM_GPU: MediumState(MEDIUM_GPU)}
        self.events = 0
        self.clears = 0

    def medium(self, name: str) -> MediumState:
        state = self.media.get(name)
        if state is None:
            state = self.media[name] = MediumState(name)
        return state

    def apply(self, events: Iterable[KvEvent]) -> None:
        for event in events:
            self.events += 1
            if isinstance(event, BlockStored):
                self.medium(medium_of(event)).store(event.block_hashes, event.parent_block_hash, event.block_size)
            elif isinstance(event, BlockRemoved):
                self.medium(medium_of(event)).remove(event.block_hashes)
            elif isinstance(event, AllBlocksCleared):
                # Emitted by the GPU block pool's reset (block_pool.py:907); offload tiers keep their blocks.
                self.clears += 1
                self.medium(MEDIUM_GPU).clear()

    def ordered(self) -> list[MediumState]:
        """The media in lookup order: GPU, CPU, STORAGE, then any other by name."""
        rank = {MEDIUM_GPU: 0, MEDIUM_CPU: 1, MEDIUM_STORAGE: 2}
        return sorted(self.media.values(), key=lambda m: (rank.get(m.name, 3), m.name))

    def reset(self) -> None:
        """The publisher restarted: a new server process starts with nothing cached."""
        for state in self.media.values():
            state.clear()

    def prefixes(self) -> list[dict[str, Any]]:
        out = [p for state in self.media.values() for p in state.prefixes()]
        out.sort(key=lambda p: (-p["tokens"], p["medium"], p["root"]))
        return out
