"""The sizing advisor: the seed lab's answers derived by hand, the vLLM/LMCache names it prints, bad input, Ray."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.advise import command
from sim.advise import facts
from sim.advise.candidate import Candidate, Target
from sim.advise.prices import Deployment, Prices
from sim.advise.search import Space, advise
from sim.advise.workloads import ScenarioWorkload
from sim.costs.model import default_costs
from sim.workloads.presets import preset_fields
from sim.workloads.scenario import Scenario

# A folder holding the vllm and lmcache wheels unpacked side by side (``pip download vllm lmcache --no-deps``, then
# unzip each into REF/vllm and REF/lmcache): the engines' own sources the names are checked against. Not part of the
# project, so without it those checks skip and say so.
REF_ENV = "KVSCOPE_REFERENCE_SOURCES"
REF = Path(os.environ.get(REF_ENV) or "/nonexistent")


def seed(**changes: object) -> Scenario:
    return Scenario(**{**preset_fields("seed-lab"), **changes})


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(command, list(args))
    return result.exit_code, result.output


def gpu_only_threshold() -> int:
    # Seed lab, GPU alone: 10 prompts of 5,024 tokens = 314 blocks each, read forward twice. vLLM frees a prompt's
    # blocks tail first, so after pass 1 the pool's LRU front is the oldest document's tail. Pass 2 reads the
    # documents in the same order: while document i is served the pool must also hold what the nine others left,
    # 9 x 314 = 2,826 blocks, so document i keeps (usable blocks - 2,826) of its head: usable = C/16 - 1 (the null
    # block). A hit of h blocks computes 5,024 - 16h tokens: TTFT = overhead + prefill x (5,024 - 16h).
    c = default_costs()
    computed_max = (100 - c.overhead_ms) / c.prefill_ms_per_token
    h = math.ceil((5024 - computed_max) / 16)
    return (h + 2826 + 1) * 16


def test_gpu_alone_pass2_p50_100ms() -> None:
    threshold = gpu_only_threshold()
    # With the fitted constants (overhead ~23.2 ms, prefill ~0.111 ms/token) h = 271 blocks: C = 49,568 tokens,
    # above the 45,248 at which pass 2 first hits at all (kvscope sweep) and below 50,256 (all ten documents + null).
    assert 45_248 <= threshold <= 50_256
    advice = advise(ScenarioWorkload(seed(cpu_gb=None)), Target(p50_ms=100, pass_=2), Space(buy=("gpu",)), Deployment(), None)
    best = advice.meets[0]
    assert best["config"]["gpu_tokens"] == threshold
    assert best["config"]["cpu_tokens"] is None
    assert best["p50_ms"] <= 100
    # One block less misses: the answer is the smallest.
    smaller = ScenarioWorkload(seed(cpu_gb=None)).evaluate(Candidate(threshold - 16), 2)
    assert smaller.p50_ms > 100


def test_cpu_tier_matches_the_sweep_and_its_break_even_price() -> None:
    # Allowed a CPU tier (LRU, LMCache's default) and the GPU, at a GPU price of $8/h for 80 GiB ($0.1/GiB-hour):
    # the GPU shrinks to the least one request needs, (314 + 1 null) x 16 = 5,040 tokens, and the CPU must hold every
    # document's whole chunks: 10 x floor(5,024/256) x 256 = 48,640 tokens = 48,640 x 28,672 B = 1.299 GiB, the
    # size `kvscope sweep --preset seed-lab` reports.
    prices = Prices(gpu_hour=8, dram_gib_hour=0.01)
    advice = advise(ScenarioWorkload(seed()), Target(p50_ms=100, pass_=2), Space(buy=("gpu", "cpu"), policies=("lru",)), Deployment(), prices)
    best = advice.meets[0]["config"]
    assert (best["gpu_tokens"], best["cpu_tokens"]) == (5_040, 48_640)
    assert best["cpu_gib_total"] == pytest.approx(48_640 * 28_672 / 2**30, abs=1e-4)
    # Break-even: the GPU alone needs C tokens; the CPU configuration saves (C - 5,040) tokens of GPU memory for
    # 48,640 of DRAM, so it is cheaper while DRAM < (C - 5,040)/48,640 x the GPU's price per GiB: 0.914 x.
    ratio = (gpu_only_threshold() - 5_040) / 48_640
    assert any(f"({ratio:.2f} x the GPU's $0.1000/GiB-hour)" in n for n in advice.notes), advice.notes
    # Below the break-even the CPU configuration ranks first; above it the GPU alone does.
    per_gib = 8 / 80
    for dram, cpu_first in ((per_gib * ratio * 0.99, True), (per_gib * ratio * 1.01, False)):
        ranked = advise(ScenarioWorkload(seed()), Target(p50_ms=100, pass_=2), Space(buy=("gpu", "cpu"), policies=("lru",)),
                        Deployment(), Prices(gpu_hour=8, dram_gib_hour=dram))
        assert (ranked.meets[0]["config"]["cpu_tokens"] is not None) is cpu_first


def test_cli_json_shape_and_commands() -> None:
    code, out = cli("--preset", "seed-lab", "--p50-ms", "100", "--pass", "2", "--buy", "gpu,cpu", "--policies", "lru",
                    "--tp", "2", "--gpu-hour", "8", "--dram-gib-hour", "0.01", "--json", "--top", "2")
    assert code == 0, out
    data = json.loads(out[out.index("{"):])
    assert set(data) >= {"candidates", "meets", "closest", "warnings", "commands"}
    best = data["meets"][0]
    assert {"config", "p50_ms", "p90_ms", "tier_hit_ratio", "dollars_per_hour"} <= set(best)
    # Under TP=2 LMCache gets half of the 1.30 GiB on each rank; vLLM's native flag gets the total.
    assert "LMCACHE_MAX_LOCAL_CPU_SIZE=0.65" in data["commands"]["lmcache"]
    assert "--kv-offloading-size 1.3" in data["commands"]["vllm_native"]
    assert any("per tensor-parallel rank" in w for w in data["warnings"])


def test_target_nobody_meets_names_the_closest() -> None:
    code, out = cli("--preset", "seed-lab", "--p50-ms", "1", "--pass", "2", "--buy", "cpu", "--policies", "lru", "--points", "3")
    assert code == 0, out
    assert "no configuration meets the target; the closest is" in out
    assert "p50" in out and "> 1 ms" in out


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--gpu-hour", "-1", "--dram-gib-hour", "0.01"], "--gpu-hour"),
        (["--gpu-hour", "2"], "--dram-gib-hour"),
        (["--buy", "gpu,tape"], "--buy"),
        ([], "--p50-ms"),
    ],
)
def test_bad_input_names_the_field(args: list[str], named: str) -> None:
    target = [] if named == "--p50-ms" else ["--p50-ms", "100"]
    code, out = cli("--preset", "seed-lab", *target, *args)
    assert code == 2, out
    assert named in out


def test_prices_file_and_config_without_fields(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"gpu_hour": 2, "dram_gib_hour": -0.5}')
    code, out = cli("--preset", "seed-lab", "--p50-ms", "100", "--prices", str(prices))
    assert code == 2 and "dram_gib_hour" in out, out
    config = tmp_path / "config.json"
    config.write_text('{"num_attention_heads": 12, "hidden_size": 1536}')
    code, out = cli("--preset", "seed-lab", "--p50-ms", "100", "--config", str(config))
    assert code == 2 and "num_hidden_layers is missing" in out, out


def test_workers_give_the_serial_ranking() -> None:
    _, serial = cli("--preset", "seed-lab", "--p50-ms", "100", "--pass", "2", "--buy", "gpu,cpu", "--workers", "1", "--json", "--points", "4")
    _, pooled = cli("--preset", "seed-lab", "--p50-ms", "100", "--pass", "2", "--buy", "gpu,cpu", "--workers", "2", "--json", "--points", "4")
    assert json.loads(serial[serial.index("{"):]) == json.loads(pooled[pooled.index("{"):])


def test_ray_gives_the_local_ranking() -> None:
    ray = pytest.importorskip("ray", reason="Ray is not installed (the cluster extra)")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        from ray.util.multiprocessing import Pool

        workload, target, space = ScenarioWorkload(seed()), Target(p50_ms=100, pass_=2), Space(buy=("gpu", "cpu"), points=4)
        local = advise(workload, target, space, Deployment(), None)
        pool = Pool()
        try:
            remote = advise(workload, target, space, Deployment(), None, executor=pool)
        finally:
            pool.close()
        assert remote.to_dict() == local.to_dict()
        # The command line's --ray joins the Ray already started here (auto) and prints what local workers print.
        args = ("--preset", "seed-lab", "--p50-ms", "100", "--pass", "2", "--buy", "gpu,cpu", "--points", "4", "--json")
        code, on_ray = cli(*args, "--ray", "auto")
        assert code == 0, on_ray
        _, on_workers = cli(*args, "--workers", "2")
        assert json.loads(on_ray[on_ray.index("{"):]) == json.loads(on_workers[on_workers.index("{"):])
    finally:
        ray.shutdown()


# -- names the advisor prints, against vLLM's and LMCache's own definitions ---------------------------------------

def _source(path: str) -> str | None:
    for root in (REF / "vllm", REF / "lmcache"):
        candidate = root / path
        if candidate.is_file():
            return candidate.read_text()
    return None


@pytest.mark.parametrize("name", [*facts.VLLM_FLAGS.values(), facts.VLLM_NATIVE_BACKEND, facts.VLLM_EVICTION_POLICY, facts.VLLM_ARC_POLICY,
                                  facts.LMCACHE_CONNECTOR, facts.LMCACHE_DEFAULT_POLICY, *facts.LMCACHE_SETTINGS.values()],
                         ids=lambda n: n.name)
def test_names_are_defined_where_cited(name: facts.Name) -> None:
    text = _source(name.source)
    if text is None:
        pytest.skip(f"{name.source} is not unpacked under ${REF_ENV} (the engines' sources are not part of the project)")
    lines = text.splitlines()
    # The cited line, or the few after it (a call spread over lines), defines the name.
    window = "\n".join(lines[name.line - 1 : name.line + 2])
    assert re.search(r'["\']' + re.escape(name.name) + r'["\']', window), (name, window)


def test_lmcache_env_names() -> None:
    # LMCache reads LMCACHE_<SETTING UPPER> (lmcache/v1/config.py:1002-1003).
    assert facts.lmcache_env("max_local_cpu_size") == "LMCACHE_MAX_LOCAL_CPU_SIZE"
    assert facts.lmcache_env("chunk_size") == "LMCACHE_CHUNK_SIZE"
    assert facts.lmcache_env("local_cpu") == "LMCACHE_LOCAL_CPU"
    text = _source("lmcache/v1/config.py")
    if text is None:
        pytest.skip(f"lmcache/v1/config.py is not unpacked under ${REF_ENV}")
    assert 'return f"LMCACHE_{attr_name.upper()}"' in text


def test_trace_workload_on_the_bundled_mooncake_sample() -> None:
    from sim.simulation.replay import ReplayTiers, run_replay
    from sim.traces.reader import bundled_trace_path, open_trace

    # The sample's longest request lists 374 hash ids of 512 tokens; the GPU must hold it plus the null block:
    # (374 + 1) x 512 = 192,000 tokens, the least GPU tier a candidate may have.
    longest = max(len(json.loads(line)["hash_ids"]) for line in bundled_trace_path("mooncake-synthetic").read_text().splitlines() if line.strip())
    code, out = cli("--trace", "mooncake-synthetic", "--hit-ratio", "0.1", "--buy", "gpu,cpu", "--points", "3", "--workers", "1", "--json", "--top", "1")
    assert code == 0, out
    data = json.loads(out[out.index("{"):])
    best = data["meets"][0]
    assert best["hit_ratio"] >= 0.1
    assert best["config"]["gpu_tokens"] >= (longest + 1) * 512
    # Its figures are the replay's own for the same tiers (kvscope replay --gpu-blocks N --cpu-blocks M).
    trace = open_trace("mooncake-synthetic")
    cpu = best["config"]["cpu_tokens"]
    outcome = run_replay(trace, ReplayTiers(best["config"]["gpu_tokens"] // 512 - 1, cpu // 512 if cpu else None))
    hits = sum(outcome.gpu_hit) + sum(outcome.cpu_hit)
    assert best["hit_ratio"] == round(hits / sum(trace.input_tokens), 4)
    code, out = cli("--trace", "mooncake-synthetic", "--hit-ratio", "0.1", "--buy", "disk")
    assert code == 2 and "--buy" in out and "no disk tier" in out


def test_measurement_file_replays_its_requests(tmp_path: Path) -> None:
    # A file of the seed lab's GPU run (kvscope simulate --out): 10 documents x 3 passes of 5,024-token prompts.
    # Replayed, its requests are the seed lab's, so the GPU-only answer is the one derived above.
    from sim.calibration.measurements import from_result, write
    from sim.simulation.run import simulate

    path = tmp_path / "seed.csv"
    write(path, from_result(simulate(seed(cpu_gb=None))))
    code, out = cli("--measurements", str(path), "--no-cpu", "--p50-ms", "100", "--pass", "2", "--json", "--top", "1", "--workers", "1")
    assert code == 0, out
    assert json.loads(out[out.index("{"):])["meets"][0]["config"]["gpu_tokens"] == gpu_only_threshold()
    # Prompts of two lengths are refused, naming the column.
    text = path.read_text().splitlines()
    text[1] = text[1].replace(",5024,", ",4000,", 1)
    path.write_text("\n".join(text) + "\n")
    code, out = cli("--measurements", str(path), "--p50-ms", "100")
    assert code == 2 and "--measurements" in out and "prompt_tokens differ" in out, out


def test_warnings_for_the_known_traps() -> None:
    from sim.advise.search import Pricing, _warnings

    # Prefixes shorter than a chunk: 200-token documents, 256-token chunks: no offload tier can hold one.
    short = ScenarioWorkload(seed(doc_tokens=200, gpu_tokens=21_520))
    assert any("shorter than an offload chunk (256)" in w for w in short.warnings())
    # A CPU tier no bigger than the GPU's, under vLLM's native offload, only mirrors the GPU.
    pricing = Pricing(28_672, Deployment(), None)
    mirror = _warnings(Candidate(21_520, 20_000, None, "lru", "vllm-native"), pricing)
    assert any("only mirrors" in w for w in mirror)
    assert not _warnings(Candidate(21_520, 20_000, None, "lru", "lmcache"), pricing)


def test_search_space_is_the_engines_own() -> None:
    # The policies searched are whatever the scenario model accepts for cpu_policy (one definition); none typed here.
    from typing import get_args

    from sim.advise.search import candidates

    cands = candidates(ScenarioWorkload(seed()), Space(buy=("cpu",), points=2))
    assert {c.cpu_policy for c in cands if c.cpu_tokens} == set(get_args(Scenario.model_fields["cpu_policy"].annotation))


def _page_trace_search() -> tuple[object, object]:
    """The page's trace search as its panel sends it: mooncake-synthetic, GPU and CPU bought, the rest defaults."""
    from app.web.routes.advise import AdviseInput, _workload

    body = AdviseInput.model_validate({"trace": "mooncake-synthetic", "buy": ["gpu", "cpu"], "p90_ms": 3000})
    return body, _workload(body, Scenario())


