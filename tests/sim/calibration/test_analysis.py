"""Measurement files: exact round trips of simulated runs, the seed's names, and all-or-nothing reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.calibration import measurements
from sim.calibration.measurements import MeasurementError, analyze, parse_text
from sim.simulation.run import simulate
from sim.workloads.scenario import Scenario

REQUIRED = "config,pass,order,seq,doc,prompt_tokens,ttft_ms"


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_simulated_run_round_trips_exactly(tmp_path: Path, suffix: str) -> None:
    # Three tiers and a random pass, so that every column (disk hits, stored tokens) is exercised.
    result = simulate(Scenario(docs=12, passes="forward,random@3,reverse", cpu_gb=0.5, disk_gb=2.0))
    path = tmp_path / f"run{suffix}"
    measurements.write(path, measurements.from_result(result))
    rows = measurements.read(path)
    assert len(rows) == sum(len(run["requests"]) for run in result["runs"])
    report = analyze(rows)
    expected = {(run["name"], p["pass"]): p for run in result["runs"] for p in run["passes"]}
    assert len(report["cells"]) == len(expected)
    for cell in report["cells"]:
        p = expected[(cell["config"], cell["pass"])]
        assert (cell["n"], cell["p50_ms"], cell["mean_ms"], cell["p90_ms"]) == (p["requests"], p["p50_ms"], p["mean_ms"], p["p90_ms"])
    assert [{k: s[k] for k in ("pass", "candidate", "p50_speedup", "mean_speedup")} for s in report["speedups"]] == [
        {k: c[k] for k in ("pass", "candidate", "p50_speedup", "mean_speedup")} for c in result["comparison"]
    ]
    # The per-request columns survive too, including the simulator's own.
    simulated = [r for run in result["runs"] for r in run["requests"]]
    assert [(r.disk_hit_tokens, r.stored_tokens, r.computed_tokens) for r in rows] == [
        (r["disk_hit_tokens"], r["stored_tokens"], r["computed_tokens"]) for r in simulated
    ]
    assert any(r.disk_hit_tokens for r in rows) and any(r.stored_tokens for r in rows)


def test_seed_names_in_jsonl_and_pass_speedups() -> None:
    lines = []
    # vLLM only: pass 1 at 580 ms, pass 2 at 576 ms; LMCache: 600 ms then 48 ms.
    for config, first, second in (("vllm", 580.0, 576.0), ("lmcache", 600.0, 48.0)):
        for seq in range(4):
            lines.append(dict(config=config, **{"pass": 1}, order="forward", seq=seq, doc=seq, prompt_tokens=5024, ttft_ms=first))
            lines.append(dict(config=config, **{"pass": 2}, order="forward", seq=4 + seq, doc=seq, prompt_tokens=5024, ttft_ms=second))
    rows = parse_text("\n".join(json.dumps(x) for x in lines), jsonl=True)
    report = analyze(rows)
    assert [(s["pass"], s["baseline"], s["candidate"], s["p50_speedup"]) for s in report["speedups"]] == [
        (1, "gpu", "gpu+cpu", pytest.approx(580 / 600)),  # exact: rounded only where written
        (2, "gpu", "gpu+cpu", 12.0),
    ]
    assert [(s["config"], s["pass"], s["mean_speedup"]) for s in report["pass_speedups"]] == [
        ("gpu", 2, pytest.approx(580 / 576)),
        ("gpu+cpu", 2, 12.5),
    ]


@pytest.mark.parametrize(
    ("text", "jsonl", "needle"),
    [
        (f"{REQUIRED}\ngpu,1,forward,0,0,5024,570\ngpu,1,forward,1,1,5024,570\ngpu,0,forward,2,2,5024,570\n", False,
         "line 4: column pass: passes are numbered from 1"),
        (f"{REQUIRED}\ngpu,1,forward,0,0,5024,570\ngpu,1,forward,1,1,5024,-3\n", False, "line 3: column ttft_ms"),
        (f"{REQUIRED}\ngpu,1,forward,0,0,5024,570,extra\n", False, "line 2: more fields than the header has"),
        ("config,pass,seq\ngpu,1,0\n", False, "line 1: header lacks order, doc, prompt_tokens, ttft_ms"),
        ('{"config":"gpu","pass":1,"order":"f","seq":0,"doc":0,"prompt_tokens":9,"ttft_ms":1}\n\n[1, 2]\n', True,
         "line 3: expected a JSON object"),
        ('{"config":"gpu","pass":1,"order":"f","seq":0,"doc":0,"prompt_tokens":9}\n', True, "line 1: missing ttft_ms"),
    ],
)
def test_a_malformed_line_is_named_and_nothing_is_kept(text: str, jsonl: bool, needle: str) -> None:
    rows: list = []
    with pytest.raises(MeasurementError, match=needle):
        rows = parse_text(text, jsonl=jsonl)
    assert rows == []  # the good lines before the bad one were not returned either


def test_has_hits_tells_files_with_hit_columns_apart() -> None:
    bare = parse_text(f"{REQUIRED}\ngpu,1,forward,0,0,5024,570\n")[0]
    full = parse_text(f"{REQUIRED},gpu_hit_tokens,cpu_hit_tokens,computed_tokens\ngpu,1,forward,0,0,5024,570,0,0,5024\n")[0]
    assert not bare.has_hits and full.has_hits
