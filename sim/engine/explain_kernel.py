"""The miss attribution of ``sim.explain`` compiled (numba): its columns, its state, and the helpers of the replay kernel's step.

``sim.engine.kernels.explained_replay_from`` is the replay kernel's loop compiled
with attribution (one source, ``sim.engine.kernels._make_replay_from``): each tier
remembers, per dense id, the request that evicted it last, and each request
is attributed at lookup time, by a step written in the loop (a call would
cost more than the step: numba counts references to every array it passes),
into a row of ``COLUMNS``: the
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
def in_seq_order(by: np.ndarray, lo: int, hi: int) -> int:
    """Rows ``lo`` .. ``hi - 1`` of ``by``, an evicted span's runs (seq, tokens) in prefix order (a run: a stretch
    evicted by one request; no two adjacent runs have one seq), made the observer's ``sorted(by.items())``: tokens
    summed per seq, in seq order. Returns the end of the rows.

    vLLM frees a request's blocks tail first (``sim.blocks.pool``, free order ``vllm``), so later requests evict a prefix
    from its tail back, a run at a time: the runs' seqs are nearly always strictly descending (or ascending), and
    then each seq has one run and the rows are the runs reversed (or as they are). Any other order is sorted.
    """
    ascending = descending = True
    for i in range(lo + 1, hi):
        if by[i, 0] > by[i - 1, 0]:
            descending = False
        else:
            ascending = False
    if descending:
        i, j = lo, hi - 1
        while i < j:
            for c in range(2):
                by[i, c], by[j, c] = by[j, c], by[i, c]
            i += 1
            j -= 1
    if ascending or descending:
        return hi
    runs = by[lo:hi].copy()
    order = np.argsort(runs[:, 0], kind="mergesort")
    end = lo
    i = 0
    while i < order.size:
        seq = runs[order[i], 0]
        tokens = 0
        while i < order.size and runs[order[i], 0] == seq:
            tokens += runs[order[i], 1]
            i += 1
        by[end, 0] = seq
        by[end, 1] = tokens
        end += 1
    return end
