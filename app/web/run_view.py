"""What the dashboard draws for a scenario: its lanes and tiers, the seed-style table (with the lab's measurements
beside the predictions when the scenario is the lab's), the pass boundaries and the few facts the page explains."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlencode

from app.scenario_input import resolve
from sim.blocks.kv import gib_for
from sim.calibration.calibrate import read_table
from sim.costs.model import default_costs
from sim.engine.events import CPU, tier_label
from sim.numeric.stats import quantile, speedup
from sim.sched.serving import Serving
from sim.simulation.run import engines
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario

LANE_TITLES = {
    "gpu": "vLLM alone: the GPU prefix cache",
    "gpu+cpu": "vLLM + LMCache: GPU, then a CPU tier",
    "gpu+cpu+disk": "vLLM + LMCache: GPU, CPU, then local disk",
}
MORE_TIERS_TITLE = "vLLM + LMCache: GPU, CPU, then {}"
# The lab measured this scenario; its table is shown beside the prediction only for it.
MEASURED_PRESETS = ("seed-lab", "seed-lab-doc")


@dataclass(frozen=True, slots=True)
class TierView:
    name: str
    label: str
    unit_tokens: int
    capacity_tokens: int
    prompts_fit: float  # how many whole prompts the tier holds


@dataclass(frozen=True, slots=True)
class LaneView:
    run: str
    title: str
    tiers: list[TierView]


@dataclass(frozen=True, slots=True)
class RowView:
    """One (configuration, pass) line of the seed-style table."""

    run: str
    pass_: int
    order: str
    p50_ms: float | None  # None (and the others alike): not known until the stream's pass event (``pending``)
    mean_ms: float | None
    gpu_hit_tokens: int | None
    tier_hits: dict[str, int]  # offload tier name -> tokens loaded from it
    computed_tokens: int | None
    p50_speedup: float | None
    mean_speedup: float | None
    p90_ms: float | None = None
    p99_ms: float | None = None
    tpot_ms: float | None = None  # under load (sim.sched.stream's pass summary): time per output token, mean
    output_tokens_per_s: float | None = None
    prompt_tokens: int = 0  # every prompt token of the pass: what a hit rate is a share of
    bytes_per_token: int = 0  # KV bytes of one token, to say hit tokens in GiB
    measured_p50_ms: float | None = None
    measured_mean_ms: float | None = None
    measured_p50_speedup: float | None = None
    pending: bool = False  # filled in from the stream (static/js/table.js)


    def share(self, tokens: int) -> str:
        """``tokens`` of this pass as a hit rate and a size: ``42.5% · 0.571 GiB``; empty until known."""
        if self.pending or not self.prompt_tokens:  # not known yet, or a kept run without its requests
            return ""
        rate = 100 * tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        return f"{rate:.1f}% · {gib_for(tokens, self.bytes_per_token):.3f} GiB"


@dataclass(frozen=True, slots=True)
class PassMark:
    number: int
    order: str
    first_request: int  # the request's seq, as every view and the CLI number requests


@dataclass(frozen=True, slots=True)
class Facts:
    """The numbers the explainer quotes."""

    docs: int
    prompt_tokens: int
    gpu_tokens: int
    gpu_prompts: float
    all_prompts_tokens: int
    overflow: float
    cpu_tokens: int | None
    cpu_prompts: float | None
    chunk_size: int  # the CPU tier's unit: LMCache's chunk, vLLM-native's block, a whole document
    chunked_tokens: int  # what one prompt can load from the CPU tier: its full units short of the last token
    load_ms: float
    compute_ms: float
    gpu_policy: str = "lru"
    shared_tokens: int = 0  # the shared prefix every prompt starts with
    # What a pass read in the same order as the pass before it finds on the GPU (see _repeat): "all", "none",
    # "shared" (the shared prefix only), "heads" (the head of a document may still be there), "kept" (a what-if policy)
    repeat: str = "none"


@dataclass(frozen=True, slots=True)
class RunView:
    scenario: Scenario
    lanes: list[LaneView]
    rows: list[RowView]
    passes: list[PassMark]
    measured: bool
    requests: int
    ttft_max_ms: float | None  # None: not known before the run (queueing under load): the chart scales to its points
    facts: Facts
    stream_body: dict[str, Any] | None  # the JSON body of /api/simulate/stream; None: not started
    stored_run: int | None = None  # a kept run, replayed from its stored events instead of a new stream
    stored_note: str | None = None  # what a kept run lacks, said above its panels
    stream_token: str | None = None  # the checked run's stream to take (app.web.planned), instead of posting the body
    serving: dict[str, Any] | None = None  # Serving.summary() of a run the stepped engine serves; None: one at a time
    overlapping: bool = False  # its requests may overlap: Step moves a scheduler step, not a request

    @property
    def unit(self) -> str:
        """What Step advances: one scheduler step when requests overlap, else one request (static/js/player.js)."""
        return "step" if self.overlapping else "request"

    @property
    def decodes(self) -> bool:
        """Whether the table shows time per output token and throughput: served by the stepped engine, with
        requests that generate more than one token (the sequential engine does not model decoding)."""
        return self.serving is not None and self.scenario.output_tokens > 1

    @property
    def costs_label(self) -> str:
        """Where the cost constants of the prediction came from."""
        return self.scenario.costs.source if self.scenario.costs is not None else "the server's (fitted to the lab's table)"

    @property
    def lab_hidden(self) -> bool:
        """The lab's scenario, run with other costs: its measurement is not put beside this prediction."""
        return not self.measured and lab_scenario(self.scenario)

    @property
    def scenario_link(self) -> str | None:
        """``/?scenario=PRESET&field=value...``: the page that runs this scenario again."""
        if self.stream_body is None:
            return None
        return "/?" + urlencode(scenario_query(self.stream_body))

    @property
    def runs(self) -> list[str]:
        return [lane.run for lane in self.lanes]

    @property
    def offload_tiers(self) -> list[TierView]:
        """Every offload tier of any lane, in lookup order: one table column each (at least the CPU's)."""
        seen: dict[str, TierView] = {}
        for lane in self.lanes:
            for tier in lane.tiers[1:]:
                seen.setdefault(tier.name, tier)
        return list(seen.values()) or [TierView(CPU, tier_label(CPU), 0, 0, 0.0)]

    @property
    def pass_marks(self) -> list[dict[str, Any]]:
        return [asdict(p) for p in self.passes]


