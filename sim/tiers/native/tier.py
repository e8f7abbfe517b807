"""vLLM's CPU offloading tier, one request at a time: the scheduler's lookup, load and stores, and the manager's rules.

Every fact is vLLM 0.33's (``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``,
``vllm/v1/kv_offload/cpu/manager.py``):

- Keys: offload block ``i`` is keyed by the hash of its last GPU block
  (``update_offload_keys``, scheduler.py 412-429), so only full offload blocks
  exist, and the key is prefix-chained like kvscope's chunk keys.
- Lookup (``get_num_new_matched_tokens`` 1210-1277, ``_lookup_complete_chunks``
  849-1054): from the offload block holding the GPU hit's end, consecutive
  held blocks up to the first miss (``_maximal_prefix_lookup`` 773-803), capped
  at the prompt; a hit reaching less than one offload block beyond the GPU hit
  is dropped (921-923, 993-996). A hit of the whole prompt is reported, and
  then its last token is recomputed (``vllm/v1/core/sched/scheduler.py``
  3515-3516); kvscope counts that token as computed.
- Load (``update_state_after_alloc`` 1351-1500): the blocks after the GPU hit
  are read from the offload blocks that hold them (``prepare_load``: a
  request access, a reuse; manager.py 214-241), and storing then starts after
  the hit (1468-1472). With no load, storing starts at block 0: the GPU-hit
  blocks are offered too.
- Stores (``_build_store_jobs`` 1815-2101): every step offers the full offload
  blocks computed so far beyond the last offered one; prompt blocks only while
  ``offload_prompt_only`` (the default, ``vllm/v1/kv_offload/base.py`` 725-731;
  ``_calc_num_offloadable_tokens`` 762-771); at the request's end up to all
  but its last token (1832-1836). A step is one engine step: the whole prompt,
  then one generated token each, then the step that sees the request finished.
- ``prepare_store`` (manager.py 260-372): count the offer when
  ``store_threshold`` >= 2 (``sim.tiers.admission``); keep the missing blocks offered at least
  that many times; report misses to the policy once per request; evict
  exactly what the new blocks need, never a block of the offer, all or nothing
  (321-336). A store that cannot evict enough stores nothing and is offered
  again next step (scheduler.py 1991-1996); an accepted one moves the offer on.
- When the request ends, the policy sees every block it touched, head to tail
  (``on_request_finished`` manager.py 421-448).

Transfers pin chunks (``ChunkStatus.ref_cnt``, ``cpu/policies/base.py`` 25-45):
a load pins what it reads until it completes (``prepare_load`` /
``complete_load``, manager.py 214-258) and a store's chunks are not ready
until it completes (``prepare_store`` inserts them at -1, ``complete_store``
375-419). Neither may be evicted (321-336: ``_num_evictable_cache_chunks``
counts the ready, unpinned ones), a lookup that reaches a chunk not ready is
deferred (``HIT_PENDING``, scheduler.py 773-803), and a chunk not ready is no
reuse (manager.py 274-280). The sequential engine (``lookup``, ``store``)
completes every transfer of a request before the next one starts: nothing is
pinned or pending when a store evicts, except the offer itself. The stepped
engine drives the same manager step by step (``find``, ``load``, ``prepare_store``,
``loaded``, ``stored``, ``finished``), each request with its own
``RequestAccess``. Capacity is in offload blocks (``num_chunks``,
``cpu/spec.py`` 106-130, see ``sim.tiers.native.sizing``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.blocks.request import Request
from sim.tiers.admission import OfferCounts
from sim.tiers.chunk_store import ChunkStore
from sim.tiers.native import native_policy
from sim.tiers.native.base import RequestAccess
from sim.tiers.policies.base import DOC, TOKENS, StoredChunk

# (key, chunk, end token) of an offered offload block
Offer = list[tuple[int, StoredChunk, int]]


class NativeCpuTier(ChunkStore):
    """vLLM's CPUOffloadingManager with its policy (``lru`` or ``arc``) behind the OffloadingConnector's scheduler."""

    def __init__(
        self, name: str, capacity_chunks: int, chunk_tokens: int, block_tokens: int, policy: str = "lru",
        store_threshold: int = 0, offload_prompt_only: bool = True,
    ) -> None:
        super().__init__(name, capacity_chunks * chunk_tokens, chunk_tokens)
        self.native = native_policy(policy, capacity_chunks)
        self.eviction = self.native  # type: ignore[assignment]  # what the store reads of it is the same: chunks
        self.policy = policy
        self.capacity_chunks = capacity_chunks
        self.blocks_per_chunk = chunk_tokens // block_tokens
        self.store_threshold = store_threshold
        self.offload_prompt_only = offload_prompt_only
        # manager.py 94-96: the offer counts exist only for a threshold of 2 or more.
        self.counts: OfferCounts | None = OfferCounts() if store_threshold >= 2 else None
        self.pinned: dict[int, int] = {}  # key -> loads reading it (ref_cnt > 0)
        self.pending: set[int] = set()  # keys whose store is in flight (ref_cnt -1: not ready)
        self._current = RequestAccess()  # the sequential engine's request
        # While an observer is attached (sim.explain): offload block -> the request whose store of it was dropped
        # (refused at its last offer: the blocks it had to evict still being written or read).
        self.dropped_log: dict[int, int] | None = None

    def _see(self, access: RequestAccess, items: Sequence[tuple[int, int]], reused: Sequence[int] = ()) -> None:
        """``_record_request_cache_access`` (manager.py 163-189): first sightings go to the policy."""
        seen = access.seen
        new = [(k, p) for k, p in items if k not in seen]
        seen.update(new)
        if new:
            self.native.access(new, access)
        access.reused.update(k for k in reused if k not in access.inserted)

    # -- the scheduler's side, one request at a time --------------------------

    def lookup(self, req: Request, gpu_hit: int) -> tuple[int, list[int]]:
        """The tokens beyond ``gpu_hit`` the tier serves and the offload blocks it loads them from (already loaded)."""
        self._current = access = RequestAccess()
        found = self.find(req, gpu_hit)
        assert found is not None  # nothing is pending one request at a time
        hit, loaded = found
        self.load(loaded, gpu_hit // self.chunk_size, access)
        self.loaded(loaded)
        return hit, loaded

    def store(
        self, req: Request, gpu_hit: int, hit: int, output_tokens: int, evicted: list[StoredChunk]
    ) -> tuple[dict[int, int], int]:
        """Every step's store of the request last looked up, then its end; returns the tokens newly held per
        document and those the prefill step copied out of the GPU."""
        access = self._current
        keys = self.offload_keys(req)
        next_idx = self.first_offered(gpu_hit, hit)
        added: dict[int, int] = {}
        written = 0
        for step, (tokens, repeats) in enumerate(self._steps(req.prompt_tokens, output_tokens)):
            end = min(tokens // self.chunk_size, len(keys))
            if end <= next_idx:
                continue
            offer = self.offer_of(req, keys, next_idx, end)
            stored = self.prepare_store(offer, evicted, access)
            # A refused store is offered again every step; with no offer counts that changes nothing.
            for _ in range(repeats - 1 if stored is None and self.counts is not None else 0):
                stored = self.prepare_store(offer, evicted, access)
                if stored is not None:
                    break
            if stored is None:
                continue
            next_idx = end
            for chunk in stored:
                added[chunk[DOC]] = added.get(chunk[DOC], 0) + chunk[TOKENS]
                if step == 0:
                    written += chunk[TOKENS]
        self.finished(access)
        return added, written

    def _steps(self, prompt: int, output_tokens: int) -> list[tuple[int, int]]:
        """(tokens whose KV exists after the step, how many steps in a row see that many offloadable tokens)."""
        last = prompt + output_tokens - 1  # the last sampled token never gets KV (scheduler.py 1832-1836)
        if self.offload_prompt_only or output_tokens == 1:
            return [(prompt, output_tokens + 1)]  # prefill, each decode step, the step after the end
        size = self.chunk_size
        out: list[tuple[int, int]] = [(prompt, 1)]
        # decode step j (1..output_tokens-1) has prompt + j tokens; the step after the end has ``last`` again
        for tokens in range(prompt + 1, last + 1):
            if out[-1][0] // size == tokens // size:
                out[-1] = (out[-1][0], out[-1][1] + 1)
            else:
                out.append((tokens, 1))
        out[-1] = (out[-1][0], out[-1][1] + 1)
        return out

    # -- the scheduler's side, step by step -------------------------------------

    def offload_keys(self, req: Request) -> list[int]:
        """Offload block ``i`` is keyed by its last GPU block's key (scheduler.py 412-429): prompt's, then generated."""
        return req.block_keys[self.blocks_per_chunk - 1 :: self.blocks_per_chunk]

    def first_offered(self, gpu_hit: int, hit: int) -> int:
        """The first offload block a request offers: after a load, the one after the hit (scheduler.py 1468-1472);
        with none, block 0."""
        return -(-(gpu_hit + hit) // self.chunk_size) if hit else 0

    def offer_of(self, req: Request, keys: list[int], start: int, end: int) -> Offer:
        size = self.chunk_size
        return [(keys[i], (req.doc if i >= req.shared_chunks else -1, i, size), (i + 1) * size) for i in range(start, end)]

    def find(self, req: Request, gpu_hit: int) -> tuple[int, list[int]] | None:
        """The lookup (``_lookup_complete_chunks``): tokens beyond ``gpu_hit`` and the blocks holding them; None when
        it is deferred, a hit block being still written (``HIT_PENDING``, scheduler.py 786-803) or loaded by
        another request (1022-1044)."""
        size, n = self.chunk_size, req.prompt_tokens
        keys = req.chunk_keys[: n // size]
        max_hit = min(n, len(keys) * size)
        if max_hit - gpu_hit < size:
            return 0, []
        start = gpu_hit // size
        chunks, pending = self.chunks, self.pending
        found = 0
        deferred = False
        for key in keys[start : -(-max_hit // size)]:
            if key not in chunks:
                break
            found += 1
            deferred |= key in pending
        if found == 0:
            return 0, []  # scheduler.py 967-968
        if deferred:
            return None
        hit = min(max_hit, (start + found) * size) - gpu_hit
        if hit < size:
            return 0, []
        loaded = keys[start : -(-(gpu_hit + hit) // size)]
        if self.pinned and any(k in self.pinned for k in loaded):
            return None
        return hit, loaded

    def load(self, keys: Sequence[int], first_index: int, access: RequestAccess) -> None:
        """``prepare_load`` (manager.py 214-241): pin each block read (the request's blocks from ``first_index`` on),
        a request access and a reuse."""
        pinned, size = self.pinned, self.chunk_size
        for k in keys:
            pinned[k] = pinned.get(k, 0) + 1
        self._see(access, [(k, (first_index + i + 1) * size) for i, k in enumerate(keys)], reused=keys)

    def loaded(self, keys: Sequence[int]) -> None:
        """``complete_load`` (manager.py 247-258): the load's pins go."""
        pinned = self.pinned
        for k in keys:
            left = pinned[k] - 1
            if left:
                pinned[k] = left
            else:
                del pinned[k]

    def dropped(self, offer: Offer, seq: int) -> None:
        """Request ``seq`` will never store ``offer``'s blocks it could not (logged for explanations)."""
        log = self.dropped_log
        if log is not None:
            chunks = self.chunks
            for k, _, _ in offer:
                if k not in chunks:
                    log[k] = seq

    def stored(self, keys: Sequence[int]) -> None:
        """``complete_store`` (manager.py 375-392): the blocks still held become ready."""
        self.pending.difference_update(keys)

    def finished(self, access: RequestAccess) -> None:
        """``on_request_finished`` (manager.py 421-448): the policy sees every block the request saw, head to tail."""
        if access.finished:
            return
        access.finished = True
        seen = access.seen
        self.native.finish(sorted(seen, key=seen.__getitem__), access.inserted - access.reused, access.reused, access)

    # -- the manager's side ---------------------------------------------------

    def prepare_store(
        self, offer: Offer, evicted: list[StoredChunk], access: RequestAccess, pending: bool = False
    ) -> list[StoredChunk] | None:
        """One ``prepare_store``: the chunks it stored (not ready until ``stored`` when ``pending``), or None when it
        could not evict enough."""
        keys = [k for k, _, _ in offer]
        if self.counts is not None:
            self.counts.offer(keys)
        chunks, not_ready = self.chunks, self.pending
        ready = [k for k in keys if k in chunks and k not in not_ready]  # a block being written is no reuse (274-280)
        new = [item for item in offer if item[0] not in chunks]
        if self.counts is not None:
            counts, threshold = self.counts, self.store_threshold
            new = [item for item in new if counts.get(item[0]) >= threshold]
        policy = self.native
        misses = [k for k, _, _ in new if k not in access.missed]
        if misses:
            policy.store_miss(misses)
            access.missed.update(misses)
        recorded = {k for k, _, _ in new}.union(ready)
        self._see(access, [(k, p) for k, _, p in offer if k in recorded], reused=ready)
        if not new:
            return []
        need = len(new) - (self.capacity_chunks - len(chunks))
        if need > 0:
            unevictable = not_ready.union(self.pinned) if not_ready or self.pinned else set()
            if need > len(chunks) - len(unevictable):
                return None  # manager.py 325-327
            gone = policy.evict(need, set(keys).union(unevictable))
            if gone is None:
                return None
            for key, chunk in gone:
                self.used_tokens -= self._forget(key, chunk, evicted)
        journal, doc_tokens = self.journal, self.doc_tokens
        for key, chunk, position in new:
            policy.insert(key, chunk, position, access)
            access.inserted.add(key)
            self.used_tokens += chunk[TOKENS]
            doc_tokens[chunk[DOC]] = doc_tokens.get(chunk[DOC], 0) + chunk[TOKENS]
            if journal is not None:
                journal.append((True, key))
        if pending:
            not_ready.update(k for k, _, _ in new)
        return [chunk for _, chunk, _ in new]
