"""The search: every candidate configuration run through the engine, ranked by cost, with the Pareto front and the traps.

A candidate fixes the GPU tier's tokens, the CPU and disk tiers' tokens (or
none), and the offload policy and backend. The policies searched are the
scenario model's own choices (``Scenario.model_fields``), so a policy added to
the engine is searched without being named here; the backend is the
workload's own unless others are asked for (``Space.backends``). Each
candidate is simulated (the one-pass LRU curves of ``sim.analysis.curve`` are not the
vLLM pool's figures, as that module says, so they are not used to predict).
The cheapest meets are then refined: each bought tier is shrunk by binary
search down to the grid point below, which finds the exact threshold when the
tier is a stack algorithm (LRU) and, for any policy, a size that still meets,
since every answer is a simulated run.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sim.advise import facts, load
from sim.advise.candidate import MAX_CANDIDATES, TIERS, Candidate, Outcome, Target
from sim.advise.prices import Deployment, Prices
from sim.advise.workloads import TraceWorkload, Workload
from sim.analysis.sweep import probes
from sim.blocks.kv import GIB, model_shape
from sim.bounds.budget import Cost
from sim.numeric.fanout import Progress, fan_out
from sim.numeric.search import smallest
from sim.sched.config import SchedulerConfig
from sim.tiers.chunk_store import DEFAULT_CPU_BACKEND
from sim.tiers.native import backend_runs


@dataclass(frozen=True)
class Space:
    """The grid searched: which tiers may change (``buy``), how many sizes each, which policies and backends."""

    buy: tuple[str, ...] = ("gpu",)
    points: int = 8
    max_gpu_tokens: int | None = None
    policies: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    replicas: tuple[int, ...] = (1,)  # fleets of each many replicas (a FleetWorkload's), each with a candidate's tiers

    def __post_init__(self) -> None:
        unknown = [t for t in self.buy if t not in TIERS]
        if unknown or not self.buy:
            raise ValueError(f"buy: name tiers among {', '.join(TIERS)}, got {','.join(self.buy) or 'none'}")
        if not 2 <= self.points <= 200:
            raise ValueError(f"points must be from 2 to 200, got {self.points}")
        if not self.replicas or any(n < 1 for n in self.replicas):
            raise ValueError(f"replicas: each at least 1, got {','.join(map(str, self.replicas)) or 'none'}")

    def check(self, workload: Workload) -> None:
        """Names the workload's engine does not offer, and tiers it has not, refused naming the setting."""
        if isinstance(workload, TraceWorkload) and "disk" in self.buy:
            raise ValueError("buy: a trace replay has no disk tier")
        for name, chosen, known in (("policies", self.policies, workload.choices("cpu_policy")), ("backends", self.backends, workload.choices("cpu_backend"))):
            bad = [c for c in chosen if c not in known]
            if bad:
                raise ValueError(f"{name}: unknown {', '.join(bad)}; known: {', '.join(known) or 'none for this workload'}")