def test_the_pages_default_trace_search_is_estimated_within_the_search_budget_and_runs() -> None:
    from app.budgets import WebBudget
    from app.web.routes.advise import _search
    from sim.advise.search import advise_cost

    body, workload = _page_trace_search()
    budget = WebBudget()
    space = Space(tuple(body.buy), body.points, None, (), ())
    estimate = advise_cost(workload, space, body.deployment, body.top)
    assert estimate.work_steps <= budget.search_work
    assert estimate.memory_bytes <= budget.memory
    result = _search(body, workload, budget.per_search)
    # 6 GPU sizes x (no CPU tier + 6 CPU sizes), one policy (LRU) and no backend choice for a trace: 42.
    assert result["candidates"] == 6 * (1 + 6)
    assert result["meets"] and all(m["p90_ms"] <= 3000 for m in result["meets"])


def test_trace_candidates_replayed_compiled_give_the_python_engines_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    from sim.advise.search import candidates

    _, workload = _page_trace_search()
    cands = candidates(workload, Space(("gpu", "cpu"), 3))
    searching = workload.searching(len(cands))
    # One replay of the sample is 121,877 block references, under MIN_COMPILED_REFS: alone it runs in Python; as
    # one of a search's candidates the search's replays together are worth compiling, and cost a tenth.
    assert searching.cost(cands[0]).work_steps < workload.cost(cands[0]).work_steps
    fast = [searching.evaluate(c, None) for c in cands]
    monkeypatch.setenv("KVSCOPE_ENGINE", "python")
    assert searching.cost(cands[0]).work_steps == workload.cost(cands[0]).work_steps  # no discount without numba
    slow = [searching.evaluate(c, None) for c in cands]
    assert fast == slow


