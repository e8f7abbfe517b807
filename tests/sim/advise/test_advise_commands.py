"""The commands the advisor prints: a model id vLLM can load, the scheduler settings simulated, only flags vLLM
0.33.0 has, and tied candidates as one row led by the engine's default policy."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.advise import command
from sim.advise import facts
from sim.advise.candidate import Target
from sim.advise.prices import Deployment
from sim.advise.search import Space, advise
from sim.advise.workloads import ScenarioWorkload
from sim.blocks.kv import MODELS, shape_from_config
from sim.workloads.presets import preset_fields
from sim.workloads.scenario import Scenario
from test_advise import REF_ENV, _source


def cli(*args: str) -> dict:
    result = CliRunner().invoke(command, ["--preset", "seed-lab", "--workers", "1", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output[result.output.index("{"):])


def test_every_known_model_has_a_hugging_face_id() -> None:
    # An id is ORG/NAME as the Hub spells it; the seed lab's model is the one the README's vllm serve starts.
    for name, shape in MODELS.items():
        assert shape.hf_id and re.fullmatch(r"[\w.-]+/[\w.-]+", shape.hf_id), name
    assert MODELS["qwen2.5-1.5b"].hf_id == "Qwen/Qwen2.5-1.5B-Instruct"
    assert "vllm serve Qwen/Qwen2.5-1.5B-Instruct" in (Path(__file__).parents[3] / "README.md").read_text()


def test_the_commands_start_the_models_id_with_the_scheduler_settings_simulated() -> None:
    # Idle: one request at a time under the scheduler's defaults, vllm serve's on an 80 GiB GPU (8,192 tokens a step,
    # 1,024 sequences), synchronous (kvscope models no asynchronous scheduling, which vllm serve turns on).
    commands = cli("--p90-ms", "600", "--no-cpu")["commands"]
    for name in ("vllm_native", "lmcache"):
        assert "vllm serve Qwen/Qwen2.5-1.5B-Instruct " in commands[name]
        assert "--max-num-batched-tokens 8192 --max-num-seqs 1024 --no-async-scheduling" in commands[name]
    assert "qwen2.5-1.5b" not in commands["vllm_native"]
    # Under load the given settings, and the booleans turned off that vllm serve leaves on.
    loaded = cli("--p90-ms", "5000", "--no-cpu", "--concurrency", "2", "--max-num-batched-tokens", "2048",
                 "--max-num-seqs", "64", "--long-prefill-token-threshold", "512", "--no-scheduler-reserve-full-isl")
    assert ("--max-num-batched-tokens 2048 --max-num-seqs 64 --long-prefill-token-threshold 512 "
            "--no-scheduler-reserve-full-isl --no-async-scheduling") in loaded["commands"]["vllm_native"]


def test_only_flags_vllm_has() -> None:
    # Every flag a printed command passes is one of VLLM_FLAGS (each checked against vLLM's source where it is cited,
    # test_advise.test_names_are_defined_where_cited), or the --no- form argparse gives a boolean one.
    names = {n.name for n in facts.VLLM_FLAGS.values()}
    booleans = {facts.VLLM_FLAGS[f].name for f in ("enable_chunked_prefill", "scheduler_reserve_full_isl", "async_scheduling")}
    data = cli("--p90-ms", "600", "--buy", "gpu,cpu", "--points", "3", "--rate", "2", "--no-enable-chunked-prefill")
    for name in ("vllm_native", "lmcache"):
        for token in shlex.split(data["commands"][name]):
            if token.startswith("--"):
                assert token in names or ("--" + token.removeprefix("--no-")) in booleans, (name, token)


def test_booleans_have_their_no_form() -> None:
    text = _source(facts.VLLM_BOOLEAN_ACTION.source)
    if text is None:
        pytest.skip(f"{facts.VLLM_BOOLEAN_ACTION.source} is not unpacked under ${REF_ENV}")
    lines = text.splitlines()[facts.VLLM_BOOLEAN_ACTION.line - 3 : facts.VLLM_BOOLEAN_ACTION.line]
    assert any("contains_type(type_hints, bool)" in line for line in lines)
    assert "argparse.BooleanOptionalAction" in lines[-1]


def test_a_configs_name_or_path_is_the_model_started(tmp_path: Path) -> None:
    config = {"_name_or_path": "acme/qwen-ft", "num_hidden_layers": 28, "num_attention_heads": 12,
              "num_key_value_heads": 2, "hidden_size": 1536}
    assert shape_from_config(config).hf_id == "acme/qwen-ft"
    assert shape_from_config({**config, "_name_or_path": ""}).hf_id is None
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    commands = cli("--p90-ms", "600", "--no-cpu", "--config", str(path))["commands"]
    assert "vllm serve acme/qwen-ft " in commands["vllm_native"]


def test_policies_that_tie_are_one_row_led_by_the_engines_default() -> None:
    # A CPU tier of one chunk (256 tokens) holds one chunk whatever its policy: every insertion evicts the one chunk
    # it holds, so every policy serves the same hits and the same TTFTs. With a target everything meets, the search
    # shrinks every CPU tier to that one chunk: the candidates with a CPU tier are one per policy, all tied, shown as one
    # row listing them, LMCache's default (LRU, the seed's backend) first.
    workload = ScenarioWorkload(Scenario(**preset_fields("seed-lab")))
    advice = advise(workload, Target(p90_ms=100_000), Space(buy=("cpu",), points=2), Deployment(), None)
    with_cpu = [m for m in advice.meets if m["config"]["cpu_tokens"]]
    assert len(with_cpu) == 1
    config = with_cpu[0]["config"]
    assert config["cpu_tokens"] == 256
    assert config["policies"][0] == facts.default_policy("lmcache") == "lru"
    assert sorted(config["policies"]) == sorted(workload.choices("cpu_policy"))
