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
# ``by``'s rows when the replay starts; it doubles when full.
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

    The one call the replay loop makes per request to be explained, besides writing ``g_gone[id] = r`` and
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
