"""LRU stack distances in one pass: the hit count of a plain LRU cache at every capacity at once (Mattson et al.).

A reference's stack distance is its depth in the LRU stack: 1 + the number of
distinct keys referenced since the same key's previous reference (infinite on
first reference). An LRU of ``C`` entries hits exactly the references of depth
``<= C``, so one histogram of depths gives the hit count at every capacity.

Depths are counted with a Fenwick tree over reference positions, in
O(N log N): a position is *live* while it holds its key's latest reference;
the depth of a reference whose key was last seen at position ``p`` is the
number of live positions from ``p`` on, i.e. ``distinct - p + dead_before(p)``.
The tree counts dead positions (one update and one prefix query per re-reference;
first references cost one dict store).
"""

from __future__ import annotations

import sys
from array import array
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import accumulate, count

from sim.bounds.budget import checkpoint

SLICE = 1 << 16  # references between deadline checks


@dataclass(frozen=True, slots=True)
class StackProfile:
    """The depth histogram of a reference stream, turned into hits per capacity.

    ``cumulative_hits[c]`` is the number of references an LRU of ``c`` entries
    hits (``c`` from 0 to ``distinct``; any larger cache hits as many as
    ``distinct`` entries do).
    """

    references: int
    distinct: int
    cumulative_hits: array  # 'q': 8 bytes a capacity, as a trace may have millions of distinct blocks

    def hits(self, capacity: int) -> int:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        return self.cumulative_hits[min(capacity, self.distinct)]

    def hit_ratio(self, capacity: int) -> float:
        return self.hits(capacity) / self.references if self.references else 0.0


def stack_profile(stream: Sequence[Hashable]) -> StackProfile:
    """One pass over ``stream``: the LRU hit count at every capacity.

    A long stream of 64-bit ids (a trace's ``array('q')``) runs the same loop
    compiled (``sim.engine.kernels.stack_depths``), when ``sim.engine.compiled`` says it pays.
    """
    if isinstance(stream, array) and stream.typecode == "q":
        from sim.engine import compiled

        if compiled.worth_it(len(stream)):
            cumulative, distinct = compiled.stack_histogram(stream)
            return StackProfile(len(stream), distinct, cumulative)
    return run_stack_profile(stream)


def run_stack_profile(stream: Sequence[Hashable]) -> StackProfile:
    """``python_stack_profile``'s histogram, a run of re-references at a time.

    A request that re-reads a prefix meets its blocks in the order an earlier
    request left them: reference ``t + k`` last seen at ``p + k``. Every
    reference of such a run has the same depth (the key at ``p + k`` leaves
    the window as the key at ``t + k - 1`` enters it), and the run kills the
    consecutive positions ``p .. p + L - 1``. So a run costs one depth query
    and one update instead of one of each per reference.

    The positions a run kills were all live, so killed ranges never overlap,
    and a query's position ``p`` is live: every range killed so far lies wholly
    before ``p`` or wholly after it. The dead positions before ``p`` are then
    the lengths of the ranges that start before it, one Fenwick tree of
    lengths at range starts. Ids of a trace (an ``array('q')`` of ids from 0 up,
    not far past its length) index a list of last positions, faster than a
    dict; any other keys are renumbered from 0 first (``_dense_ids``).
    """
    n = len(stream)
    dead = [0] * (n + 1)  # at index start + 1: the length of the range killed from position start
    depth_count = [0] * (n + 1)

    def flush(p: int, length: int, distinct: int) -> None:
        i, before = p, 0  # dead positions below p: ranges starting at 0 .. p - 1 (indices 1 .. p)
        while i:
            before += dead[i]
            i &= i - 1
        depth_count[distinct - p + before] += length  # as python_stack_profile: distinct - p + dead before p
        i = p + 1
        while i <= n:
            dead[i] += length
            i += i & -i

    ids = stream if _small_ids(stream) else _dense_ids(stream)
    try:
        distinct = _runs(ids, flush)  # type: ignore[arg-type]
    except _SparseIds:
        depth_count[:] = dead[:] = [0] * (n + 1)
        distinct = _runs(_dense_ids(stream), flush)
    return StackProfile(n, distinct, array("q", accumulate(depth_count[: distinct + 1])))


