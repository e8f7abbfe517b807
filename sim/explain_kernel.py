"""The miss attribution of ``sim.explain`` compiled (numba): the step the replay kernel takes per request when it explains.

``sim.kernels.explained_replay_from`` is the replay kernel's loop compiled
with attribution (one source, ``sim.kernels._make_replay_from``): each tier
remembers, per dense id, the request that evicted it last, and each request
is attributed by ``attribute`` at lookup time into a row of ``COLUMNS``: the
tokens of each cause (``gpu_miss`` and ``computed``), the evicted span of each
tier with the requests that evicted it, and the infinite-cache bound, as
``sim.explain.observer.Attributor`` gives the Python engine for the same trace
(the tests compare them on random traces and the Mooncake sample). Whether a
unit was ever held is then ``held now or evicted before``: a unit leaves a tier
only by eviction.

``first_hit_tokens`` and ``needed_tokens`` are not computed here (as in the
Python replay: ``kvscope explain --trace`` searches them by re-simulation).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Per tier (GPU, then CPU), these columns: tokens per cause, the evicted span (start, end, end of its first
# unit), whether any capacity could serve its first unit / all of it, and the rows of its ``by`` list.
PARTIAL, LAST, FIRST_SEEN, EVICTED, CHAIN, START, END, FIRST_END, REACH_FIRST, REACH_ALL, BY_LO, BY_HI = range(12)
TIER_COLUMNS = 12
GPU_AT, CPU_AT = 0, TIER_COLUMNS
INFINITE = 2 * TIER_COLUMNS
COLUMNS = INFINITE + 1
# ``by``'s rows when the replay starts; it doubles before a request that might not fit (``grown``).
BY_ROWS = 1024


def attribution_state(requests: int, distinct_keys: int, cpu_slots: int, explain: bool) -> tuple[np.ndarray, ...]:
    """What the replay kernel carries besides its own state when it explains: the request that evicted each dense
    id from the GPU last, from the CPU last (-1: never; ``cpu_slots``: the CPU tier's, as ``c_in``), a row of
    ``COLUMNS`` per request, and ``by``; all empty when it does not (it never touches them then). Made by numpy,
    not compiled: with them in it, numba's first compile of the replay's state took about 8% longer."""
    if not explain:
        requests = distinct_keys = cpu_slots = 0
    return (
        np.full(distinct_keys, -1, np.int32), np.full(cpu_slots, -1, np.int32), np.zeros((requests, COLUMNS), np.int64),
        np.empty((BY_ROWS if explain else 0, 2), np.int64),
    )


@njit(cache=True)
def grown(by: np.ndarray, used: int, rows: int) -> np.ndarray:
    """``by`` with room for at least ``rows`` rows, its first ``used`` kept: doubled as often as it takes."""
    size = by.shape[0]
    while size < rows:
        size *= 2
    more = np.empty((size, 2), np.int64)
    more[:used] = by[:used]
    return more


@njit(cache=True)
def _append_by(by: np.ndarray, used: int, seqs: np.ndarray, tokens: np.ndarray, count: int) -> int:
    """Append (seq, tokens) summed per seq, in seq order (``sorted(by.items())``), from an evicted span's runs in
    prefix order (a run: a stretch evicted by one request; no two adjacent runs have the same seq); the rows used.
    ``by`` has room for ``count`` more rows.

    vLLM frees a request's blocks tail first (``sim.gpu``, free order ``vllm``), so later requests evict a prefix
    from its tail back, a run at a time: the runs' seqs are nearly always strictly descending (or ascending), and
    then each seq has one run and the rows are the runs reversed (or as they are). Any other order is sorted.
    """
    ascending = descending = True
    for i in range(1, count):
        if seqs[i] > seqs[i - 1]:
            descending = False
        else:
            ascending = False
    if ascending or descending:
        for i in range(count):
            j = i if ascending else count - 1 - i
            by[used + i, 0] = seqs[j]
            by[used + i, 1] = tokens[j]
        return used + count
    order = np.argsort(seqs[:count], kind="mergesort")
    i = 0
    while i < count:
        s = seqs[order[i]]
        t = 0
        while i < count and seqs[order[i]] == s:
            t += tokens[order[i]]
            i += 1
        by[used, 0] = s
        by[used, 1] = t
        used += 1
    return used


@njit(cache=True)
def attribute(
    out: np.ndarray, r: int, keys: np.ndarray, lo: int, n: int, block: int, chunk_blocks: int, h: int, hit_end: int,
    cached: np.ndarray, g_gone: np.ndarray, c_in: np.ndarray, c_gone: np.ndarray, has_cpu: bool, by: np.ndarray,
    used: int, seqs: np.ndarray, toks: np.ndarray,
) -> int:
    """Request ``r``'s attribution into its row of ``out``, at lookup time (the GPU hit ``h`` blocks, the stack
    ``hit_end`` tokens), from what each tier holds (``cached`` >= 0, ``c_in``) and the request that evicted each
    id last (``g_gone``, ``c_gone``: -1 never); its ``by`` rows appended to ``by`` after the ``used`` ones (it has
    room for two per block of the request); the rows used after them. ``seqs`` and ``toks``: scratch, a block each.

    The one call the replay loop makes per request to be explained, besides writing ``g_gone[id] = r`` and
    ``c_gone[id] = r`` where it evicts. Counts are kept in locals and the row written once: numba cannot keep
    an array's cells in registers across the other arrays' stores.
    """
    nfull = n // block
    most = min((n - 1) // block, nfull)
    chunk = block * chunk_blocks
    nck = nfull // chunk_blocks
    # Attributor._gpu: the blocks [h, most) missed; structural causes first (sim.explain.causes).
    g = GPU_AT
    out[r, g + PARTIAL] = n - nfull * block
    out[r, g + LAST] = (nfull - most) * block
    unseen_at = most - h
    first_ev = last_ev = -1
    chain = evicted = unseen = count = 0
    for i in range(h, most):
        key = keys[lo + i]
        if cached[key] >= 0:
            chain += 1
            continue
        s = g_gone[key]
        if s < 0:
            if not unseen:
                unseen_at = i - h
            unseen += 1
            continue
        if not evicted:
            first_ev = i - h
        evicted += 1
        last_ev = i - h
        if count and seqs[count - 1] == s:  # the run of blocks this request evicted goes on
            toks[count - 1] += block
        else:
            seqs[count] = s
            toks[count] = block
            count += 1
    out[r, g + CHAIN] = chain * block
    out[r, g + EVICTED] = evicted * block
    out[r, g + FIRST_SEEN] = unseen * block
    out[r, g + BY_LO] = used
    if count:
        out[r, g + START] = (h + first_ev) * block
        out[r, g + END] = (h + last_ev + 1) * block
        out[r, g + FIRST_END] = (h + first_ev + 1) * block
        out[r, g + REACH_FIRST] = unseen_at > first_ev
        out[r, g + REACH_ALL] = unseen_at > last_ev
        used = _append_by(by, used, seqs, toks, count)
    out[r, g + BY_HI] = used
    gpu_bound = (h + unseen_at) * block
    out[r, INFINITE] = gpu_bound

    if has_cpu:
        # Attributor._offload with one tier: the chunks holding [hit_end, end), token-exact at the ends.
        c = CPU_AT
        covered = nck * chunk
        out[r, c + PARTIAL] = max(0, n - max(covered, hit_end))
        end = min(covered, n)
        if end == n:
            out[r, c + LAST] = 1
            end = n - 1
        out[r, c + BY_LO] = used
        if end > hit_end:
            j0 = hit_end // chunk
            j1 = -(-end // chunk)
            unseen_at = j1 - j0
            first_ev = last_ev = -1
            chain = evicted = unseen = count = 0
            for j in range(j0, j1):
                k = keys[lo + (j + 1) * chunk_blocks - 1]
                t = min((j + 1) * chunk, end) - max(j * chunk, hit_end)
                if c_in[k]:
                    chain += t
                    continue
                s = c_gone[k]
                if s < 0:
                    if not unseen:
                        unseen_at = j - j0
                    unseen += t
                    continue
                if not evicted:
                    first_ev = j - j0
                evicted += t
                last_ev = j - j0
                if count and seqs[count - 1] == s:
                    toks[count - 1] += t
                else:
                    seqs[count] = s
                    toks[count] = t
                    count += 1
            out[r, c + CHAIN] = chain
            out[r, c + EVICTED] = evicted
            out[r, c + FIRST_SEEN] = unseen
            if count:
                out[r, c + START] = max((j0 + first_ev) * chunk, hit_end)
                out[r, c + END] = min((j0 + last_ev + 1) * chunk, end)
                out[r, c + FIRST_END] = min((j0 + first_ev + 1) * chunk, end)
                out[r, c + REACH_FIRST] = unseen_at > first_ev
                out[r, c + REACH_ALL] = unseen_at > last_ev
                used = _append_by(by, used, seqs, toks, count)
        out[r, c + BY_HI] = used
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
        out[r, INFINITE] = max(gpu_bound, bound)
    return used
