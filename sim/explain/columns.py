"""A compiled replay's attribution (``sim.engine.explain_kernel``) as records read it: per request, the maps the Python
observer gives, made from columns only when a record is asked for; totals summed over the columns.

The compiled replay explains in the same run that gives its figures (``sim.engine.compiled.replay_columns`` with
``explain``), so the attribution is always that of the replay it is shown with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.engine.events import CPU, GPU
from sim.explain.causes import CHAIN_BROKEN, EVICTED, FIRST_SEEN, LAST_TOKEN, PARTIAL_BLOCK, PARTIAL_CHUNK, ordered

# The kernel's per-tier cause columns, in precedence order, with each tier's names for them.
_CAUSES = {
    GPU: (PARTIAL_BLOCK, LAST_TOKEN, FIRST_SEEN, EVICTED, CHAIN_BROKEN),
    CPU: (PARTIAL_CHUNK, LAST_TOKEN, FIRST_SEEN, EVICTED, CHAIN_BROKEN),
}


@dataclass(slots=True)
class Attribution:
    """One request's attribution, the fields ``sim.engine.loop.RequestRecord`` carries."""

    gpu_miss: dict[str, int]
    computed: dict[str, int]
    evicted_misses: list[dict[str, Any]]
    infinite_hit_tokens: int


class ExplainedColumns:
    """Every request's attribution as the kernel's columns; ``[i]`` gives request ``i``'s ``Attribution``.

    ``prompt_tokens`` and ``computed_tokens``: the replay's columns, per request; ``offload``: a CPU tier ran.
    """

    def __init__(self, table: Any, by: Any, prompt_tokens: Any, computed_tokens: Any, offload: bool) -> None:
        from sim.engine import explain_kernel as k

        self.k = k
        self.table, self.by, self.offload = table, by, offload
        self.prompt_tokens, self.computed_tokens = prompt_tokens, computed_tokens

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
        served = prompt - int(sum(self.computed_tokens))
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