class _SparseIds(Exception):
    """An id too large to index a list of last positions of reasonable size: the ids are renumbered instead."""


def _small_ids(stream: Sequence[Hashable]) -> bool:
    """A 64-bit array with no negative id (each one's sign byte < 0x80, read without making an int of any)."""
    if not (isinstance(stream, array) and stream.typecode == "q" and stream.itemsize == 8):
        return False
    sign = 7 if sys.byteorder == "little" else 0
    return memoryview(stream).cast("B")[sign::8].tobytes().isascii()


def _dense_ids(stream: Sequence[Hashable]) -> array:
    """Each key renumbered from 0 in order of first reference (the same stack depths), by C loops over the stream."""
    number = dict(zip(dict.fromkeys(stream), count()))
    return array("q", map(number.__getitem__, stream))


def _runs(ids: array, flush: Callable[[int, int, int], None]) -> int:
    """The loop over references: each run of re-references, once ended, goes to ``flush(start, length, distinct)``;
    a run of first references only adds to the distinct count (a new request's new blocks come in such runs).

    The last positions are a list indexed by id, grown as larger ids come, and
    ``_SparseIds`` past a few times the stream's length. Returns the number of distinct ids.
    """
    n = len(ids)
    most = 4 * n + 1024
    last = [-1] * min(n + 1, most)
    distinct = 0
    # The current run: from position run_t, re-reading from position run_p on, or first references (run_p -1, which
    # each first reference continues: its last position is -1 too). expect: the last position that continues it,
    # that is the position after the previous reference's last one (-1 throughout a run of first references).
    run_t, run_p, expect = 0, -1, -2
    for base in range(0, n, SLICE):  # the deadline checked a slice at a time, not tested per reference
        checkpoint()
        for t, key in enumerate(ids[base : base + SLICE], base):
            try:
                p = last[key]
            except IndexError:
                if key >= most:
                    raise _SparseIds from None
                last += [-1] * (min(max(key + 1, 2 * len(last)), most) - len(last))
                p = -1
            last[key] = t
            if p == expect:
                if p >= 0:
                    expect += 1
                continue
            if run_p >= 0:
                flush(run_p, t - run_t, distinct)
            else:
                distinct += t - run_t
            run_t, run_p, expect = t, p, p + 1 if p >= 0 else -1
    if run_p >= 0:
        flush(run_p, n - run_t, distinct)
    else:
        distinct += n - run_t
    return distinct


def python_stack_profile(stream: Sequence[Hashable]) -> StackProfile:
    """The reference loop: Fenwick-tree depths in pure Python, one reference at a time."""
    n = len(stream)
    tree = [0] * (n + 1)  # tree[j] covers dead positions; index j is position j - 1
    depth_count = [0] * (n + 1)
    last: dict[Hashable, int] = {}
    distinct = 0
    for t, key in enumerate(stream):
        if not t & 0xFFFF:
            checkpoint()
        p = last.get(key)
        last[key] = t
        if p is None:
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
    return StackProfile(n, distinct, array("q", accumulate(depth_count[: distinct + 1])))


def lru_hits(stream: Sequence[Hashable], capacity: int) -> int:
    """A direct simulation of a plain LRU of ``capacity`` entries: the reference the profile must agree with."""
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    cache: OrderedDict[Hashable, None] = OrderedDict()
    move, pop = cache.move_to_end, cache.popitem
    hits = 0
    for key in stream:
        if key in cache:
            move(key)
            hits += 1
        elif capacity:
            cache[key] = None
            if len(cache) > capacity:
                pop(last=False)
    return hits


def curve_capacities(distinct: int, points: int) -> list[int]:
    """``points`` capacities spread evenly from ``distinct / points`` to ``distinct`` (fewer if they coincide)."""
    if points < 1:
        raise ValueError(f"points must be >= 1, got {points}")
    top = max(distinct, 1)
    return sorted({max(1, round(k * top / points)) for k in range(1, points + 1)})
