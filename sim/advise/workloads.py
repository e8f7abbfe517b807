"""The advisor's workloads: a scenario's requests or a trace's, each evaluating a candidate through the engine."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from sim.advise import load
from sim.advise.candidate import TIERS, Candidate, Outcome, field_choices
from sim.bounds.budget import SUMMARY_JSON_BYTES, Cost, trace_cost
from sim.costs.model import default_costs
from sim.engine import compiled
from sim.engine.loop import Engine, RequestRecord
from sim.numeric import stats
from sim.sched.replay import served_requests, served_trace_cost
from sim.sched.replay_serving import trace_arrivals
from sim.sched.serving import Serving
from sim.sched.simulate import stepped_cost
from sim.simulation.replay import ReplayTiers, kv_block_counts, replay_engine, run_replay
from sim.simulation.run import run_records, tier_spec
from sim.traces.reader import Trace, open_trace
from sim.workloads.estimate import simulation_cost
from sim.workloads.requests import build_requests
from sim.workloads.scenario import MAX_GPU_TOKENS, Scenario


@dataclass(frozen=True)
class ScenarioWorkload:
    """A scenario's requests; the target may look at one pass only.

    With ``serving`` they are served under load (``sim.advise.load``): TTFT
    counts queueing, and ``burst`` sends every request at once.
    """

    scenario: Scenario
    serving: Serving | None = None
    burst: bool = False

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
        """What ``evaluate`` costs (``sim.bounds.budget``): one run, the one with every tier the candidate has (under
        load: every run's request-steps, an upper bound)."""
        scenario = self._at(candidate)
        if self.serving is not None:
            return stepped_cost(scenario, self.serving)
        return simulation_cost(scenario, runs=(scenario.run_names[-1],), records=False)

    def _records(self, scenario: Scenario, run: str) -> tuple[list[RequestRecord], int]:
        if self.serving is None:
            return run_records(scenario, run), 0
        engine = Engine(run, tier_spec(scenario, run), scenario.costs or default_costs())
        requests = build_requests(scenario)
        return load.serve(engine, self.serving, requests, load.burst(len(requests)) if self.burst else None)

    def evaluate(self, candidate: Candidate, pass_: int | None) -> Outcome:
        scenario = self._at(candidate)
        run = scenario.run_names[-1]
        records = [r for r in self._records(scenario, run)[0] if pass_ is None or r.pass_ == pass_]
        if not records:
            raise ValueError(f"pass must be from 1 to {len(self.scenario.passes)}, got {pass_}")
        return outcome_of([(r.prompt_tokens, r.gpu_hit_tokens, r.tier_hits, r.ttft_ms) for r in records], scenario)

    def _ample(self) -> Candidate:
        """A GPU that holds every request's blocks at once (no request ever waits for blocks), the GPU alone."""
        s = self.scenario
        return Candidate(min((s.total_requests * s.request_blocks + 1) * s.block_size, MAX_GPU_TOKENS), None, None, s.cpu_policy)

    def working_set_cost(self) -> Cost:
        """What measuring ``working_set_tokens`` costs: one run on the ample GPU (nothing when idle)."""
        return self.cost(self._ample()) if self.serving is not None else Cost(0, 0, 0)

    @cached_property
    def working_set_tokens(self) -> int | None:
        """Under load: the GPU tokens (with the null block) that requests hold at once when the GPU could hold every
        request's blocks together; None for an idle server."""
        if self.serving is None:
            return None
        scenario = self._at(self._ample())
        peak = self._records(scenario, scenario.run_names[-1])[1]
        return (peak + 1) * self.scenario.block_size

    @property
    def min_gpu_tokens(self) -> int:
        return max(self.scenario.min_gpu_tokens, self.working_set_tokens or 0)

    @property
    def rate_per_s(self) -> float | None:
        """The rate the target holds at: the open loop's (None: a closed loop, or an idle server)."""
        return None if self.serving is None else self.serving.rate

    def at_rate(self, rate_per_s: float | None) -> ScenarioWorkload:
        """The workload with requests arriving at ``rate_per_s`` (None: all at once)."""
        assert self.serving is not None
        if rate_per_s is None:
            return replace(self, burst=True)
        return replace(self, serving=load.at_rate(self.serving, rate_per_s), burst=False)

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
    serving: Serving | None = None  # served under load (sim.advise.load), at its timestamps when ``speedup`` is set
    speedup: float | None = None
    burst: bool = False

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
        fraction of the Python engine's work when it runs compiled (under load: the stepped engine's)."""
        trace = self.trace
        if self.serving is not None:
            return served_trace_cost(trace, self.serving)
        replay = trace_cost(len(trace), trace.total_blocks)
        work = replay.work_steps
        if compiled.replays_compiled(self._tiers(candidate).spec(self.block), trace.total_blocks * self.replays):
            work = math.ceil(work * compiled.COMPILED_REPLAY_FRACTION)
        return Cost(work, replay.memory_bytes, SUMMARY_JSON_BYTES)

    def _served(self, candidate: Candidate) -> tuple[list[RequestRecord], int]:
        assert self.serving is not None
        trace = self.trace
        arrivals = load.burst(len(trace)) if self.burst else trace_arrivals(trace.timestamps_ms, self.speedup) if self.speedup else None
        requests = served_requests(trace, self.chunk_blocks)
        return load.serve(replay_engine(trace, self._tiers(candidate)), self.serving, requests, arrivals)

    def evaluate(self, candidate: Candidate, pass_: int | None) -> Outcome:
        prompt = sum(self.trace.input_tokens)
        if self.serving is not None:
            records = self._served(candidate)[0]
            hits = {"gpu": sum(r.gpu_hit_tokens for r in records), "cpu": sum(r.cpu_hit_tokens for r in records), "disk": 0}
            ttfts = [r.ttft_ms for r in records]
        else:
            outcome = run_replay(self.trace, self._tiers(candidate), replays=self.replays)
            hits = {"gpu": sum(outcome.gpu_hit), "cpu": sum(outcome.cpu_hit), "disk": 0}
            ttfts = list(outcome.ttft_ms)
        return Outcome(
            round(stats.p50(ttfts), 3), round(stats.p90(ttfts), 3), round(sum(hits.values()) / prompt, 4),
            {t: round(h / prompt, 4) for t, h in hits.items()},
        )

    def _ample(self) -> Candidate:
        return Candidate((sum(kv_block_counts(self.trace)) + 1) * self.block)  # every request's blocks at once

    def working_set_cost(self) -> Cost:
        """What measuring ``working_set_tokens`` costs: one replay on the ample GPU (nothing when idle)."""
        return self.cost(self._ample()) if self.serving is not None else Cost(0, 0, 0)

    @cached_property
    def working_set_tokens(self) -> int | None:
        """Under load: the GPU tokens (with the null block) requests hold at once on a GPU that could hold them all."""
        if self.serving is None:
            return None
        return (self._served(self._ample())[1] + 1) * self.block

    @property
    def min_gpu_tokens(self) -> int:
        one = (max(kv_block_counts(self.trace)) + 1) * self.block  # the longest request (decode too) and the null block
        return max(one, self.working_set_tokens or 0)

    @property
    def rate_per_s(self) -> float | None:
        """The rate the target holds at: the open loop's, or the trace's own at its timestamps (sped up); None when
        every request comes at once, for a closed loop or an idle server."""
        if self.serving is None:
            return None
        if self.speedup is None:
            return self.serving.rate
        stamps = self.trace.timestamps_ms
        span = (stamps[-1] - stamps[0]) / self.speedup if len(stamps) > 1 else 0.0
        return (len(stamps) - 1) * 1000.0 / span if span > 0 else None

    def at_rate(self, rate_per_s: float | None) -> TraceWorkload:
        """The workload arriving at ``rate_per_s`` (None: all at once): the timestamps sped up to it, or an open loop."""
        assert self.serving is not None
        if rate_per_s is None:
            return replace(self, burst=True)
        if self.speedup is not None:
            own = replace(self, speedup=1.0).rate_per_s
            if own is not None:
                return replace(self, speedup=rate_per_s / own, burst=False)
        return replace(self, serving=load.at_rate(self.serving, rate_per_s), speedup=None, burst=False)

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