def test_a_default_search_keeps_the_scenarios_own_backend() -> None:
    from sim.advise.search import candidates

    workload = ScenarioWorkload(seed(cpu_gb=None))
    default = candidates(workload, Space(("gpu", "cpu"), 3))
    assert {c.cpu_backend for c in default} == {workload.scenario.cpu_backend}
    native = ScenarioWorkload(seed(cpu_gb=None, cpu_backend="vllm-native"))
    assert {c.cpu_backend for c in candidates(native, Space(("gpu", "cpu"), 3))} == {"vllm-native"}
    # Asked for, every backend is crossed (vllm-native only with its own policies, sim.tiers.native.backend_runs).
    asked = candidates(workload, Space(("gpu", "cpu"), 3, backends=("lmcache", "vllm-native")))
    assert {c.cpu_backend for c in asked} == {"lmcache", "vllm-native"}


@pytest.mark.parametrize(("target", "figure"), [(Target(p50_ms=100, pass_=2), "p50_ms"), (Target(p90_ms=100, pass_=2), "p90_ms"),
                                                (Target(p50_ms=100, p90_ms=700, pass_=2), "p90_ms")])
def test_the_pareto_front_is_drawn_by_the_figure_the_target_bounds(target: Target, figure: str) -> None:
    """The front was drawn by p90 whatever the target: with a p50 target, candidates meeting it (p50 49.5 ms) stood on
    the chart at their p90 (601.6 ms with an MRU CPU tier), six times over the 100 ms the legend said they met. The
    front is now by the bounded figure: each point is cheaper than the next and strictly faster in that figure, every
    meeting candidate lies on or above it, and none of them is above the bound."""
    advice = advise(ScenarioWorkload(seed()), target, Space(buy=("gpu", "cpu"), points=3), Deployment(), None)
    assert advice.pareto_figure == figure and advice.pareto_target_ms == getattr(target, figure)
    front = advice.pareto
    assert all(a["cost"] <= b["cost"] and a[figure] > b[figure] for a, b in zip(front, front[1:])), front
    assert advice.meets and all(m[figure] <= getattr(target, figure) for m in advice.meets)
    # No meeting candidate is both cheaper than a front point and faster in the figure (else the front would hold it).
    memory = lambda r: r["config"]["gpu_gib"] + r["config"]["cpu_gib_total"] + r["config"]["disk_gib_total"]  # noqa: E731
    for m in advice.meets:
        assert not any(memory(m) < p["cost"] - 1e-6 and m[figure] < p[figure] for p in front), m