def scenario_query(body: dict[str, Any]) -> dict[str, str]:
    """A scenario body as query fields: ``scenario`` names the preset; values that are not text are JSON."""
    query = {"scenario": str(body.get("preset", "seed-lab"))}
    for name, value in body.items():
        if name not in ("preset", "pace_ms"):
            query[name] = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return query


def build(
    scenario: Scenario, result: dict[str, Any], stream_body: dict[str, Any] | None = None,
    stored_run: int | None = None, stored_note: str | None = None, serving: Serving | None = None,
) -> RunView:
    """The view of ``result`` (what ``sim.simulation.run.simulate(scenario)`` returned, or the stepped engine's when
    ``serving`` is given): a kept run's, every number known."""
    lanes = _lanes(scenario, [(run["name"], run["tiers"]) for run in result["runs"]])
    measured = _measured(scenario) if serving is None else {}  # the lab sent one request at a time
    first_run = result["runs"][0]["requests"]
    passes: dict[int, PassMark] = {}
    for r in first_run:
        passes.setdefault(r["pass"], PassMark(r["pass"], r["order"], r["seq"]))
    return RunView(
        scenario=scenario,
        lanes=lanes,
        rows=_rows(result, measured, scenario.bytes_per_token),
        passes=list(passes.values()),
        measured=bool(measured),
        requests=len(first_run),
        ttft_max_ms=max(r["ttft_ms"] for run in result["runs"] for r in run["requests"]) if serving is None else None,
        facts=_facts(scenario, lanes),
        stream_body=stream_body,
        stored_run=stored_run,
        stored_note=stored_note,
        serving=None if serving is None else serving.summary(),
        overlapping=serving is not None and serving.overlapping,
    )


