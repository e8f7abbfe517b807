"""The miss attribution of ``sim.explain`` compiled (numba), for the trace replay that ``sim.kernels`` runs compiled.

``explain_replay`` takes the arrays ``sim.kernels.replay_blocks`` takes and
returns, per request, the tokens of each cause (``gpu_miss`` and
``computed``), the evicted span of each tier with the requests that evicted
it, and the infinite-cache bound: what ``sim.explain.observer.Attributor``
gives the Python engine for the same trace (the tests compare them on random
traces and the Mooncake sample). It runs the same pool and CPU tier again
(the replay kernel's loop, its comments there) with two additions: each tier
remembers, per dense id, the request that evicted it last, and each request is
attributed at lookup time. Whether a unit was ever held is then
``held now or evicted before``: a unit leaves a tier only by eviction.

``first_hit_tokens`` and ``needed_tokens`` are not computed here (as in the
Python replay: ``kvscope explain --trace`` searches them by re-simulation).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sim.kernels import _pop_front, _push_back, _push_front, _unlink

# Per tier (GPU, then CPU), these columns: tokens per cause, the evicted span (start, end, end of its first
# unit), whether any capacity could serve its first unit / all of it, and the rows of its ``by`` list.
PARTIAL, LAST, FIRST_SEEN, EVICTED, CHAIN, START, END, FIRST_END, REACH_FIRST, REACH_ALL, BY_LO, BY_HI = range(12)
TIER_COLUMNS = 12
GPU_AT, CPU_AT = 0, TIER_COLUMNS
INFINITE = 2 * TIER_COLUMNS
# The replay's own figures, as the replay kernel's table has them: the caller checks they agree (same rules).
GPU_HIT = INFINITE + 1
COMPUTED = INFINITE + 2
COLUMNS = COMPUTED + 1


@njit(cache=True)
def _append_by(by: np.ndarray, used: int, seqs: np.ndarray, tokens: np.ndarray, count: int) -> tuple[np.ndarray, int]:
    """Append (seq, tokens) summed per seq, in seq order (``sorted(by.items())``); ``by`` doubles when full."""
    order = np.argsort(seqs[:count], kind="mergesort")
    i = 0
    while i < count:
        s = seqs[order[i]]
        t = 0
        while i < count and seqs[order[i]] == s:
            t += tokens[order[i]]
            i += 1
        if used == by.shape[0]:
            grown = np.empty((by.shape[0] * 2, 2), np.int64)
            grown[:used] = by[:used]
            by = grown
        by[used, 0] = s
        by[used, 1] = t
        used += 1
    return by, used


@njit(cache=True)
def attribute(
    row: np.ndarray, r: int, keys: np.ndarray, lo: int, n: int, block: int, chunk_blocks: int, h: int, hit_end: int,
    cached: np.ndarray, g_gone: np.ndarray, c_in: np.ndarray, c_gone: np.ndarray, has_cpu: bool, by: np.ndarray,
    used: int,
) -> tuple[np.ndarray, int]:
    """Request ``r``'s attribution into ``row``, at lookup time (the GPU hit ``h`` blocks, the stack ``hit_end``
    tokens), from what each tier holds (``cached`` >= 0, ``c_in``) and the request that evicted each id last
    (``g_gone``, ``c_gone``: -1 never); its ``by`` rows appended to ``by`` (returned with the rows used).

    The one call a replay loop makes per request to be explained, besides writing ``g_gone[id] = r`` and
    ``c_gone[id] = r`` where it evicts.
    """
    nfull = n // block
    most = min((n - 1) // block, nfull)
    chunk = block * chunk_blocks
    nck = nfull // chunk_blocks
    seqs = np.empty(max(nfull, 1), np.int64)
    toks = np.empty(max(nfull, 1), np.int64)
    # Attributor._gpu: the blocks [h, most) missed; structural causes first (sim.explain.causes).
    g = GPU_AT
    row[g + PARTIAL] = n - nfull * block
    row[g + LAST] = (nfull - most) * block
    unseen_at = most - h
    first_ev = -1
    last_ev = -1
    count = 0
    for i in range(h, most):
        key = keys[lo + i]
        if cached[key] >= 0:
            row[g + CHAIN] += block
        elif g_gone[key] >= 0:
            row[g + EVICTED] += block
            if first_ev < 0:
                first_ev = i - h
            last_ev = i - h
            seqs[count] = g_gone[key]
            toks[count] = block
            count += 1
        else:
            row[g + FIRST_SEEN] += block
            unseen_at = min(unseen_at, i - h)
    row[g + BY_LO] = used
    if count:
        row[g + START] = (h + first_ev) * block
        row[g + END] = (h + last_ev + 1) * block
        row[g + FIRST_END] = (h + first_ev + 1) * block
        row[g + REACH_FIRST] = unseen_at > first_ev
        row[g + REACH_ALL] = unseen_at > last_ev
        by, used = _append_by(by, used, seqs, toks, count)
    row[g + BY_HI] = used
    gpu_bound = (h + unseen_at) * block
    row[INFINITE] = gpu_bound

    if has_cpu:
        # Attributor._offload with one tier: the chunks holding [hit_end, end), token-exact at the ends.
        c = CPU_AT
        covered = nck * chunk
        row[c + PARTIAL] = max(0, n - max(covered, hit_end))
        end = min(covered, n)
        if end == n:
            row[c + LAST] = 1
            end = n - 1
        row[c + BY_LO] = used
        if end > hit_end:
            j0 = hit_end // chunk
            j1 = -(-end // chunk)
            unseen_at = j1 - j0
            first_ev = -1
            last_ev = -1
            count = 0
            for j in range(j0, j1):
                k = keys[lo + (j + 1) * chunk_blocks - 1]
                t = min((j + 1) * chunk, end) - max(j * chunk, hit_end)
                if c_in[k]:
                    row[c + CHAIN] += t
                elif c_gone[k] >= 0:
                    row[c + EVICTED] += t
                    if first_ev < 0:
                        first_ev = j - j0
                    last_ev = j - j0
                    seqs[count] = c_gone[k]
                    toks[count] = t
                    count += 1
                else:
                    row[c + FIRST_SEEN] += t
                    unseen_at = min(unseen_at, j - j0)
            if count:
                row[c + START] = max((j0 + first_ev) * chunk, hit_end)
                row[c + END] = min((j0 + last_ev + 1) * chunk, end)
                row[c + FIRST_END] = min((j0 + first_ev + 1) * chunk, end)
                row[c + REACH_FIRST] = unseen_at > first_ev
                row[c + REACH_ALL] = unseen_at > last_ev
                by, used = _append_by(by, used, seqs, toks, count)
        row[c + BY_HI] = used
        # Attributor._offload_bound: past the GPU's bound only if every full chunk's block was ever in the GPU.
        found = gpu_bound // chunk
        if gpu_bound == most * block and nck:
            every = True
            for j in range(found, nck):
                k = keys[lo + (j + 1) * chunk_blocks - 1]
                if cached[k] < 0 and g_gone[k] < 0:
                    every = False
                    break
            if every:
                found = nck
        bound = min(covered if found == nck else found * chunk, n - 1)
        row[INFINITE] = max(gpu_bound, bound)
    return by, used


@njit(cache=True)
def explain_replay(
    keys: np.ndarray,
    offsets: np.ndarray,
    input_tokens: np.ndarray,
    block: int,
    num_blocks: int,
    distinct_keys: int,
    chunk_blocks: int,
    cpu_capacity_tokens: int,
    lmcache: bool,
    output_tokens: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``(table, by)``: one row of ``COLUMNS`` per request; ``by`` rows (seq, tokens), a tier's rows ``BY_LO:BY_HI``.

    The CPU tier follows LMCache's rules when ``lmcache`` (its lookup refreshes the whole hit, its store
    reserves room from its own hit on), else the brief's: as ``sim.engine.Engine`` for that backend.
    ``output_tokens[r]`` > 1 grows request ``r``'s KV as vLLM's decode does: its generated tokens but the
    last get blocks, the full ones cached under keys no prompt has (they can be evicted, never hit).
    """
    n_req = offsets.size - 1
    sentinel = num_blocks
    nxt = np.empty(num_blocks + 1, np.int64)
    prv = np.empty(num_blocks + 1, np.int64)
    nxt[sentinel] = sentinel
    prv[sentinel] = sentinel
    for b in range(1, num_blocks):
        _push_back(nxt, prv, sentinel, b)
    block_hash = np.full(num_blocks, -1, np.int64)
    cached = np.full(distinct_keys, -1, np.int32)
    copy_top = np.full(distinct_keys, -1, np.int32)
    copy_prev = np.full(num_blocks, -1, np.int64)
    copy_next = np.full(num_blocks, -1, np.int64)
    g_gone = np.full(distinct_keys, -1, np.int32)  # the request that evicted the id from the GPU last

    has_cpu = cpu_capacity_tokens > 0
    chunk = block * chunk_blocks
    cpu_size = distinct_keys + 1 if has_cpu else 1
    c_sentinel = cpu_size - 1
    c_in = np.zeros(cpu_size, np.bool_)
    c_gone = np.full(cpu_size, -1, np.int32)
    c_nxt = np.empty(cpu_size, np.int32)
    c_prv = np.empty(cpu_size, np.int32)
    c_nxt[c_sentinel] = c_sentinel
    c_prv[c_sentinel] = c_sentinel
    c_used = 0
    cap_chunks = cpu_capacity_tokens // chunk if has_cpu else 0

    longest = 1
    for r in range(n_req):
        longest = max(longest, offsets[r + 1] - offsets[r], (input_tokens[r] + output_tokens[r] - 2) // block + 1)
    blocks = np.empty(longest, np.int64)
    out = np.zeros((n_req, COLUMNS), np.int64)
    by = np.empty((1024, 2), np.int64)
    used = 0

    for r in range(n_req):
        lo = offsets[r]
        alloc = offsets[r + 1] - lo
        n = input_tokens[r]
        nfull = n // block
        nhash = nfull
        if output_tokens[r] > 1:
            kv_tokens = n + output_tokens[r] - 1
            alloc = max(alloc, -(-kv_tokens // block))
            nhash = kv_tokens // block
        most = min((n - 1) // block, nfull)
        h = 0
        while h < most:
            b = cached[keys[lo + h]]
            if b < 0:
                break
            blocks[h] = b
            h += 1
        for j in range(h):
            _unlink(nxt, prv, blocks[j])
        gpu_hit = h * block
        aligned = 0
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
        elif has_cpu and nck * chunk > gpu_hit:
            while found < nck and c_in[keys[lo + (found + 1) * chunk_blocks - 1]]:
                found += 1
            aligned = min(nck * chunk if found == nck else found * chunk, n - 1)
            if aligned > gpu_hit:
                for i in range(gpu_hit // chunk, -(-aligned // chunk)):
                    k = keys[lo + (i + 1) * chunk_blocks - 1]
                    _unlink(c_nxt, c_prv, k)
                    _push_back(c_nxt, c_prv, c_sentinel, k)
        hit_end = max(gpu_hit, aligned)
        out[r, GPU_HIT] = gpu_hit
        out[r, COMPUTED] = n - hit_end
        by, used = attribute(
            out[r], r, keys, lo, n, block, chunk_blocks, h, hit_end, cached, g_gone, c_in, c_gone, has_cpu, by, used
        )

        # The replay kernel's allocate, cache and free (sim.kernels.replay_blocks), the eviction remembered.
        for j in range(h, alloc):
            b = _pop_front(nxt, prv, sentinel)
            blocks[j] = b
            key = block_hash[b]
            if key < 0:  # unhashed (-1), or a generated block's (-2): its loss misses no prompt
                block_hash[b] = -1
                continue
            block_hash[b] = -1
            if copy_top[key] >= 0:
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
            cached[key] = -1
            g_gone[key] = r
        for i in range(h, nfull):
            b = blocks[i]
            key = keys[lo + i]
            block_hash[b] = key
            if cached[key] >= 0:
                t = copy_top[key]
                copy_prev[b] = t
                copy_next[b] = -1
                if t >= 0:
                    copy_next[t] = b
                copy_top[key] = b
            else:
                cached[key] = b
        for i in range(nfull, nhash):
            block_hash[blocks[i]] = -2
        for j in range(alloc - 1, nhash - 1, -1):
            _push_front(nxt, prv, sentinel, blocks[j])
        for j in range(nhash - 1, -1, -1):
            _push_back(nxt, prv, sentinel, blocks[j])
        if has_cpu and lmcache:
            # Engine._store_lmcache, ChunkStore.store_reserving: room for every chunk from LMCache's own hit on
            # first (evicting, even for a chunk already held), then the ones not held are put.
            count = 0
            for i in range(found, nck):
                while c_used + count + 1 > cap_chunks and c_used > 0:
                    old = _pop_front(c_nxt, c_prv, c_sentinel)
                    c_in[old] = False
                    c_gone[old] = r
                    c_used -= 1
                if c_used + count + 1 > cap_chunks:
                    break
                count += 1
            for i in range(found, found + count):
                k = keys[lo + (i + 1) * chunk_blocks - 1]
                if not c_in[k]:
                    c_in[k] = True
                    _push_back(c_nxt, c_prv, c_sentinel, k)
                    c_used += 1
        elif has_cpu:
            for i in range(hit_end // chunk, nck):
                if i * chunk + chunk <= hit_end:
                    continue
                k = keys[lo + (i + 1) * chunk_blocks - 1]
                if c_in[k]:
                    continue
                while c_used + 1 > cap_chunks:
                    old = _pop_front(c_nxt, c_prv, c_sentinel)
                    c_in[old] = False
                    c_gone[old] = r
                    c_used -= 1
                c_in[k] = True
                _push_back(c_nxt, c_prv, c_sentinel, k)
                c_used += 1
    return out, by[:used].copy()