@pytest.mark.parametrize(("policy", "line"), [("lfu", "LMCACHE_CACHE_POLICY=LFU "), ("arc", None), ("s3fifo", None)])
def test_the_lmcache_command_names_only_a_policy_lmcache_ships(policy: str, line: str | None) -> None:
    # LMCache 0.5.6 maps LMCACHE_CACHE_POLICY to LRU, LFU, FIFO or MRU and raises ValueError on any other
    # (cache_policy/__init__.py 13-18, 36-45): a command setting ARC or S3FIFO would not start. kvscope's arc and
    # s3fifo follow libCacheSim, so a candidate using them gets no LMCache command, and says why.
    code, out = cli("--preset", "seed-lab", "--p50-ms", "100", "--pass", "2", "--buy", "gpu,cpu", "--policies", policy,
                    "--json", "--top", "1")
    assert code == 0, out
    data = json.loads(out[out.index("{"):])
    assert data["meets"][0]["config"]["cpu_policy"] == policy
    command = data["commands"]["lmcache"]
    if line is not None:
        assert line in command and command.endswith("'{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'")
    else:
        assert "LMCACHE_CACHE_POLICY" not in command and "vllm serve" not in command
        assert f"LMCache 0.5.6 has no {policy} cache policy" in command


@pytest.mark.parametrize(("backend", "simulated", "other"), [("lmcache", "LMCache's rules", "vllm_native"), ("vllm-native", "vLLM's own offloading", "lmcache")])
def test_the_answer_says_which_command_starts_what_was_simulated(backend: str, simulated: str, other: str) -> None:
    # Both commands are printed for the same sizes, but the engines store and evict by different rules (LMCache
    # stores from its own hit, vLLM writes completed GPU blocks through): only one is what the figures describe.
    code, out = cli("--preset", "seed-lab", "--p50-ms", "100", "--pass", "2", "--buy", "gpu,cpu", "--policies", "lru",
                    "--backends", backend, "--json", "--top", "1")
    assert code == 0, out
    data = json.loads(out[out.index("{"):])
    assert data["meets"][0]["config"]["cpu_tokens"], data["meets"][0]
    said = data["commands"]["simulated"]
    assert said.startswith(f"simulated under {simulated};") and f"{other} starts these sizes" in said and "not simulated" in said
    code, text = cli("--preset", "seed-lab", "--p50-ms", "100", "--pass", "2", "--buy", "gpu,cpu", "--policies", "lru",
                     "--backends", backend, "--top", "1")
    assert code == 0 and f"  ({said})" in text.splitlines()