def plan(scenario: Scenario, stream_body: dict[str, Any], serving: Serving | None = None) -> RunView:
    """The view of a run about to be streamed, without simulating it: the lanes, passes and facts follow from the
    scenario; the table's numbers arrive with the stream's ``pass`` events (static/js/table.js fills them in), so
    that a Run is simulated once, by its stream. ``serving``: the stepped engine serves it (sim.sched.stream)."""
    requests = build_requests(scenario)
    runs = engines(scenario)
    lanes = _lanes(scenario, [(e.run, [asdict(t) for t in e.tier_infos()]) for e in runs])
    measured = _measured(scenario) if serving is None else {}  # the lab sent one request at a time
    passes: dict[int, PassMark] = {}
    for r in requests:
        passes.setdefault(r.pass_, PassMark(r.pass_, r.order, r.seq))
    baseline = runs[0].run
    rows = []
    for e in runs:
        for mark in passes.values():
            mine, base = measured.get((e.run, mark.number)), measured.get((baseline, mark.number))
            rows.append(
                RowView(
                    run=e.run, pass_=mark.number, order=mark.order, p50_ms=None, mean_ms=None, gpu_hit_tokens=None,
                    tier_hits={}, computed_tokens=None, p50_speedup=None, mean_speedup=None, p90_ms=None, p99_ms=None,
                    bytes_per_token=scenario.bytes_per_token, pending=True,
                    measured_p50_ms=mine[0] if mine else None, measured_mean_ms=mine[1] if mine else None,
                    measured_p50_speedup=speedup(base[0], mine[0]) if mine and base and e.run != baseline else None,
                )
            )
    return RunView(
        scenario=scenario, lanes=lanes, rows=rows, passes=list(passes.values()), measured=bool(measured),
        requests=len(requests),
        ttft_max_ms=None if serving is not None else ttft_bound_ms(scenario, max(r.prompt_tokens for r in requests)),
        facts=_facts(scenario, lanes), stream_body=stream_body,
        serving=None if serving is None else serving.summary(), overlapping=serving is not None and serving.overlapping,
    )


def ttft_bound_ms(scenario: Scenario, prompt_tokens: int) -> float:
    """No request of the scenario can take longer: every prompt token at the dearest of computing or loading from any
    tier, and written through as well (the chart's axis is fixed from it before any point arrives)."""
    costs = scenario.costs or default_costs()
    dearest = max(
        costs.prefill_ms_per_token, costs.load_cpu_ms_per_token, costs.load_disk_ms_per_token,
        *(t.load_ms_per_token or 0.0 for t in scenario.storage_tiers),
    )
    return round(costs.overhead_ms + prompt_tokens * (dearest + costs.store_ms_per_token), 3)


def _lanes(scenario: Scenario, runs: list[tuple[str, list[dict[str, Any]]]]) -> list[LaneView]:
    prompt = scenario.prompt_tokens
    return [
        LaneView(
            name,
            LANE_TITLES.get(name) or MORE_TIERS_TITLE.format(", ".join(t["name"] for t in tiers[2:])),
            [
                TierView(t["name"], tier_label(t["name"]), t["unit_tokens"], t["capacity_tokens"], t["capacity_tokens"] / prompt)
                for t in tiers
            ],
        )
        for name, tiers in runs
    ]


def lab_scenario(scenario: Scenario) -> bool:
    """Whether the scenario's requests and tiers are the ones the lab measured (whatever its cost constants)."""
    workload = scenario.model_copy(update={"costs": None})
    return any(workload == resolve(name, {}) for name in MEASURED_PRESETS)


def lab_costs(scenario: Scenario) -> bool:
    """Whether the scenario runs with the constants fitted to the lab's table (the default): only then is the lab's
    measurement the one its prediction stands for. Calibrated costs come from another server's measurements."""
    if scenario.costs is None:
        return True
    return scenario.costs.model_dump(exclude={"source"}) == default_costs().model_dump(exclude={"source"})


def _measured(scenario: Scenario) -> dict[tuple[str, int], tuple[float, float]]:
    """(configuration, pass) -> measured (p50, mean), when the scenario is the one the lab measured with the costs
    fitted to that measurement."""
    if not (lab_scenario(scenario) and lab_costs(scenario)):
        return {}
    return {(c.config, c.pass_): (c.p50_ms, c.mean_ms) for c in read_table()}