def _grid(lo: int, hi: int, points: int, unit: int) -> list[int]:
    """``points`` sizes from ``lo`` to ``hi``, evenly spaced, on whole units."""
    if hi <= lo:
        return [lo]
    step = (hi - lo) / (points - 1)
    return sorted({-(-int(lo + i * step) // unit) * unit for i in range(points)})


def candidates(workload: Workload, space: Space) -> list[Candidate]:
    """The grid: sizes of the bought tiers (an offload tier may also be absent), crossed with policies and backends."""
    base = workload.fixed()
    units = workload.units()
    top = workload.footprint_tokens
    gpu_hi = min(top, space.max_gpu_tokens) if space.max_gpu_tokens else top
    gpus = _grid(workload.min_gpu_tokens, max(gpu_hi, workload.min_gpu_tokens), space.points, units["gpu"]) if "gpu" in space.buy else [base.gpu_tokens]
    cpus: list[int | None] = [None, *_grid(units["cpu"], top, space.points, units["cpu"])] if "cpu" in space.buy else [base.cpu_tokens]
    disks: list[int | None] = [None, *_grid(units["disk"], top, space.points, units["disk"])] if "disk" in space.buy else [base.disk_tokens]
    space.check(workload)
    policies = space.policies or workload.choices("cpu_policy") or (base.cpu_policy,)
    # Backends only when asked: a backend is how the deployment offloads (LMCache or vLLM's own), a choice made
    # before sizing; unasked, the search keeps the workload's own and does not multiply the candidates by them.
    backends: tuple[str | None, ...] = space.backends or (base.cpu_backend,)
    out = set()
    for g in gpus:
        for c in cpus:
            for d in disks:
                if c is None and d is not None:
                    continue  # a disk tier sits behind the CPU tier
                if c is None:
                    out.add(Candidate(g, None, None, base.cpu_policy, base.cpu_backend))
                    continue
                for p in policies:
                    for b in backends:
                        if backend_runs(b, p, d is not None):
                            out.add(Candidate(g, c, d, p, b))
    out = {replace(c, replicas=n) for c in out for n in space.replicas}
    if len(out) > MAX_CANDIDATES:
        raise ValueError(f"points: the space holds {len(out):,} candidates; the limit is {MAX_CANDIDATES:,}")
    return sorted(out, key=lambda c: (c.replicas, c.gpu_tokens, c.cpu_tokens or 0, c.disk_tokens or 0, c.cpu_policy, c.cpu_backend or ""))


@dataclass
class Pricing:
    """Turns tier sizes into GiB and $/hour (or, without prices, ranks by GPU GiB then all GiB)."""

    bytes_per_token: int
    deployment: Deployment
    prices: Prices | None

    def gib(self, tokens: int | None) -> float:
        return 0.0 if tokens is None else tokens * self.bytes_per_token / GIB

    def dollars(self, c: Candidate) -> float | None:
        if self.prices is None:
            return None
        return c.replicas * (
            self.gib(c.gpu_tokens) * self.deployment.gpu_gib_hour(self.prices)
            + self.gib(c.cpu_tokens) * self.prices.dram_gib_hour
            + self.gib(c.disk_tokens) * self.prices.nvme_gib_hour
        )

    def key(self, c: Candidate) -> tuple[float, ...]:
        """Dollars (when priced), then GPU GiB, then all GiB, over every replica."""
        gpu = c.replicas * self.gib(c.gpu_tokens)
        memory = gpu + c.replicas * (self.gib(c.cpu_tokens) + self.gib(c.disk_tokens))
        dollars = self.dollars(c)
        return (dollars, gpu, memory) if dollars is not None else (gpu, memory)


def _evaluate(args: tuple[Workload, Candidate, int | None]) -> Outcome:
    workload, candidate, pass_ = args
    return workload.evaluate(candidate, pass_)


def evaluate_all(workload: Workload, cands: list[Candidate], pass_: int | None, executor: Executor | None = None,
                 progress: Progress | None = None) -> list[Outcome]:
    """Every candidate's outcome, in the candidates' order; ``executor`` (processes, Ray) runs them side by side."""
    return fan_out(_evaluate, [(workload, c, pass_) for c in cands], executor, progress)


@dataclass
class Advice:
    """The search's answer, as ``kvscope advise --json`` prints it."""

    candidates: int
    meets: list[dict[str, Any]]
    closest: dict[str, Any] | None
    pareto: list[dict[str, Any]]
    warnings: list[str]
    commands: dict[str, str]
    notes: list[str] = field(default_factory=list)
    # The TTFT figure the front is drawn by ("p50_ms" or "p90_ms": the one the target bounds) and its bound, if any.
    pareto_figure: str = "p90_ms"
    pareto_target_ms: float | None = None
    # Under load: the serving settings, the rate the target held at and the working set in flight (empty when idle).
    load: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def refine(workload: Workload, target: Target, space: Space, c: Candidate, grid: dict[str, list[int | None]]) -> tuple[Candidate, Outcome]:
    """Shrink each bought tier of a meeting candidate to the smallest size (on its unit) that still meets."""
    units = workload.units()
    for tier in space.buy:
        size = c.sizes()[tier]
        if size is None:
            continue
        below = [s for s in grid[tier] if s is not None and s < size]
        lo_units = (max(below) // units[tier] + 1) if below else max(1, -(-workload.min_gpu_tokens // units[tier]) if tier == "gpu" else 1)
        field_name = f"{tier}_tokens"

        def meets(n: int, tier: str = tier, field_name: str = field_name) -> bool:
            trial = _with(c, field_name, n * units[tier])
            return not target.misses(workload.evaluate(trial, target.pass_))

        found = smallest(lo_units, size // units[tier], meets)
        if found is not None:
            c = _with(c, field_name, found * units[tier])
    return c, workload.evaluate(c, target.pass_)


def _dominates(a: Candidate, b: Candidate) -> bool:
    """``a`` is ``b`` with no tier bigger and one smaller (same policy and backend): ``b`` is never the better buy."""
    if a == b or (a.cpu_policy, a.cpu_backend) != (b.cpu_policy, b.cpu_backend) or a.replicas > b.replicas:
        return False
    pairs = [(a.sizes()[t], b.sizes()[t]) for t in TIERS]
    if any((x is None) != (y is None) for x, y in pairs):
        return False
    return all(x is None or x <= y for x, y in pairs)  # type: ignore[operator]


def _with(c: Candidate, name: str, value: int) -> Candidate:
    data = {**{f: getattr(c, f) for f in Candidate.__slots__}, name: value}
    return Candidate(**data)


def row(c: Candidate, o: Outcome, pricing: Pricing, target: Target) -> dict[str, Any]:
    dollars = pricing.dollars(c)
    tp = pricing.deployment.tp
    return {
        "config": {
            "gpu_tokens": c.gpu_tokens, "gpu_gib": round(pricing.gib(c.gpu_tokens), 4),
            "cpu_tokens": c.cpu_tokens, "cpu_gib_total": round(pricing.gib(c.cpu_tokens), 4),
            "cpu_gib_per_rank": round(pricing.gib(c.cpu_tokens) / tp, 4),
            "disk_tokens": c.disk_tokens, "disk_gib_total": round(pricing.gib(c.disk_tokens), 4),
            "cpu_policy": c.cpu_policy if c.cpu_tokens else None, "cpu_backend": c.cpu_backend if c.cpu_tokens else None,
            "replicas": c.replicas,
        },
        "p50_ms": o.p50_ms, "p90_ms": o.p90_ms, "hit_ratio": o.hit_ratio, "tier_hit_ratio": o.tier_hit_ratio,
        "dollars_per_hour": None if dollars is None else round(dollars, 6),
        "misses": target.misses(o),
        **({"router": o.router} if o.router is not None else {}),
    }


def pareto(rows: list[dict[str, Any]], pricing: Pricing, figure: str = "p90_ms") -> list[dict[str, Any]]:
    """The rows no other row beats on both cost (or memory) and ``figure`` (the TTFT percentile the target bounds)."""
    def cost(r: dict[str, Any]) -> float:
        c = r["config"]
        return r["dollars_per_hour"] if r["dollars_per_hour"] is not None else c["replicas"] * (c["gpu_gib"] + c["cpu_gib_total"] + c["disk_gib_total"])

    front, best = [], math.inf
    for r in sorted(rows, key=lambda r: (cost(r), r[figure])):
        if r[figure] < best:
            front.append({"cost": round(cost(r), 6), "p50_ms": r["p50_ms"], "p90_ms": r["p90_ms"], "config": r["config"]})
            best = r[figure]
    return front


def _within_deployment(workload: Workload, space: Space, deployment: Deployment) -> Space:
    """The space with GPU sizes up to what the deployment leaves for KV."""
    max_gpu = int(deployment.kv_room_gib * GIB) // workload.bytes_per_token
    if max_gpu < workload.min_gpu_tokens:
        needs = "one request needs"
        if workload.working_set_tokens is not None and workload.working_set_tokens == workload.min_gpu_tokens:
            needs = (f"the requests in flight hold at this load ({workload.working_set_tokens:,} tokens, "
                     f"{workload.working_set_tokens * workload.bytes_per_token / GIB:.2f} GiB): more GPUs, or a lower rate")
        raise ValueError(f"weights_gib: the deployment leaves {deployment.kv_room_gib:.2f} GiB for KV, less than {needs}")
    return replace(space, max_gpu_tokens=min(space.max_gpu_tokens or max_gpu, max_gpu))


def advise_cost(workload: Workload, space: Space, deployment: Deployment, top: int = 10) -> Cost:
    """What ``advise`` costs at most (``sim.bounds.budget``), from its grid alone: every candidate evaluated once, then up to
    ``3 * top + 2`` meeting ones shrunk tier by tier (``refine``: a binary search per bought tier, and once more),
    each such evaluation costed as the grid's dearest."""
    cands = candidates(workload, _within_deployment(workload, space, deployment))
    workload = workload.searching(len(cands))
    costs = [workload.cost(c) for c in cands]
    units = workload.units()
    per_refine = 1 + sum(probes(1, max((c.sizes()[t] or 0) for c in cands) // units[t]) for t in space.buy)
    dearest = max(costs, key=lambda c: c.work_steps)
    total = dearest.times((3 * top + 2) * per_refine)
    if workload.serving is not None:  # the working set's run, and the highest rate of each row shown (and the closest)
        total = total + workload.working_set_cost() + dearest.times((top + 1) * load.SEARCH_EVALUATIONS)
    for cost in costs:
        total = total + cost
    return total


def advise(workload: Workload, target: Target, space: Space, deployment: Deployment, prices: Prices | None,
           executor: Executor | None = None, progress: Progress | None = None, top: int = 10,
           kv_cache_dtype: str = "auto", model_id: str | None = None) -> Advice:
    """Search the space, rank the candidates that meet the target by cost, and explain the rest. The commands start
    ``model_id`` (default: the Hugging Face id of the workload's model)."""
    if target.pass_ is not None and not 1 <= target.pass_ <= workload.passes:
        raise ValueError(f"pass must be from 1 to {workload.passes}, got {target.pass_}")
    pricing = Pricing(workload.bytes_per_token, deployment, prices)
    space = _within_deployment(workload, space, deployment)
    cands = candidates(workload, space)
    workload = workload.searching(len(cands))
    outcomes = evaluate_all(workload, cands, target.pass_, executor, progress)
    rows = [(c, o) for c, o in zip(cands, outcomes)]
    grid = {t: sorted({c.sizes()[t] for c in cands if c.sizes()[t] is not None}) for t in TIERS}
    def order(p: tuple[Candidate, Outcome]) -> tuple[float, ...]:
        """Cheapest first; at one cost the engine's default policy first (a tie is then led by it)."""
        c = p[0]
        return (*pricing.key(c), c.cpu_policy != facts.default_policy(c.cpu_backend or DEFAULT_CPU_BACKEND))

    meeting = sorted((p for p in rows if not target.misses(p[1])), key=order)
    # The cheapest meets, and the cheapest with and without a CPU tier (the break-even note compares those two).
    chosen = meeting[: 3 * top]
    for has_cpu in (False, True):
        chosen += [next((p for p in meeting if bool(p[0].cpu_tokens) is has_cpu), None)] if meeting else []
    refined: dict[Candidate, Outcome] = {}
    for pair in chosen:
        if pair is not None:
            better, o = refine(workload, target, space, pair[0], grid)  # type: ignore[arg-type]
            refined.setdefault(better, o)
    every_meet = sorted(((c, o) for c, o in refined.items() if not any(_dominates(d, c) for d in refined)), key=order)
    ranked, tied = ties(every_meet)
    ranked = ranked[:top]
    failed = sorted((p for p in rows if target.misses(p[1])), key=lambda p: pricing.key(p[0]))
    meets = []
    for c, o in ranked:
        r = row(c, o, pricing, target)
        if c.cpu_tokens:
            r["config"]["policies"] = tied[c]
        cheaper = [f for f in failed if pricing.key(f[0]) < pricing.key(c)]
        r["cheaper_failed"] = len(cheaper)
        if cheaper:
            fc, fo = cheaper[-1]
            r["why_cheaper_failed"] = f"the next cheaper candidate ({_label(fc, pricing)}) misses: " + "; ".join(target.misses(fo))
        meets.append(r)
    closest = None
    if not meets:
        c, o = min(rows, key=lambda p: (target.shortfall(p[1]), *order(p)))
        closest = row(c, o, pricing, target)
    if workload.serving is not None:
        shown = [(r, c) for r, (c, _) in zip(meets, ranked)] + ([(closest, c)] if closest is not None else [])
        for r, rate in zip((r for r, _ in shown), sustained_all(workload, [c for _, c in shown], target, executor)):
            r["sustained_per_s"] = rate
    notes = _break_even([row(c, o, pricing, target) for c, o in every_meet], pricing) if prices is not None else []
    best = ranked[0][0] if ranked else (min(rows, key=lambda p: (target.shortfall(p[1]), *order(p)))[0])
    return Advice(
        len(cands), meets, closest, pareto([row(c, o, pricing, target) for c, o in rows] + meets, pricing, target.figure),
        workload.warnings() + _warnings(best, pricing) + _idle_warning(best, workload), _commands(best, pricing, workload, kv_cache_dtype, model_id), notes,
        target.figure, getattr(target, target.figure), _load(workload),
    )


def ties(pairs: list[tuple[Candidate, Outcome]]) -> tuple[list[tuple[Candidate, Outcome]], dict[Candidate, list[str]]]:
    """``pairs`` with candidates that differ only in their policy and have the same outcome made one, the first of
    them (in ``pairs``' order) standing for all; and each one's policies, its own first."""
    kept: dict[tuple[Any, ...], Candidate] = {}
    out, policies = [], {}
    for c, o in pairs:
        key = (c.gpu_tokens, c.cpu_tokens, c.disk_tokens, c.cpu_backend, o.p50_ms, o.p90_ms, o.hit_ratio,
               tuple(o.tier_hit_ratio.items()))
        first = kept.setdefault(key, c)
        if first is c:
            out.append((c, o))
            policies[c] = [c.cpu_policy]
        else:
            policies[first].append(c.cpu_policy)
    return out, policies


def _load(workload: Workload) -> dict[str, Any]:
    """The load the advice sized for: the serving settings, the rate the target held at, the working set in flight."""
    if workload.serving is None:
        return {}
    return {"serving": workload.serving.summary(), "rate_per_s": workload.rate_per_s,
            "timestamps": getattr(workload, "speedup", None) is not None, "working_set_tokens": workload.working_set_tokens}


def _sustained(args: tuple[Workload, Candidate, Target]) -> float | None:
    workload, candidate, target = args
    return load.highest_rate(
        lambda rate: not target.misses(workload.at_rate(rate).evaluate(candidate, target.pass_)), workload.rate_per_s or 1.0
    )


def sustained_all(workload: Workload, cands: list[Candidate], target: Target, executor: Executor | None = None) -> list[float | None]:
    """Each candidate's highest rate within the target (requests/s per replica; None: any rate), side by side."""
    jobs = [(workload, c, target) for c in cands]
    return list(executor.map(_sustained, jobs) if executor else map(_sustained, jobs))


def _label(c: Candidate, pricing: Pricing) -> str:
    parts = [f"GPU {c.gpu_tokens:,} tokens"]
    if c.cpu_tokens:
        parts.append(f"CPU {pricing.gib(c.cpu_tokens):.2f} GiB {c.cpu_policy}")
    if c.disk_tokens:
        parts.append(f"disk {pricing.gib(c.disk_tokens):.2f} GiB")
    return (f"{c.replicas} replicas of " if c.replicas > 1 else "") + ", ".join(parts)


def _break_even(meets: list[dict[str, Any]], pricing: Pricing) -> list[str]:
    """The DRAM price below which the cheapest meet with a CPU tier beats the cheapest with the GPU alone."""
    assert pricing.prices is not None
    gpu_only = next((m for m in meets if not m["config"]["cpu_tokens"]), None)
    with_cpu = next((m for m in meets if m["config"]["cpu_tokens"]), None)
    if gpu_only is None or with_cpu is None:
        return []
    per_gib = pricing.deployment.gpu_gib_hour(pricing.prices)
    saved_gpu_gib = gpu_only["config"]["gpu_gib"] - with_cpu["config"]["gpu_gib"]
    if saved_gpu_gib <= 0:
        return []
    ratio = saved_gpu_gib / with_cpu["config"]["cpu_gib_total"]
    return [
        f"the CPU tier of {with_cpu['config']['cpu_gib_total']:.2f} GiB replaces {saved_gpu_gib:.2f} GiB of GPU memory: "
        f"it is cheaper while DRAM costs under ${ratio * per_gib:.4f}/GiB-hour ({ratio:.2f} x the GPU's ${per_gib:.4f}/GiB-hour)"
    ]


def _warnings(c: Candidate, pricing: Pricing) -> list[str]:
    out = []
    if c.cpu_tokens is not None and c.cpu_backend is not None and "native" in c.cpu_backend and c.cpu_tokens <= c.gpu_tokens:
        out.append(f"the CPU tier ({c.cpu_tokens:,} tokens) is no bigger than the GPU's ({c.gpu_tokens:,}): under vLLM's native offload it only mirrors it")
    tp = pricing.deployment.tp
    if c.cpu_tokens is not None and tp > 1:
        total = pricing.gib(c.cpu_tokens)
        out.append(
            f"sizes: CPU {total:.2f} GiB in total; LMCache's max_local_cpu_size is per tensor-parallel rank "
            f"({total / tp:.2f} GiB on each of {tp}); vLLM's --kv-offloading-size is the total ({total:.2f})"
        )
    return out


def _idle_warning(c: Candidate, workload: Workload) -> list[str]:
    """An idle server's answer that holds one request at a time: said, with how to size for requests in flight."""
    if workload.serving is not None:
        return []
    block = workload.units()["gpu"]
    one = workload.min_gpu_tokens - block  # one request's blocks, without the null block
    held = (c.gpu_tokens - block) // one if one > 0 else 0
    if held >= 2:
        return []
    return [f"sized for one request at a time: {c.gpu_tokens:,} GPU tokens hold one request's blocks, so a second "
            "waits for the first to end; --rate R, --concurrency N or --trace FILE --timed sizes for the requests in flight"]


def _commands(c: Candidate, pricing: Pricing, workload: Workload, kv_cache_dtype: str, model_id: str | None = None) -> dict[str, str]:
    tp = pricing.deployment.tp
    units = workload.units()
    block, chunk = units["gpu"], units["cpu"]
    gpu_bytes_per_gpu = -(-(c.gpu_tokens + block) * workload.bytes_per_token // tp)  # the null block on top
    cpu_total = pricing.gib(c.cpu_tokens) if c.cpu_tokens else None
    disk_total = pricing.gib(c.disk_tokens) if c.disk_tokens else None
    model = model_id or served_id(workload.model)
    scheduler = workload.serving.scheduler_config() if workload.serving is not None else SchedulerConfig()
    out = {"vllm_native": facts.vllm_native(model, tp, block, gpu_bytes_per_gpu, cpu_total, kv_cache_dtype, c.cpu_policy, scheduler)}
    out["lmcache"] = facts.lmcache(
        model, tp, block, gpu_bytes_per_gpu, chunk, cpu_total / tp if cpu_total else None,
        disk_total / tp if disk_total else None, c.cpu_policy, kv_cache_dtype, scheduler,
    )
    out["sizes"] = "LMCACHE_MAX_LOCAL_CPU_SIZE is per tensor-parallel rank; --kv-offloading-size is the replica's total"
    simulated = _simulated_as(c)
    if simulated:
        out["simulated"] = simulated
    return out


def served_id(model: str) -> str:
    """The id ``vllm serve`` loads a known model by (the table's Hugging Face id), else the name as given."""
    try:
        return model_shape(model).hf_id or model
    except ValueError:
        return model


def _simulated_as(c: Candidate) -> str | None:
    """Which of the two commands starts what was simulated: the engines store and evict by different rules."""
    if not c.cpu_tokens:
        return None  # the GPU alone: both commands start the same prefix cache
    backend = c.cpu_backend or DEFAULT_CPU_BACKEND
    if backend == "lmcache":
        return "simulated under LMCache's rules; vllm_native starts these sizes under vLLM's own offloading, not simulated here"
    if backend == "vllm-native":
        return "simulated under vLLM's own offloading; lmcache starts these sizes under LMCache's rules, not simulated here"
    return f"simulated under the {backend} backend's simplified rules, which neither engine follows exactly"
