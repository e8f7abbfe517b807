"""Compiled loops (numba): dense ids, LRU stack depths, and the trace replay through vLLM's block pool and a CPU tier.

The replay is one source compiled twice: with the miss attribution of
``sim.engine.explain_kernel`` (its step written in the loop) and without it (``_make_replay_from``). Imported only through ``sim.engine.compiled``, which decides when they are worth
numba's import and start-up cost. The pure-Python code (``sim.analysis.stack_distance``,
``sim.blocks.pool``, ``sim.blocks.free_queue``, ``sim.tiers.chunk_store``, ``sim.engine.loop``) is the
reference: the tests check that these loops give identical results on random
workloads and on the bundled Mooncake sample. Each loop below names the
Python code it follows, line for line in meaning.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from sim.engine.explain_kernel import (
    BY_HI,
    BY_LO,
    CHAIN,
    CPU_AT,
    END,
    EVICTED,
    FIRST_END,
    FIRST_SEEN,
    GPU_AT,
    INFINITE,
    LAST,
    PARTIAL,
    REACH_ALL,
    REACH_FIRST,
    START,
    grown,
    in_seq_order,
)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: consecutive ids spread over the table


@njit(cache=True)
def _grow(keys: np.ndarray, vals: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    new_keys = np.empty(keys.size * 2, np.int64)
    new_vals = np.full(keys.size * 2, -1, np.int32)
    mask = new_keys.size - 1
    shift = np.uint64(64 - bits)
    for s in range(keys.size):
        v = vals[s]
        if v < 0:
            continue
        k = keys[s]
        slot = np.int64((np.uint64(k) * _GOLDEN) >> shift)
        while new_vals[slot] >= 0:
            slot = (slot + 1) & mask
        new_keys[slot] = k
        new_vals[slot] = v
    return new_keys, new_vals


@njit(cache=True)
def _dense_by_table(ids: np.ndarray, top: int) -> tuple[np.ndarray, int]:
    """Ids from 0 to ``top``: a direct table of ``top + 1`` entries (Mooncake's ids are small consecutive integers)."""
    table = np.full(top + 1, -1, np.int32)
    out = np.empty(ids.size, np.int32)
    count = 0
    for t in range(ids.size):
        k = ids[t]
        v = table[k]
        if v < 0:
            v = table[k] = count
            count += 1
        out[t] = v
    return out, count


@njit(cache=True)
def _dense_by_hash(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Any 64-bit ids: an open-addressing table that doubles when half full."""
    bits = 16
    keys = np.empty(1 << bits, np.int64)
    vals = np.full(1 << bits, -1, np.int32)
    out = np.empty(ids.size, np.int32)
    count = 0
    for t in range(ids.size):
        k = ids[t]
        mask = keys.size - 1
        slot = np.int64((np.uint64(k) * _GOLDEN) >> np.uint64(64 - bits))
        while True:
            v = vals[slot]
            if v < 0:
                vals[slot] = count
                keys[slot] = k
                out[t] = count
                count += 1
                if count * 2 > keys.size:
                    bits += 1
                    keys, vals = _grow(keys, vals, bits)
                break
            if keys[slot] == k:
                out[t] = v
                break
            slot = (slot + 1) & mask
    return out, count


@njit(cache=True)
def dense_ids(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Each id replaced by 0, 1, 2, ... (int32) in order of first appearance, and how many there are."""
    top = 0
    for t in range(ids.size):
        top = max(top, ids[t])  # ids are >= 0 (the trace reader checks)
    if top < 4 * ids.size + 1024:
        return _dense_by_table(ids, top)
    return _dense_by_hash(ids)


@njit(cache=True)
def stack_depths(dense: np.ndarray, distinct_ids: int) -> tuple[np.ndarray, int]:
    """``sim.analysis.stack_distance.stack_profile``'s loop: the histogram of LRU stack depths (index = depth)."""
    tree, depth_count, last = stack_state(dense.size, distinct_ids)
    return depth_count, stack_depths_from(dense, 0, dense.size, tree, depth_count, last, 0)


@njit(cache=True)
def stack_state(n: int, distinct_ids: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What ``stack_depths_from`` carries from one slice of the stream to the next."""
    tree = np.zeros(n + 1, np.int32)  # dead positions; index j is position j - 1
    depth_count = np.zeros(n + 1, np.int32)  # n < 2**31: the trace reader's limits
    last = np.full(distinct_ids, -1, np.int32)
    return tree, depth_count, last


@njit(cache=True)
def stack_depths_from(
    dense: np.ndarray, start: int, stop: int, tree: np.ndarray, depth_count: np.ndarray, last: np.ndarray, distinct: int
) -> int:
    """``stack_depths`` over ``dense[start:stop]``, continuing from the state the earlier slices left; the distinct
    ids seen so far. Slices run one after another give what one call over the whole stream gives."""
    n = dense.size
    for t in range(start, stop):
        key = dense[t]
        p = last[key]
        last[key] = t
        if p < 0:
            distinct += 1
            continue
        dead = 0
        i = p
        while i:
            dead += tree[i]
            i &= i - 1
        depth_count[distinct - p + dead] += 1
        i = p + 1
        while i <= n:
            tree[i] += 1
            i += i & -i
    return distinct


# Doubly linked lists threaded through index arrays (vLLM's free queue, LMCache's LRU order): O(1) anywhere.


@njit(cache=True, inline="always")
def _unlink(nxt: np.ndarray, prv: np.ndarray, node: int) -> None:
    p, q = prv[node], nxt[node]
    nxt[p] = q
    prv[q] = p


@njit(cache=True, inline="always")
def _push_back(nxt: np.ndarray, prv: np.ndarray, sentinel: int, node: int) -> None:
    last = prv[sentinel]
    nxt[last] = node
    prv[node] = last
    nxt[node] = sentinel
    prv[sentinel] = node


@njit(cache=True, inline="always")
def _push_front(nxt: np.ndarray, prv: np.ndarray, sentinel: int, node: int) -> None:
    _push_back(prv, nxt, sentinel, node)  # the front is the back of the list read backwards


@njit(cache=True, inline="always")
def _pop_front(nxt: np.ndarray, prv: np.ndarray, sentinel: int) -> int:
    node = nxt[sentinel]
    _unlink(nxt, prv, node)
    return node


# ``replay_from``'s block hash for a block without one, and for a generated tokens' block (a key no prompt has).
_UNHASHED = -1
_GENERATED = -2

# Columns of ``replay_from``'s result, one row per request.
GPU_HIT, CPU_HIT, COMPUTED, STORED, GPU_EV_BLOCKS, GPU_EV_FIRST, GPU_EV_LAST, CPU_EV_TOKENS, CPU_EV_FIRST, CPU_EV_LAST = range(10)
COLUMNS = 10


@njit(cache=True, inline="always")
def _evict_chunk(nxt: np.ndarray, prv: np.ndarray, sentinel: int, held: np.ndarray, index: np.ndarray, chunk: int, row: np.ndarray) -> int:
    """ChunkStore's LRU eviction: the front chunk goes (returned); the request's row counts its tokens and positions."""
    old = _pop_front(nxt, prv, sentinel)
    held[old] = False
    idx = index[old]
    if row[CPU_EV_TOKENS] == 0:
        row[CPU_EV_FIRST] = idx
        row[CPU_EV_LAST] = idx
    else:
        row[CPU_EV_FIRST] = min(row[CPU_EV_FIRST], idx)
        row[CPU_EV_LAST] = max(row[CPU_EV_LAST], idx)
    row[CPU_EV_TOKENS] += chunk
    return old


@njit(cache=True)
def replay_state(
    offsets: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray, block: int, num_blocks: int,
    distinct_keys: int, cpu_capacity_tokens: int,
) -> tuple[np.ndarray, ...]:
    """The replay's state before the first request: the pool (every block free), an empty CPU tier, the result's
    rows; ``replay_from`` carries it from one slice of requests to the next (``used[0]``: chunks held; ``used[1]``:
    the attribution's ``by`` rows, whose arrays ``sim.engine.explain_kernel.attribution_state`` makes)."""
    n_req = offsets.size - 1
    sentinel = num_blocks
    nxt = np.empty(num_blocks + 1, np.int64)
    prv = np.empty(num_blocks + 1, np.int64)
    nxt[sentinel] = sentinel
    prv[sentinel] = sentinel
    for b in range(1, num_blocks):  # block 0 is the null block: never free, never cached
        _push_back(nxt, prv, sentinel, b)
    block_hash = np.full(num_blocks, -1, np.int64)
    block_pos = np.zeros(num_blocks, np.int64)
    cached = np.full(distinct_keys, -1, np.int32)
    copy_top = np.full(distinct_keys, -1, np.int32)
    copy_prev = np.full(num_blocks, -1, np.int64)
    copy_next = np.full(num_blocks, -1, np.int64)

    cpu_size = distinct_keys + 1 if cpu_capacity_tokens > 0 else 1
    c_sentinel = cpu_size - 1
    c_in = np.zeros(cpu_size, np.bool_)
    c_nxt = np.empty(cpu_size, np.int32)
    c_prv = np.empty(cpu_size, np.int32)
    c_index = np.zeros(cpu_size, np.int32)
    c_nxt[c_sentinel] = c_sentinel
    c_prv[c_sentinel] = c_sentinel
    used = np.zeros(2, np.int64)

    longest = 0
    for r in range(n_req):
        longest = max(longest, offsets[r + 1] - offsets[r], (input_tokens[r] + output_tokens[r] - 2) // block + 1)
    blocks = np.empty(max(longest, 1), np.int64)
    out = np.zeros((n_req, COLUMNS), np.int64)
    return (nxt, prv, block_hash, block_pos, cached, copy_top, copy_prev, copy_next, c_in, c_nxt, c_prv, c_index, used,
            blocks, out)


def _make_replay_from(explain: bool) -> Callable[..., np.ndarray]:
    """The replay kernel, compiled with the miss attribution (``explain``) or without it: one source.

    numba freezes ``explain`` as a constant when it compiles the closure (and
    its on-disk cache keys each closure by that value), so each ``if explain:``
    is pruned at compile time: the plain replay carries no attribution at all
    (no call, no store, no test) and runs as fast as when it was a loop of its
    own. Sharing the loop's steps as njit helpers instead made the compiled
    GPU+CPU replay 1.75x slower (measured).
    """

    @njit(cache=True)
    def replay_from(
        keys: np.ndarray, offsets: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray, block: int,
        chunk_blocks: int, cpu_capacity_tokens: int, lmcache: bool, first: int, stop: int,
        nxt: np.ndarray, prv: np.ndarray, block_hash: np.ndarray, block_pos: np.ndarray, cached: np.ndarray,
        copy_top: np.ndarray, copy_prev: np.ndarray, copy_next: np.ndarray, c_in: np.ndarray, c_nxt: np.ndarray,
        c_prv: np.ndarray, c_index: np.ndarray, used: np.ndarray, blocks: np.ndarray, out: np.ndarray,
        g_gone: np.ndarray, c_gone: np.ndarray, explained: np.ndarray, by: np.ndarray,
    ) -> np.ndarray:
        """Requests ``first`` .. ``stop - 1`` of a trace, one after another, through vLLM's block pool and
        (``cpu_capacity_tokens`` > 0) a CPU tier, on the state ``replay_state`` made and earlier slices left
        (changed in place), and, explaining, on ``sim.engine.explain_kernel.attribution_state``'s arrays: slices one
        after another give exactly what one call over them all gives. Returns ``by`` (a new array when the
        attribution outgrew it).

        Follows ``sim.engine.loop.Engine.process`` for a trace request (one document,
        no shared prefix, whole chunks only), with:
        - the pool of ``sim.blocks.pool.GpuBlockPool`` (free order ``vllm``, policy
          ``lru``, block 0 the null block): the free queue is the doubly linked
          list of ``sim.blocks.free_queue.FreeBlockQueue`` (sentinel ``num_blocks``);
          a hash held by two blocks keeps its extra blocks on a per-hash stack
          (``GpuBlockPool._copies``), and reusing one of them is no eviction;
        - the CPU tier of ``sim.tiers.chunk_store.ChunkStore`` with policy ``lru``:
          a hit moves a chunk to the back, a store evicts from the front. Under
          the brief's rules (``Engine._lookup_external``, ``_write_through``) only
          the loaded chunks are refreshed and only chunks holding computed tokens
          stored; under LMCache's (``lmcache``: ``Engine._lookup_lmcache``,
          ``_store_lmcache``, ``ChunkStore.store_reserving``) the lookup refreshes
          its whole hit, last chunk first, and the store reserves room for every
          chunk from LMCache's own hit on before it skips the ones held;
        - vLLM's decode (``sim.simulation.replay.trace_requests``): the ``output_tokens[r] - 1``
          generated tokens that get KV extend the request's blocks, and its full
          blocks past the prompt's are cached under keys of their own (no later
          prompt holds them), so they can only be evicted, never hit.
        ``keys`` are dense (0 .. distinct_keys - 1); request ``r`` has
        ``keys[offsets[r]:offsets[r + 1]]``, its last block maybe partial. Its
        row of ``out`` gets the ``COLUMNS``; explaining, its row of ``explained``
        gets ``sim.engine.explain_kernel``'s.
        """
        sentinel = nxt.size - 1
        has_cpu = cpu_capacity_tokens > 0
        chunk = block * chunk_blocks
        c_sentinel = c_nxt.size - 1
        c_used = used[0]
        by_used = used[1]
        cap_chunks = cpu_capacity_tokens // chunk if has_cpu else 0

        for r in range(first, stop):
            lo = offsets[r]
            n = input_tokens[r]
            nfull = n // block
            # Decode: tokens n .. n + output - 2 get KV (the last one sampled has none yet).
            alloc = offsets[r + 1] - lo
            nhash = nfull
            if output_tokens[r] > 1:
                kv_tokens = n + output_tokens[r] - 1
                alloc = max(alloc, -(-kv_tokens // block))
                nhash = kv_tokens // block
            limit = min((n - 1) // block, nfull)  # vLLM recomputes the last token
            # GpuBlockPool.find_prefix, then touch: hit blocks leave the free queue.
            h = 0
            while h < limit:
                b = cached[keys[lo + h]]
                if b < 0:
                    break
                blocks[h] = b
                h += 1
            for j in range(h):
                _unlink(nxt, prv, blocks[j])
            gpu_hit = h * block

            aligned = 0
            cpu_tokens = 0
            found = 0
            nck = nfull // chunk_blocks
            if has_cpu and lmcache:
                # Engine._lookup_lmcache: the chunk prefix over the whole prompt, refreshed last chunk first.
                while found < nck and c_in[keys[lo + (found + 1) * chunk_blocks - 1]]:
                    found += 1
                for i in range(found - 1, -1, -1):
                    k = keys[lo + (i + 1) * chunk_blocks - 1]
                    _unlink(c_nxt, c_prv, k)
                    _push_back(c_nxt, c_prv, c_sentinel, k)
                aligned = min(found * chunk, n - 1)
                if aligned > gpu_hit:
                    cpu_tokens = aligned - gpu_hit
            elif has_cpu and nck * chunk > gpu_hit:
                # Engine._lookup_external: the contiguous chunk prefix in CPU, beyond the GPU hit.
                found = 0
                while found < nck and c_in[keys[lo + (found + 1) * chunk_blocks - 1]]:
                    found += 1
                aligned = nck * chunk if found == nck else found * chunk
                aligned = min(aligned, n - 1)
                if aligned > gpu_hit:
                    cpu_tokens = aligned - gpu_hit
                    for i in range(gpu_hit // chunk, -(-aligned // chunk)):
                        k = keys[lo + (i + 1) * chunk_blocks - 1]
                        _unlink(c_nxt, c_prv, k)  # ChunkStore.touch: to the back
                        _push_back(c_nxt, c_prv, c_sentinel, k)
            hit_end = max(gpu_hit, aligned)
            if explain:
                # sim.engine.explain_kernel's step (the columns of ``explained[r]``, runs of ``by``), at lookup time,
                # before this request's own evictions, from what each tier holds and the request that evicted each
                # id last. Written here, not called: numba counts references to each array a call is passed, which
                # cost more than the step itself (about 110 ns a request, measured).
                if by_used + 2 * alloc > by.shape[0]:  # room for the step's rows: at most one per block per tier
                    by = grown(by, by_used, by_used + 2 * alloc)
                # Attributor._gpu (the blocks [h, limit) missed), then Attributor._offload with one tier (the chunks
                # holding [hit_end, end), token-exact at its ends): structural causes first (sim.explain.causes),
                # then each unit by what its tier holds and lost; a row of by per run of units one request evicted.
                explained[r, GPU_AT + PARTIAL] = n - nfull * block
                explained[r, GPU_AT + LAST] = (nfull - limit) * block
                covered = nck * chunk
                end = min(covered, n)
                if has_cpu:
                    explained[r, CPU_AT + PARTIAL] = max(0, n - max(covered, hit_end))
                    if end == n:
                        explained[r, CPU_AT + LAST] = 1
                        end = n - 1
                gpu_bound = 0
                for at in range(GPU_AT, CPU_AT + 1 if has_cpu else GPU_AT + 1, CPU_AT - GPU_AT):
                    gpu = at == GPU_AT
                    unit, unit_blocks = (block, 1) if gpu else (chunk, chunk_blocks)
                    lo_tokens, hi_tokens = (h * block, limit * block) if gpu else (hit_end, end)
                    j0 = lo_tokens // unit
                    j1 = -(-hi_tokens // unit) if hi_tokens > lo_tokens else j0
                    unseen_at = j1 - j0
                    first_ev = last_ev = -1
                    chain = evicted = unseen = 0
                    runs_end = by_used
                    for j in range(j0, j1):
                        k = keys[lo + (j + 1) * unit_blocks - 1]
                        tokens = min((j + 1) * unit, hi_tokens) - max(j * unit, lo_tokens)
                        if (cached[k] >= 0) if gpu else c_in[k]:
                            chain += tokens
                            continue
                        seq = g_gone[k] if gpu else c_gone[k]
                        if seq < 0:
                            if not unseen:
                                unseen_at = j - j0
                            unseen += tokens
                            continue
                        if not evicted:
                            first_ev = j - j0
                        evicted += tokens
                        last_ev = j - j0
                        if runs_end > by_used and by[runs_end - 1, 0] == seq:
                            by[runs_end - 1, 1] += tokens
                        else:
                            by[runs_end, 0] = seq
                            by[runs_end, 1] = tokens
                            runs_end += 1
                    explained[r, at + FIRST_SEEN] = unseen
                    explained[r, at + EVICTED] = evicted
                    explained[r, at + CHAIN] = chain
                    explained[r, at + BY_LO] = by_used
                    if evicted:
                        explained[r, at + START] = max((j0 + first_ev) * unit, lo_tokens)
                        explained[r, at + END] = min((j0 + last_ev + 1) * unit, hi_tokens)
                        explained[r, at + FIRST_END] = min((j0 + first_ev + 1) * unit, hi_tokens)
                        explained[r, at + REACH_FIRST] = unseen_at > first_ev
                        explained[r, at + REACH_ALL] = unseen_at > last_ev
                        by_used = in_seq_order(by, by_used, runs_end) if runs_end - by_used > 1 else runs_end
                    explained[r, at + BY_HI] = by_used
                    if gpu:
                        gpu_bound = (j0 + unseen_at) * block
                        explained[r, INFINITE] = gpu_bound
                if has_cpu:
                    # Attributor._offload_bound: past the GPU's bound only if every full chunk's block was ever in
                    # the GPU.
                    reach = gpu_bound // chunk
                    if gpu_bound == limit * block and nck:
                        every = True
                        for j in range(reach, nck):
                            k = keys[lo + (j + 1) * chunk_blocks - 1]
                            if cached[k] < 0 and g_gone[k] < 0:
                                every = False
                                break
                        if every:
                            reach = nck
                    explained[r, INFINITE] = max(gpu_bound, min(covered if reach == nck else reach * chunk, n - 1))

            # GpuBlockPool.allocate: pop from the front; a cached block popped is evicted (a copy is only dropped).
            ev_blocks = 0
            ev_first = 0
            ev_last = 0
            for j in range(h, alloc):
                b = _pop_front(nxt, prv, sentinel)
                blocks[j] = b
                key = block_hash[b]
                if key == _UNHASHED:
                    continue
                block_hash[b] = _UNHASHED
                if key == _GENERATED:
                    pass
                elif copy_top[key] >= 0:  # GpuBlockPool._drop_copy
                    if cached[key] == b:
                        t = copy_top[key]
                        cached[key] = t
                        copy_top[key] = copy_prev[t]
                        if copy_prev[t] >= 0:
                            copy_next[copy_prev[t]] = -1
                        copy_prev[t] = -1
                    else:
                        p, q = copy_prev[b], copy_next[b]
                        if q >= 0:
                            copy_prev[q] = p
                        else:
                            copy_top[key] = p
                        if p >= 0:
                            copy_next[p] = q
                        copy_prev[b] = -1
                        copy_next[b] = -1
                    continue
                else:
                    cached[key] = -1
                    if explain:
                        g_gone[key] = r
                pos = block_pos[b]
                if ev_blocks == 0:
                    ev_first = pos
                    ev_last = pos
                elif pos < ev_first:
                    ev_first = pos
                elif pos > ev_last:
                    ev_last = pos
                ev_blocks += 1

            # GpuBlockPool.cache_blocks: the full blocks past the hit get their hashes.
            for i in range(h, nfull):
                b = blocks[i]
                key = keys[lo + i]
                block_hash[b] = key
                block_pos[b] = i
                if cached[key] >= 0:
                    t = copy_top[key]
                    copy_prev[b] = t
                    copy_next[b] = -1
                    if t >= 0:
                        copy_next[t] = b
                    copy_top[key] = b
                else:
                    cached[key] = b
            for i in range(nfull, nhash):  # the generated tokens' full blocks
                b = blocks[i]
                block_hash[b] = _GENERATED
                block_pos[b] = i

            # GpuBlockPool.free (vllm order): unhashed blocks to the front in prompt order, hashed ones to the back tail first.
            for j in range(alloc - 1, nhash - 1, -1):
                _push_front(nxt, prv, sentinel, blocks[j])
            for j in range(nhash - 1, -1, -1):
                _push_back(nxt, prv, sentinel, blocks[j])

            # Engine._write_through and ChunkStore.put_many: chunks holding computed tokens, evicting from the front.
            written = 0
            row = out[r]
            if has_cpu and lmcache:
                # Engine._store_lmcache, ChunkStore.store_reserving: every chunk from LMCache's own hit on gets
                # room first (evicting, even for a chunk already held); then the ones not held are put.
                count = 0
                for i in range(found, nck):
                    while c_used + count + 1 > cap_chunks and c_used > 0:
                        old = _evict_chunk(c_nxt, c_prv, c_sentinel, c_in, c_index, chunk, row)
                        if explain:
                            c_gone[old] = r
                        c_used -= 1
                    if c_used + count + 1 > cap_chunks:
                        break
                    count += 1
                for i in range(found, found + count):
                    k = keys[lo + (i + 1) * chunk_blocks - 1]
                    if c_in[k]:
                        continue
                    c_in[k] = True
                    c_index[k] = i
                    _push_back(c_nxt, c_prv, c_sentinel, k)
                    c_used += 1
                written = count * chunk
            elif has_cpu:
                for i in range(hit_end // chunk, nck):
                    if i * chunk + chunk <= hit_end:
                        continue
                    k = keys[lo + (i + 1) * chunk_blocks - 1]
                    if c_in[k]:
                        continue
                    while c_used + 1 > cap_chunks:
                        old = _evict_chunk(c_nxt, c_prv, c_sentinel, c_in, c_index, chunk, row)
                        if explain:
                            c_gone[old] = r
                        c_used -= 1
                    c_in[k] = True
                    c_index[k] = i
                    _push_back(c_nxt, c_prv, c_sentinel, k)
                    c_used += 1
                    written += chunk

            row[GPU_HIT] = gpu_hit
            row[CPU_HIT] = cpu_tokens
            row[COMPUTED] = n - hit_end
            row[STORED] = written
            row[GPU_EV_BLOCKS] = ev_blocks
            row[GPU_EV_FIRST] = ev_first
            row[GPU_EV_LAST] = ev_last
        used[0] = c_used
        used[1] = by_used
        return by

    return replay_from


replay_from = _make_replay_from(False)
explained_replay_from = _make_replay_from(True)
