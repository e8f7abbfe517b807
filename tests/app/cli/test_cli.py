"""The CLI: the JSON contract of DESIGN.md, measurement files, and exit 2 with a clear message on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from sim.workloads.scenario import Scenario

BIN = Path(sys.executable).parent


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_simulate_json_has_the_documented_shape() -> None:
    out = subprocess.run([BIN / "kvscope", "simulate", "--preset", "seed-lab", "--json"], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert set(data) >= {"scenario", "runs", "comparison"}
    assert [r["name"] for r in data["runs"]] == ["gpu", "gpu+cpu"]
    first = data["runs"][0]["requests"][0]
    assert set(first) >= {"seq", "pass", "order", "doc", "prompt_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "ttft_ms", "evicted"}
    assert (first["seq"], first["pass"], first["order"], first["doc"], first["prompt_tokens"]) == (0, 1, "forward", 0, 5024)
    passes = data["runs"][0]["passes"]
    assert [p["pass"] for p in passes] == [1, 2, 3]
    assert set(passes[0]) >= {"pass", "order", "requests", "p50_ms", "mean_ms", "gpu_hit_tokens", "cpu_hit_tokens"}
    pass2 = next(c for c in data["comparison"] if c["pass"] == 2)
    assert (pass2["baseline"], pass2["candidate"]) == ("gpu", "gpu+cpu")
    assert pass2["p50_speedup"] > 10


def test_simulate_table_shows_every_configuration_and_pass() -> None:
    code, out = run("simulate")
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith(("gpu ", "gpu+cpu "))]
    assert len(lines) == 6
    pass2 = next(line for line in lines if line.startswith("gpu+cpu  2 forward"))
    speedup = float(pass2.split()[-3].rstrip("x"))
    assert 10.7 < speedup < 13.1  # the brief's ~11.9x, within 10%


def test_flags_override_the_preset() -> None:
    code, out = run("simulate", "--docs", "3", "--doc-tokens", "100", "--no-cpu", "--json")
    assert code == 0
    data = json.loads(out)
    assert [r["name"] for r in data["runs"]] == ["gpu"]
    assert data["scenario"]["docs"] == 3 and data["scenario"]["gpu_tokens"] == 21_520
    assert data["runs"][0]["requests"][0]["prompt_tokens"] == 100 + 13


def test_explicit_pass_order_is_followed() -> None:
    code, out = run("simulate", "--docs", "4", "--passes", "forward,3/1/2", "--no-cpu", "--json")
    assert code == 0
    docs = [r["doc"] for r in json.loads(out)["runs"][0]["requests"]]
    assert docs == [0, 1, 2, 3, 3, 1, 2]


def test_out_file_round_trips_through_analyze(tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    code, _ = run("simulate", "--out", str(out))
    assert code == 0
    code, text = run("analyze", str(out), "--json")
    assert code == 0
    report = json.loads(text)
    code, sim_text = run("simulate", "--json")
    sim = json.loads(sim_text)
    expected = {(r["name"], p["pass"]): p for r in sim["runs"] for p in r["passes"]}
    for cell in report["cells"]:
        p = expected[(cell["config"], cell["pass"])]
        assert (cell["p50_ms"], cell["mean_ms"], cell["n"]) == (p["p50_ms"], p["mean_ms"], p["requests"])
    assert {(s["pass"], s["candidate"]) for s in report["speedups"]} == {(1, "gpu+cpu"), (2, "gpu+cpu"), (3, "gpu+cpu")}


def test_analyze_reads_the_seed_configuration_names(tmp_path: Path) -> None:
    f = tmp_path / "seed.csv"
    rows = ["config,pass,order,seq,doc,prompt_tokens,ttft_ms"]
    rows += [f"vllm,2,forward,{i},{i},5024,{576 + i}" for i in range(4)]
    rows += [f"lmcache,2,forward,{i},{i},5024,{48 + i}" for i in range(4)]
    f.write_text("\n".join(rows) + "\n")
    code, out = run("analyze", str(f), "--json")
    assert code == 0
    report = json.loads(out)
    assert {c["config"] for c in report["cells"]} == {"gpu", "gpu+cpu"}
    # p50 of 576..579 is 577.5, of 48..51 is 49.5.
    assert report["speedups"][0]["p50_speedup"] == pytest.approx(577.5 / 49.5, abs=1e-3)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["simulate", "--gpu-tokens", "0"], "--gpu-tokens"),
        (["simulate", "--docs", "-3"], "--docs: Input should be greater than or equal to 1"),
        (["simulate", "--doc-tokens", "0"], "--doc-tokens"),
        (["simulate", "--cpu-gb", "-1"], "--cpu-gb: Input should be greater than 0"),
        (["simulate", "--chunk-size", "100"], "--chunk-size: must be a multiple of block_size (16) (got 100)"),
        (["simulate", "--preset", "seed-labb"], "unknown preset 'seed-labb'"),
        (["simulate", "--model", "gpt-99"], "--model: unknown model 'gpt-99'"),
        (["simulate", "--passes", "forward,revrse"], "unknown pass order 'revrse'"),
        (["simulate", "--docs", "20000"], "less than or equal to 10000"),
        (["simulate", "--gpu-tokens", "4000"], "--gpu-tokens: must hold one whole prompt plus vLLM's null block: at least 5040"),
        (["simulate", "--passes", "forward,3/12"], "--passes: pass 2 lists document 12, but there are only 10"),
        (["size", "--model", "gpt-99"], "unknown model"),
        (["simulate", "--cpu-backend", "vllm-native", "--cpu-policy", "lfu"], "--cpu-policy: vllm-native offers lru and arc"),
        (["simulate", "--store-threshold", "2"], "--store-threshold: only cpu_backend vllm-native reads it"),
        (["simulate", "--cpu-backend", "vllm-native", "--blocks-per-chunk", "300"], "--blocks-per-chunk: Input should be less than or equal to 256"),
        (["simulate", "--cpu-backend", "vllm-native", "--disk-gb", "1"], "--disk-gb: vllm-native models vLLM's CPU offloading alone"),
        (["simulate", "--storage-tier", "far:8:lru:admission=0"], "greater than or equal to 1"),
    ],
)
def test_bad_input_exits_2_naming_the_flag_and_limit(args: list[str], needle: str) -> None:
    code, out = run(*args)
    assert code == 2, out
    assert needle in out


def test_malformed_measurement_line_is_named(tmp_path: Path) -> None:
    f = tmp_path / "bad.csv"
    f.write_text("config,pass,order,seq,doc,prompt_tokens,ttft_ms\ngpu,1,forward,0,0,5024,570.1\ngpu,1,forward,1,1,5024,fast\n")
    code, out = run("analyze", str(f))
    assert code == 2
    assert "line 3" in out and "ttft_ms" in out
    j = tmp_path / "bad.jsonl"
    j.write_text('{"config":"gpu","pass":1,"order":"forward","seq":0,"doc":0,"prompt_tokens":5024,"ttft_ms":1}\n{oops\n')
    code, out = run("analyze", str(j))
    assert code == 2 and "line 2" in out


def test_every_command_has_help() -> None:
    code, out = run("--help")
    assert code == 0
    commands = [line.split()[0] for line in out.split("Commands:")[1].splitlines() if line.strip()]
    assert {"simulate", "analyze", "size", "sweep"} <= set(commands)
    for name in commands:
        code, text = run(name, "--help")
        assert code == 0 and "Usage:" in text


def _subcommands(help_text: str) -> list[str]:
    return [line.split()[0] for line in help_text.split("Commands:")[1].splitlines() if line.strip()] if "Commands:" in help_text else []


def test_no_help_shows_docstring_markup() -> None:
    # click prints a docstring as written: ``x`` (reStructuredText, fine in the source) reaches the user's terminal
    # as two backquotes on each side. Every command's and every subcommand's --help, and the groups' command lists.
    pending = [[name] for name in _subcommands(run("--help")[1])]
    seen = []
    while pending:
        path = pending.pop()
        code, text = run(*path, "--help")
        assert code == 0, path
        assert "``" not in text, (path, [line for line in text.splitlines() if "``" in line])
        pending += [[*path, sub] for sub in _subcommands(text)]
        seen.append(path)
    assert ["runs", "export"] in seen  # the walk reaches a group's subcommands


def test_size_reports_bytes_per_token_and_cpu_need() -> None:
    code, out = run("size", "--model", "qwen2.5-1.5b", "--json")
    assert code == 0
    data = json.loads(out)
    # 28 layers x 2 KV heads x 128 x 2 (K,V) x 2 bytes.
    assert data["kv_bytes_per_token"] == 28 * 2 * 128 * 2 * 2
    assert data["cpu_stored_tokens"] == 10 * 19 * 256


@pytest.mark.parametrize(("flag", "field"), [("--docs", "docs"), ("--doc-tokens", "doc_tokens"), ("--chunk-size", "chunk_size")])
def test_size_takes_the_scenarios_limits_and_defaults(flag: str, field: str) -> None:
    # The scenario's own: 10 documents of 5,011 tokens, 256-token chunks; at most 10,000 documents, 1,000,000 tokens
    # per document, 65,536-token chunks (sim/workloads/scenario.py), the same as the page's sizing form and kvscope simulate.
    default, high = {"docs": (10, 10_000), "doc_tokens": (5011, 1_000_000), "chunk_size": (256, 65_536)}[field]
    assert Scenario.model_fields[field].default == default
    code, out = run("size", "--json")
    assert code == 0 and (code, out) == run("size", flag, str(default), "--json")  # the flag left out: its default
    assert (code, out) != run("size", flag, str(default + 16), "--json")  # a flag the answer depends on
    code, out = run("size", flag, str(high + 1))
    assert code == 2 and flag in out and f"1<=x<={high}" in out, out
    code, _ = run("size", flag, str(high), "--json")
    assert code == 0


def test_size_reads_a_hugging_face_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, "torch_dtype": "bfloat16"}))
    code, out = run("size", "--config", str(cfg), "--json")
    assert code == 0
    assert json.loads(out)["kv_bytes_per_token"] == 32 * 8 * 128 * 2 * 2
    cfg.write_text("{}")
    code, out = run("size", "--config", str(cfg))
    assert code == 2 and "--config" in out


def test_sweep_prints_thresholds() -> None:
    code, out = run("sweep", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["gpu"]["doc_granularity_docs"] == 10
    assert data["cpu"]["all_served_tokens"] == 48_640


@pytest.mark.parametrize("command", ["advise", "replay", "explain"])
def test_chunk_blocks_has_one_limit_wherever_a_trace_is_replayed(command: str) -> None:
    # Trace blocks per CPU chunk: at most 1,024 (sim/simulation/replay.py's MAX_CHUNK_BLOCKS, the replay panel's bound too), for
    # the advisor's --trace search as for replay and explain; the advisor used to stop at 64.
    code, out = run(command, "--chunk-blocks", "1025")
    assert code == 2 and "--chunk-blocks" in out and "1<=x<=1024" in out, out
