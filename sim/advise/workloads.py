"""The advisor's workloads: a scenario's requests or a trace's, each evaluating a candidate through the engine."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from sim.advise.candidate import TIERS, Candidate, Outcome, field_choices
from sim.bounds.budget import SUMMARY_JSON_BYTES, Cost, trace_cost
from sim.engine import compiled
from sim.numeric import stats
from sim.simulation.replay import ReplayTiers, kv_block_counts, run_replay
from sim.simulation.run import run_records
from sim.traces.reader import Trace, open_trace
from sim.workloads.estimate import simulation_cost
from sim.workloads.scenario import Scenario


@dataclass(frozen=True)
class ScenarioWorkload:
    """A scenario's requests; the target may look at one pass only."""

    scenario: Scenario

    def _at(self, candidate: Candidate) -> Scenario:
        """The scenario with the candidate's tiers."""
        changes: dict[str, Any] = {
            "gpu_tokens": candidate.gpu_tokens, "cpu_tokens": candidate.cpu_tokens, "cpu_gb": None,
            "disk_tokens": candidate.disk_tokens, "disk_gb": None, "cpu_policy": candidate.cpu_policy,
        }
        if candidate.cpu_backend is not None:
            changes["cpu_backend"] = candidate.cpu_backend
        return self.scenario.model_copy(update=changes)

    def cost(self, candidate: Candidate) -> Cost:
        """What ``evaluate`` costs (``sim.bounds.budget``): one run, the one with every tier the candidate has."""
        scenario = self._at(candidate)
        return simulation_cost(scenario, runs=(scenario.run_names[-1],), records=False)

    def evaluate(self, candidate: Candidate, pass_: int | None) -> Outcome:
        scenario = self._at(candidate)
        run = scenario.run_names[-1]
        records = [r for r in run_records(scenario, run) if pass_ is None or r.pass_ == pass_]
        if not records:
            raise ValueError(f"pass must be from 1 to {len(self.scenario.passes)}, got {pass_}")
        return outcome_of([(r.prompt_tokens, r.gpu_hit_tokens, r.tier_hits, r.ttft_ms) for r in records], scenario)

    @property
    def min_gpu_tokens(self) -> int:
        return self.scenario.min_gpu_tokens

    @property
    def bytes_per_token(self) -> int:
        return self.scenario.bytes_per_token

    @property
    def model(self) -> str:
        return self.scenario.model

    def choices(self, name: str) -> tuple[str, ...]:
        """The policies (``cpu_policy``) or backends (``cpu_backend``) the engine offers a scenario."""
        return field_choices(name)

    def searching(self, candidates: int) -> ScenarioWorkload:
        """The workload as a search of ``candidates`` evaluates it: the same (each evaluation stands alone)."""
        return self

    @property
    def passes(self) -> int:
        return len(self.scenario.passes)

    @property
    def footprint_tokens(self) -> int:
        """Every distinct token the workload could cache: an upper end for the tiers' grids."""
        s = self.scenario
        return s.docs * (s.shared_prefix_tokens + s.doc_tokens + s.prompt_tokens) + s.block_size

    def fixed(self) -> Candidate:
        s = self.scenario
        return Candidate(s.gpu_tokens, s.cpu_capacity_tokens, s.disk_capacity_tokens, s.cpu_policy, getattr(s, "cpu_backend", None))

    def units(self) -> dict[str, int]:
        s = self.scenario
        return {"gpu": s.block_size, "cpu": s.offload_unit_tokens, "disk": s.chunk_size}

    def warnings(self) -> list[str]:
        s = self.scenario
        reused = s.shared_prefix_tokens + s.doc_tokens
        out = []
        if reused < s.block_size:
            out.append(f"the reused prefix ({reused} tokens) is shorter than a GPU block ({s.block_size}): no cache can hit it")
        elif reused < s.chunk_size:
            out.append(f"the reused prefix ({reused} tokens) is shorter than an offload chunk ({s.chunk_size}): no offload tier can help")
        return out