def test_a_gpu_alone_names_no_simulated_engine() -> None:
    # No CPU tier: the two commands start the same prefix cache, so neither is singled out.
    code, out = cli("--preset", "seed-lab", "--p50-ms", "1000", "--pass", "1", "--buy", "gpu", "--no-cpu", "--json", "--top", "1")
    assert code == 0, out
    data = json.loads(out[out.index("{"):])
    assert not data["meets"][0]["config"]["cpu_tokens"] and "simulated" not in data["commands"]


@pytest.mark.parametrize("policy", ["arc", "lru", "fifo"])
def test_the_vllm_command_sets_the_candidates_eviction_policy(policy: str) -> None:
    # vLLM's offload reads its policy from kv_connector_extra_config["eviction_policy"], default "lru"
    # (vllm/v1/kv_offload/cpu/spec.py:142); no flag sets it. --kv-offloading-backend native only *updates* that
    # extra config with cpu_bytes_to_use (vllm/config/vllm.py:1173-1175), so a --kv-transfer-config holding just the
    # policy survives beside the size flags. An ARC candidate must therefore carry {"eviction_policy": "arc"}; an LRU
    # one needs nothing (the default); FIFO is not among vLLM's two (factory.py:86-91), so no command, a sentence.
    backend = "vllm-native" if policy in ("arc", "lru") else "lmcache"
    code, out = cli("--preset", "seed-lab", "--p50-ms", "100", "--pass", "2", "--buy", "gpu,cpu", "--policies", policy,
                    "--backends", backend, "--json", "--top", "1")
    assert code == 0, out
    data = json.loads(out[out.index("{"):])
    assert data["meets"][0]["config"]["cpu_policy"] == policy and data["meets"][0]["config"]["cpu_tokens"]
    command = data["commands"]["vllm_native"]
    if policy == "fifo":
        assert command == "vLLM 0.33's offloading has no fifo eviction policy (only lru, arc): this configuration is a what-if"
        return
    argv = shlex.split(command)
    assert argv[argv.index("--kv-offloading-backend") + 1] == "native"
    if policy == "lru":
        assert "--kv-transfer-config" not in argv
    else:
        assert json.loads(argv[argv.index("--kv-transfer-config") + 1]) == {"kv_connector_extra_config": {"eviction_policy": "arc"}}
    text = _source("vllm/config/vllm.py")
    if text is None:
        pytest.skip(f"vllm/config/vllm.py is not unpacked under ${REF_ENV}")
    # The native backend merges into the user's extra config rather than replacing it (what keeps the policy).
    assert "self.kv_transfer_config.kv_connector_extra_config.update(" in text
    spec = _source("vllm/v1/kv_offload/cpu/spec.py")
    assert spec is not None and 'self.extra_config.get("eviction_policy", "lru")' in spec