def _rows(result: dict[str, Any], measured: dict[tuple[str, int], tuple[float, float]], bytes_per_token: int) -> list[RowView]:
    speedups = {(c["candidate"], c["pass"]): c for c in result["comparison"]}
    baseline = result["runs"][0]["name"]
    rows = []
    for run in result["runs"]:
        by_pass: dict[int, list[dict[str, Any]]] = {}
        for r in run["requests"]:
            by_pass.setdefault(r["pass"], []).append(r)
        for p in run["passes"]:
            requests = by_pass.get(p["pass"], [])
            s = speedups.get((run["name"], p["pass"]))
            mine, base = measured.get((run["name"], p["pass"])), measured.get((baseline, p["pass"]))
            rows.append(
                RowView(
                    run=run["name"],
                    pass_=p["pass"],
                    order=p["order"],
                    p50_ms=p["p50_ms"],
                    mean_ms=p["mean_ms"],
                    gpu_hit_tokens=p["gpu_hit_tokens"],
                    tier_hits=p["tier_hits"],
                    computed_tokens=p["computed_tokens"],
                    p50_speedup=s["p50_speedup"] if s else None,
                    mean_speedup=s["mean_speedup"] if s else None,
                    p90_ms=p["p90_ms"],
                    p99_ms=quantile([r["ttft_ms"] for r in requests], 0.99) if requests else None,  # exact: rounded once, written
                    tpot_ms=p.get("tpot_ms"),
                    output_tokens_per_s=p.get("output_tokens_per_s"),
                    prompt_tokens=sum(r["prompt_tokens"] for r in requests),
                    bytes_per_token=bytes_per_token,
                    measured_p50_ms=mine[0] if mine else None,
                    measured_mean_ms=mine[1] if mine else None,
                    measured_p50_speedup=speedup(base[0], mine[0]) if mine and base and run["name"] != baseline else None,
                )
            )
    return rows


def _facts(scenario: Scenario, lanes: list[LaneView]) -> Facts:
    prompt = scenario.prompt_tokens
    tiers = {t.name: t for lane in lanes for t in lane.tiers}
    costs = scenario.costs or default_costs()
    cpu = tiers.get("cpu")
    unit = cpu.unit_tokens if cpu else scenario.chunk_size
    # Whole units only, and never the last token, which vLLM always computes (sim/engine/loop.py: aligned is at most
    # prompt_tokens - 1): 4,864 of a 5,024- or 5,120-token prompt in 256-token chunks, 5,008 of 5,024 in 16-token blocks.
    chunked = (prompt - 1) // unit * unit
    return Facts(
        docs=scenario.docs,
        prompt_tokens=prompt,
        gpu_tokens=tiers["gpu"].capacity_tokens,
        gpu_prompts=tiers["gpu"].prompts_fit,
        all_prompts_tokens=scenario.docs * prompt,
        overflow=scenario.docs * prompt / tiers["gpu"].capacity_tokens,
        cpu_tokens=cpu.capacity_tokens if cpu else None,
        cpu_prompts=cpu.prompts_fit if cpu else None,
        chunk_size=unit,
        chunked_tokens=chunked,
        # Marginal costs of one prompt's full chunks: loaded from CPU, or computed.
        load_ms=costs.ttft_ms(0, cpu_tokens=chunked) - costs.ttft_ms(0),
        compute_ms=costs.ttft_ms(chunked) - costs.ttft_ms(0),
        gpu_policy=scenario.gpu_policy,
        shared_tokens=scenario.shared_prefix_tokens,
        repeat=_repeat(scenario, tiers["gpu"].capacity_tokens),
    )


def _repeat(scenario: Scenario, gpu_tokens: int) -> str:
    """What a pass in the same order as the one before finds on the GPU, where it can be told from the sizes alone.

    LRU (and FIFO, the same here: nothing is hit between two reads) evicts the oldest first. A document read N - 1
    documents ago is gone once those N - 1 prompts' own tokens fill the cache: all of it when the GPU holds at most
    N - 1 prompts (less the shared prefix, which every request hits and so keeps). With room for more, vLLM frees a
    request's tail first (vllm/v1/core/kv_cache_manager.py:629, free: "in reverse order so that the tail blocks are evicted first"), so a document's head can
    outlive its tail and hit. Whole documents (granularity doc) leave whole: any overflow evicts each one in turn."""
    prompt, shared, docs = scenario.prompt_tokens, scenario.shared_prefix_tokens, scenario.docs
    if docs * prompt <= gpu_tokens:
        return "all"
    if scenario.gpu_policy != "lru" and scenario.gpu_policy != "fifo":  # MRU and Belady keep documents read long ago
        return "kept"
    if scenario.granularity == "block" and gpu_tokens - shared > (docs - 1) * (prompt - shared):
        return "heads"
    return "shared" if shared else "none"