def outcome_of(records: list[tuple[int, int, dict[str, int], float]], scenario: Scenario, router: str | None = None) -> Outcome:
    """The figures of requests given as (prompt tokens, GPU hit tokens, hits per tier, TTFT ms)."""
    prompt = sum(r[0] for r in records)
    # The GPU, CPU and disk always (the table's columns), then each storage tier behind them by its name.
    hits = dict.fromkeys(TIERS + tuple(t.name for t in scenario.storage_tiers), 0)
    for _, gpu, tiers, _ in records:
        hits["gpu"] += gpu
        for name, tokens in tiers.items():
            hits[name] += tokens
    ttfts = [r[3] for r in records]
    return Outcome(
        round(stats.p50(ttfts), 3), round(stats.p90(ttfts), 3), round(sum(hits.values()) / prompt, 4),
        {t: round(h / prompt, 4) for t, h in hits.items()}, router,
    )


_TRACES: dict[tuple[str, int | None], Trace] = {}


@dataclass(frozen=True)
class TraceWorkload:
    """A trace (Mooncake or Bailian, a file or a bundled name) replayed through the GPU and an LRU CPU tier.

    The replay has no disk tier and one CPU policy (LRU); a trace is one pass.
    The trace is read once per process (workers read it themselves, so only
    its name crosses to them). ``replays`` is how many candidates the search
    replays it for: together they pay numba's start-up once, so the replays
    run compiled (``sim.engine.compiled``) where one alone would not be worth it.
    """

    source: str
    model: str
    bytes_per_token: int
    block_size: int | None = None
    chunk_blocks: int = 1
    gpu_tokens: int | None = None
    cpu_tokens: int | None = None
    passes: int = 1
    replays: int = 1

    @property
    def trace(self) -> Trace:
        key = (self.source, self.block_size)
        if key not in _TRACES:
            _TRACES[key] = open_trace(self.source, self.block_size)
        return _TRACES[key]

    @property
    def block(self) -> int:
        return self.trace.block_tokens

    def searching(self, candidates: int) -> TraceWorkload:
        """The workload as a search of ``candidates`` replays evaluates it."""
        return replace(self, replays=max(1, candidates))

    def _tiers(self, candidate: Candidate) -> ReplayTiers:
        cpu_blocks = candidate.cpu_tokens // self.block if candidate.cpu_tokens else None
        return ReplayTiers(candidate.gpu_tokens // self.block - 1, cpu_blocks, self.chunk_blocks)

    def cost(self, candidate: Candidate) -> Cost:
        """What ``evaluate`` costs (``sim.bounds.budget``): one replay of the trace, of which only a summary is kept; a
        fraction of the Python engine's work when it runs compiled."""
        trace = self.trace
        replay = trace_cost(len(trace), trace.total_blocks)
        work = replay.work_steps
        if compiled.replays_compiled(self._tiers(candidate).spec(self.block), trace.total_blocks * self.replays):
            work = math.ceil(work * compiled.COMPILED_REPLAY_FRACTION)
        return Cost(work, replay.memory_bytes, SUMMARY_JSON_BYTES)

    def evaluate(self, candidate: Candidate, pass_: int | None) -> Outcome:
        outcome = run_replay(self.trace, self._tiers(candidate), replays=self.replays)
        prompt = sum(self.trace.input_tokens)
        hits = {"gpu": sum(outcome.gpu_hit), "cpu": sum(outcome.cpu_hit), "disk": 0}
        ttfts = list(outcome.ttft_ms)
        return Outcome(
            round(stats.p50(ttfts), 3), round(stats.p90(ttfts), 3), round(sum(hits.values()) / prompt, 4),
            {t: round(h / prompt, 4) for t, h in hits.items()},
        )

    @property
    def min_gpu_tokens(self) -> int:
        return (max(kv_block_counts(self.trace)) + 1) * self.block  # the longest request (decode too) and the null block

    @property
    def footprint_tokens(self) -> int:
        return (self.trace.summary()["distinct_blocks"] + 1) * self.block  # type: ignore[operator]

    def fixed(self) -> Candidate:
        return Candidate(self.gpu_tokens or self.min_gpu_tokens, self.cpu_tokens)

    def units(self) -> dict[str, int]:
        return {"gpu": self.block, "cpu": self.block * self.chunk_blocks, "disk": self.block * self.chunk_blocks}

    def choices(self, name: str) -> tuple[str, ...]:
        return ("lru",) if name == "cpu_policy" else ()

    def warnings(self) -> list[str]:
        return []


Workload = ScenarioWorkload | TraceWorkload
