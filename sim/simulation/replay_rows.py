"""A replay's per-request JSON rows as text, made straight from its columns: ``json.dumps`` of each row, character for character.

A day of traffic has hundreds of thousands of requests: building a record, its
dict and encoding it took most of ``replay --json``'s time. Here the columns
are read a slice at a time (one ``tolist`` per column, constant memory) and
each row is formatted once. The names written (tiers, sources, parts, causes)
are plain ASCII words, so quoting them is all their JSON encoding does; the
numbers are Python ints and floats, whose ``repr`` is their JSON text.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any, Protocol

from sim.blocks.request import SHARED_DOC, Units
from sim.engine.events import CPU, GPU
from sim.explain.columns import _CAUSES, ExplainedColumns
from sim.traces.reader import Trace


class ReplayColumns(Protocol):
    """What the rows are made from: ``sim.simulation.replay.ReplayOutcome``'s columns (named here, so that this module
    does not import the replay that imports it)."""

    trace: Trace
    units: Units
    explained: Sequence[Any] | ExplainedColumns | None
    gpu_hit: array
    cpu_hit: array
    computed: array
    stored: array
    ttft_ms: array
    gpu_ev: tuple[array, array, array]
    cpu_ev: tuple[array, array, array]

    def __len__(self) -> int: ...

    def request_rows(self) -> Iterator[dict[str, Any]]: ...

SLICE = 2048  # rows read per slice of the columns


def _part(lo: int, hi: int, full_end: int) -> str:
    """``sim.engine.loop._part`` for a trace request (one owner, no shared prefix: the prompt starts at 0)."""
    head, tail = lo <= 0, hi + 1 >= full_end
    return "whole" if head and tail else "head" if head else "tail" if tail else "middle"


def request_texts(outcome: ReplayColumns) -> Iterator[str]:
    """Each request's row (``ReplayOutcome.request_rows``) as ``json.dumps`` writes it.

    The Python engine's explained records (their causes as maps) are encoded by ``json.dumps``; plain rows and the
    compiled attribution (``ExplainedColumns``) are formatted from the columns.
    """
    explained = outcome.explained
    if explained is not None and not isinstance(explained, ExplainedColumns):
        yield from map(json.dumps, outcome.request_rows())
        return
    explain = _Explained(explained) if explained is not None else None
    trace, block, chunk = outcome.trace, outcome.units.block, outcome.units.chunk
    cpu_key, gpu_q, cpu_q = json.dumps(CPU), json.dumps(GPU), json.dumps(CPU)
    columns = (
        trace.timestamps_ms, trace.input_tokens, outcome.gpu_hit, outcome.cpu_hit, outcome.computed, outcome.stored,
        outcome.ttft_ms, *outcome.gpu_ev, *outcome.cpu_ev,
    )
    for a in range(0, len(outcome), SLICE):
        b = min(a + SLICE, len(outcome))
        tails = explain.texts(a, b) if explain is not None else repeat("")
        for i, ts, n, gpu, cpu, computed, stored, ttft, gev, glo, ghi, cev, clo, chi, tail in zip(
            range(a, b), *(c[a:b].tolist() for c in columns), tails
        ):
            # sim.engine.loop.evicted_entries for one owner (SHARED_DOC): the GPU's entry, then the CPU's.
            evicted = []
            if gev:
                evicted.append(
                    f'{{"tier": {gpu_q}, "doc": {SHARED_DOC}, "tokens": {gev * block}, "start": {glo * block}, '
                    f'"end": {(ghi + 1) * block}, "part": "{_part(glo, ghi, n // block)}"}}'
                )
            if cev:
                evicted.append(
                    f'{{"tier": {cpu_q}, "doc": {SHARED_DOC}, "tokens": {cev}, "start": {clo * chunk}, '
                    f'"end": {(chi + 1) * chunk}, "part": "{_part(clo, chi, n // chunk)}"}}'
                )
            # sim.engine.loop._source: the tier that served most, ties to the earlier; computed when it beat them.
            source = CPU if cpu > gpu else GPU
            if computed > max(gpu, cpu):
                source = "computed"
            yield (
                f'{{"seq": {i}, "pass": 1, "order": "trace", "doc": {SHARED_DOC}, "prompt_tokens": {n}, '
                f'"gpu_hit_tokens": {gpu}, "cpu_hit_tokens": {cpu}, "disk_hit_tokens": 0, '
                f'"tier_hits": {f"{{{cpu_key}: {cpu}}}" if cpu else "{}"}, "computed_tokens": {computed}, '
                f'"stored_tokens": {stored}, "ttft_ms": {ttft!r}, "source": "{source}", '
                f'"evicted": [{", ".join(evicted)}]{tail}, "timestamp_ms": {ts!r}}}'
            )


class _Explained:
    """The compiled attribution's fields of each row (``ExplainedColumns[i]`` as ``RequestRecord.to_dict`` puts
    them: ``gpu_miss``, ``computed``, ``evicted_misses``, ``infinite_hit_tokens``), as text."""

    def __init__(self, columns: ExplainedColumns) -> None:
        k = columns.k
        self.columns, self.k = columns, k
        # Per tier: its cause columns' first and end, and their quoted names, in the order ExplainedColumns._map
        # walks them.
        self.causes = {
            tier: (at, at + len(_CAUSES[tier]), [json.dumps(c) + ": " for c in _CAUSES[tier]])
            for tier, at in ((GPU, k.GPU_AT), (CPU, k.CPU_AT))
        }
        self.tiers = [(json.dumps(GPU), k.GPU_AT)] + ([(json.dumps(CPU), k.CPU_AT)] if columns.offload else [])

    def texts(self, a: int, b: int) -> Iterator[str]:
        k, cols, offload = self.k, self.columns, self.columns.offload
        (g_lo, g_hi, g_names), (c_lo, c_hi, c_names) = self.causes[GPU], self.causes[CPU]
        table = cols.table[a:b]
        # The slice's rows of ``by`` (appended request by request, so one range), as lists once; a row that
        # evicted nothing has no range (its bounds are 0, 0).
        ranges = [table[table[:, at + k.EVICTED] != 0][:, [at + k.BY_LO, at + k.BY_HI]] for _, at in self.tiers]
        ranges = [r for r in ranges if len(r)]
        base = min(int(r[:, 0].min()) for r in ranges) if ranges else 0
        by = cols.by[base : max(int(r[:, 1].max()) for r in ranges)].tolist() if ranges else []
        for row in table.tolist():
            gpu_miss = "{" + ", ".join([f"{name}{v}" for name, v in zip(g_names, row[g_lo:g_hi]) if v]) + "}"
            computed = "{" + ", ".join([f"{name}{v}" for name, v in zip(c_names, row[c_lo:c_hi]) if v]) + "}" if offload else gpu_miss
            entries = []
            for tier, at in self.tiers:
                tokens = row[at + k.EVICTED]
                if not tokens:
                    continue
                evictors = ", ".join([f'{{"seq": {s}, "tokens": {t}}}' for s, t in by[row[at + k.BY_LO] - base : row[at + k.BY_HI] - base]])
                entries.append(
                    f'{{"tier": {tier}, "tokens": {tokens}, "start": {row[at + k.START]}, "end": {row[at + k.END]}, '
                    f'"first_end": {row[at + k.FIRST_END]}, "by": [{evictors}], "first_hit_tokens": null, '
                    f'"needed_tokens": null, "reachable": {{"first": {_bool(row[at + k.REACH_FIRST])}, '
                    f'"all": {_bool(row[at + k.REACH_ALL])}}}}}'
                )
            yield (
                f', "gpu_miss": {gpu_miss}, "computed": {computed}, "evicted_misses": [{", ".join(entries)}], '
                f'"infinite_hit_tokens": {row[k.INFINITE]}'
            )


def _bool(value: Any) -> str:
    return "true" if value else "false"
