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

from array import array
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from sim.work import checkpoint

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
    compiled (``sim.kernels.stack_depths``), when ``sim.compiled`` says it pays.
    """
    if isinstance(stream, array) and stream.typecode == "q":
        from sim import compiled

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
    and one range update, on a Fenwick tree pair that adds over a range and
    sums a prefix, instead of one query and one update per reference.
    """
    n = len(stream)
    # Dead positions, 1-based index j = position j - 1: prefix(i) = sum(b1[..i]) * i - sum(b2[..i]).
    b1 = [0] * (n + 2)
    b2 = [0] * (n + 2)
    depth_count = [0] * (n + 1)

    def flush(p: int, length: int, distinct: int) -> None:
        i, s1, s2 = p, 0, 0
        while i:
            s1 += b1[i]
            s2 += b2[i]
            i &= i - 1
        depth_count[distinct - p + s1 * p - s2] += length  # as python_stack_profile: distinct - p + dead before p
        for start, v1, v2 in ((p + 1, 1, p), (p + length + 1, -1, -(p + length))):  # +1 on indices p+1 .. p+length
            i = start
            while i <= n:
                b1[i] += v1
                b2[i] += v2
                i += i & -i

    last: dict[Hashable, int] = {}
    get = last.get
    distinct = run_p = run_len = 0
    expect = -2  # the previous position that continues the current run
    for base in range(0, n, SLICE):  # the deadline checked a slice at a time, not tested per reference
        checkpoint()
        for t, key in enumerate(stream[base : base + SLICE], base):
            p = get(key, -1)
            last[key] = t
            if p == expect:
                run_len += 1
                expect += 1
                continue
            if run_len:
                flush(run_p, run_len, distinct)
            if p < 0:
                distinct += 1
                run_len, expect = 0, -2
            else:
                run_p, run_len, expect = p, 1, p + 1
    if run_len:
        flush(run_p, run_len, distinct)
    return StackProfile(n, distinct, array("q", accumulate(depth_count[: distinct + 1])))


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