def test_the_policies_lmcache_names_are_lmcaches_own() -> None:
    from sim.tiers.policies import POLICIES

    text = _source("lmcache/v1/storage_backend/cache_policy/__init__.py")
    if text is None:
        pytest.skip(f"LMCache's cache_policy/__init__.py is not unpacked under ${REF_ENV}")
    mapping = set(re.findall(r'^\s+"([A-Z0-9]+)": \w+CachePolicy,$', text, re.M))
    assert mapping == {p.lmcache_name for p in POLICIES.values() if p.lmcache_name}


def test_a_storage_tier_behind_the_cpu_has_its_own_hit_ratio_and_column() -> None:
    # Six seed documents (5,024-token prompts, 19 full chunks = 4,864 tokens each) read forward twice; GPU 12,000
    # tokens and CPU 10,000 are LRU on a cycle of six and hit nothing in pass 2, the nvme tier (100,000 tokens)
    # holds all six and serves each document's 19 chunks: 29,184 of pass 2's 30,144 prompt tokens, 0.9682
    # (tests/app/cli/test_runs_cli.py derives the same run). The disk tier is not there: nothing is the disk's.
    scenario = seed(docs=6, passes="forward,forward", storage_tiers=["nvme:100000t"])
    outcome = ScenarioWorkload(scenario).evaluate(Candidate(12_000, 10_000, None, "lru", "lmcache"), 2)
    assert outcome.tier_hit_ratio == {"gpu": 0.0, "cpu": 0.0, "disk": 0.0, "nvme": round(29_184 / 30_144, 4)}
    assert outcome.hit_ratio == round(29_184 / 30_144, 4)
    code, out = cli("--docs", "6", "--passes", "forward,forward", "--storage-tier", "nvme:100000t", "--gpu-tokens", "12000",
                    "--cpu-tokens", "10000", "--buy", "cpu", "--points", "2", "--p50-ms", "1000", "--pass", "2")
    assert code == 0, out
    header = next(line for line in out.splitlines() if line.startswith("#"))
    # Each tier by its display name, as every table heads it (sim.engine.events.TIER_LABELS); a storage tier by its own.
    assert "hit GPU/CPU/Disk/nvme" in header
