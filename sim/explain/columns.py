"""A compiled replay's attribution (``sim.explain_kernel``) as records read it: per request, the maps the Python
observer gives, made from columns only when a record is asked for; totals summed over the columns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim.events import CPU, GPU
from sim.explain.causes import CHAIN_BROKEN, EVICTED, FIRST_SEEN, LAST_TOKEN, PARTIAL_BLOCK, PARTIAL_CHUNK, ordered

if TYPE_CHECKING:
    from sim.replay import ReplayTiers
    from sim.trace import Trace

# The kernel's per-tier cause columns, in precedence order, with each tier's names for them.
_CAUSES = {
    GPU: (PARTIAL_BLOCK, LAST_TOKEN, FIRST_SEEN, EVICTED, CHAIN_BROKEN),
    CPU: (PARTIAL_CHUNK, LAST_TOKEN, FIRST_SEEN, EVICTED, CHAIN_BROKEN),
}


@dataclass(slots=True)
class Attribution:
    """One request's attribution, the fields ``sim.engine.RequestRecord`` carries."""

    gpu_miss: dict[str, int]
    computed: dict[str, int]
    evicted_misses: list[dict[str, Any]]
    infinite_hit_tokens: int


class ExplainedColumns:
    """Every request's attribution as the kernel's columns; ``[i]`` gives request ``i``'s ``Attribution``."""

    def __init__(self, table: Any, by: Any, prompt_tokens: Any, offload: bool) -> None:
        from sim import explain_kernel as k

        self.k = k
        self.table, self.by, self.prompt_tokens, self.offload = table, by, prompt_tokens, offload

    def __len__(self) -> int:
        return int(self.table.shape[0])

    def _map(self, row: Any, tier: str) -> dict[str, int]:
        at = self.k.GPU_AT if tier == GPU else self.k.CPU_AT
        return {c: int(row[at + i]) for i, c in enumerate(_CAUSES[tier]) if row[at + i]}

    def _entry(self, row: Any, tier: str) -> dict[str, Any] | None:
        k = self.k
        at = k.GPU_AT if tier == GPU else k.CPU_AT
        if not row[at + k.EVICTED]:
            return None
        by = self.by[row[at + k.BY_LO] : row[at + k.BY_HI]]
        return {
            "tier": tier,
            "tokens": int(row[at + k.EVICTED]),
            "start": int(row[at + k.START]),
            "end": int(row[at + k.END]),
            "first_end": int(row[at + k.FIRST_END]),
            "by": [{"seq": int(s), "tokens": int(t)} for s, t in by],
            "first_hit_tokens": None,
            "needed_tokens": None,
            "reachable": {"first": bool(row[at + k.REACH_FIRST]), "all": bool(row[at + k.REACH_ALL])},
        }

    def __getitem__(self, i: int) -> Attribution:
        row = self.table[i].tolist()
        gpu_miss = self._map(row, GPU)
        entries = [e for e in (self._entry(row, GPU), self._entry(row, CPU) if self.offload else None) if e]
        computed = self._map(row, CPU) if self.offload else gpu_miss
        return Attribution(gpu_miss, computed, entries, int(row[self.k.INFINITE]))

    def totals(self) -> dict[str, Any]:
        """``sim.explain.summary.totals`` over every request, summed column by column."""
        k, t = self.k, self.table
        sums = t.sum(axis=0).tolist()
        prompt = int(sum(self.prompt_tokens))
        served = prompt - int(sums[k.COMPUTED])
        bound = int(sums[k.INFINITE])
        gpu = {c: int(sums[k.GPU_AT + i]) for i, c in enumerate(_CAUSES[GPU])}
        cpu = {c: int(sums[k.CPU_AT + i]) for i, c in enumerate(_CAUSES[CPU])} if self.offload else gpu
        return {
            "gpu_miss": ordered(gpu),
            "computed": ordered(cpu),
            "served_tokens": served,
            "infinite_hit_tokens": bound,
            "hit_ratio": round(served / prompt, 4) if prompt else 0.0,
            "infinite_hit_ratio": round(bound / prompt, 4) if prompt else 0.0,
        }


def explain_trace(
    trace: Trace, tiers: ReplayTiers, gpu_hit: Any = None, computed: Any = None, output_tokens: Any = None
) -> ExplainedColumns | None:
    """The compiled attribution of the trace's replay on ``tiers`` (ones ``sim.compiled.kernel_reproduces``).

    ``gpu_hit`` and ``computed``: the replay's own columns; None if the attribution kernel's run of the
    same requests does not give exactly them (the replay follows rules this kernel does not: the caller
    then attributes with the Python engine). ``output_tokens`` (``array('q')``): each request's generated
    tokens, when the replay grows KV by decode as ``sim.explain_kernel.explain_replay`` says; None: no decode.
    """
    import numpy as np

    from sim import explain_kernel, kernels

    spec = tiers.spec(trace.block_tokens)
    dense, distinct = kernels.dense_ids(np.frombuffer(trace.hash_ids, dtype=np.int64))
    table, by = explain_kernel.explain_replay(
        dense, np.frombuffer(trace.offsets, dtype=np.int64), np.frombuffer(trace.input_tokens, dtype=np.int64),
        trace.block_tokens, tiers.gpu_blocks + 1, distinct, tiers.chunk_blocks, spec.cpu_tokens or 0,
        spec.cpu_backend == "lmcache",
        np.zeros(len(trace), np.int64) if output_tokens is None else np.frombuffer(output_tokens, dtype=np.int64),
    )
    if gpu_hit is not None and not (
        np.array_equal(table[:, explain_kernel.GPU_HIT], np.frombuffer(gpu_hit, dtype=np.int64))
        and np.array_equal(table[:, explain_kernel.COMPUTED], np.frombuffer(computed, dtype=np.int64))
    ):
        return None
    return ExplainedColumns(table, by, trace.input_tokens, spec.cpu_tokens is not None)
