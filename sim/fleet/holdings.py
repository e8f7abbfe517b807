"""What each replica's tiers hold as the fleet's requests arrive: one frame per tier that changed since it last said.

A frame is taken at each arrival, just before the router chooses (what the
router of ``sim.fleet.clock`` sees then: every step that started by the
arrival has run), and once more after the last request finished (``seq``
None). A frame names the request whose arrival it was taken at, the replica
(None for the shared tier, one store behind every replica) and the tier, and
gives the tier's tokens in use and, per document that changed, its tokens now
(0: gone); for the GPU also the tokens of each document that running requests
hold (``pinned``, as the stepped stream's GPU occupancy says them,
``sim.sched.stream.gpu_split``). Only changes are listed, so that a run's
frames grow with what its steps changed, not with its requests times all it
holds: the tier at request ``k`` is every frame of it up to ``k`` applied in
order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.bounds.budget import Cost
from sim.engine.events import GPU
from sim.sched.stepped import SteppedEngine
from sim.sched.stream import gpu_split
from sim.tiers.chunk_store import ChunkStore

FRAME_JSON_BYTES = 120  # a frame's fixed fields in the JSON answer
ENTRY_JSON_BYTES = 16  # one document's tokens in it ("12": 5024,)
# A block or a document looked at when a frame is taken costs a third of a block step at most: measured over the
# seed lab's documents x 100 on 4 replicas (in flight 4 and 16, and 20 requests/s), 60-470 ns an element against
# ~1,500 ns an estimated block step of the fleet run itself, on the same busy 2-core machine.
ELEMENTS_PER_STEP = 3


def _changed(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """Each document whose tokens differ from ``before``, with its tokens now (0 where it is gone)."""
    out = {doc: tokens for doc, tokens in now.items() if before.get(doc) != tokens}
    out.update((doc, 0) for doc in before if doc not in now)
    return dict(sorted(out.items(), key=lambda item: int(item[0])))


class Holdings:
    """The frames of one fleet run, taken by ``Fleet.run`` (its ``watch``) at each arrival and at the end."""

    def __init__(self, replicas: Sequence[SteppedEngine], shared: str | None = None) -> None:
        self.replicas = list(replicas)
        self.shared = shared
        self.frames: list[dict[str, Any]] = []
        self._said: dict[tuple[int | None, str], tuple[dict[str, int], dict[str, int]]] = {}
        self._steps = [-1] * len(self.replicas)  # each replica's steps when it was last looked at

    def __call__(self, seq: int | None, steps: Sequence[int]) -> None:
        """The frames at request ``seq``'s arrival (None: the run's end); ``steps``: each replica's steps run so far.
        A replica that has not stepped since it was last looked at holds what it held then."""
        shared_changed = False
        for i, (replica, taken) in enumerate(zip(self.replicas, steps)):
            if taken == self._steps[i]:
                continue
            self._steps[i] = taken
            shared_changed = True
            block = replica.block
            total, pinned = gpu_split(replica)
            docs = {str(d): b * block for d, b in sorted(total.items()) if b}
            held = {str(d): b * block for d, b in sorted(pinned.items()) if b}
            self._frame(seq, i, GPU, sum(docs.values()), docs, held)
            for store in replica.engine.offload:
                if store.name != self.shared:
                    self._store(seq, i, store)
        if shared_changed and self.shared is not None:
            self._store(seq, None, next(s for s in self.replicas[0].engine.offload if s.name == self.shared))

    def _store(self, seq: int | None, replica: int | None, store: ChunkStore) -> None:
        docs = {str(d): t for d, t in sorted(store.doc_tokens.items()) if t}
        self._frame(seq, replica, store.name, store.used_tokens, docs, None)

    def _frame(
        self, seq: int | None, replica: int | None, tier: str, used: int, docs: dict[str, int],
        pinned: dict[str, int] | None,
    ) -> None:
        before_docs, before_pinned = self._said.get((replica, tier), ({}, {}))
        changed = _changed(docs, before_docs)
        held = _changed(pinned, before_pinned) if pinned is not None else {}
        if not changed and not held:
            return
        self._said[(replica, tier)] = (docs, pinned or {})
        frame: dict[str, Any] = {"seq": seq, "replica": replica, "tier": tier, "used_tokens": used, "docs": changed}
        if pinned is not None:
            frame["pinned"] = held
        self.frames.append(frame)


def holdings_cost(
    requests: int, replicas: int, tiers: int, docs: int, request_blocks: int, gpu_blocks: int, in_flight: int | None,
) -> Cost:
    """What taking one run's frames costs at most, on top of the run.

    Work: at each arrival each replica that stepped is looked at: the blocks of its running requests (all of them
    over the fleet: at most ``in_flight`` requests' blocks, None for an open loop, and never more than every GPU
    holds) and each tier's documents. The answer: a frame per arrival (and the end) per replica and tier, at most
    listing every document; and over the run no more entries than changes: per tier a store and a pin and unpin a
    request, and an eviction or a pinned block's growth at most a block allocated (every request's blocks).
    """
    held = replicas * gpu_blocks if in_flight is None else min(replicas * gpu_blocks, in_flight * request_blocks)
    work = (requests + 1) * (held + replicas * tiers * (docs + 1)) // ELEMENTS_PER_STEP
    frames = (requests + 1) * replicas * tiers
    entries = min(frames * (docs + 1), tiers * (3 * requests + requests * request_blocks))
    answer = frames * FRAME_JSON_BYTES + 2 * entries * ENTRY_JSON_BYTES  # the GPU's pinned beside its documents
    return Cost(work, answer, answer)
