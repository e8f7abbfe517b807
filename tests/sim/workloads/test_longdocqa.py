"""LMCache's long_doc_qa benchmark: its repeat modes and forced misses as a pass, and its CSV pair as measurements."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from sim.calibration.longdocqa_files import read_run
from sim.calibration.measurements import MeasurementError
from sim.simulation.run import simulate
from sim.workloads.longdocqa import forced_misses, repeat_order
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario

HEADER = "prompt_id,request_start,ttft,request_end,ttft_time"  # what long_doc_qa's pandas to_csv writes


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def write_round(path: Path, ttfts_s: list[float]) -> None:
    """A round file as long_doc_qa writes it: times relative to the round's start, one request after another."""
    lines, start = [HEADER], 0.0
    for i, ttft in enumerate(ttfts_s):
        end = start + ttft + 0.5
        lines.append(f"{i},{start:.6f},{ttft},{end:.6f},{start + ttft:.6f}")
        start = end
    path.write_text("\n".join(lines) + "\n")


def test_tile_and_interleave_orders() -> None:
    assert repeat_order(3, 2, "tile") == [0, 1, 2, 0, 1, 2]
    assert repeat_order(3, 2, "interleave") == [0, 0, 1, 1, 2, 2]


def test_random_order_is_the_scripts_seeded_shuffle() -> None:
    # long_doc_qa.py: random.seed(shuffle_seed) in main, then in repeat_prompts
    # prompts * repeat_count followed by random.shuffle: the first draws of the seed.
    for seed in (0, 7):
        random.seed(seed)
        expected = list(range(5)) * 3
        random.shuffle(expected)
        assert repeat_order(5, 3, "random", seed) == expected


def test_hit_miss_ratio_marks_every_position_past_the_hits() -> None:
    # add_cache_misses: position i misses when i % (hit + miss) >= hit.
    assert forced_misses(8, "3:1") == {3, 7}
    assert forced_misses(8, "2:2") == {2, 3, 6, 7}
    assert forced_misses(8, None) == set()


def test_pass_text_round_trips_through_its_label() -> None:
    spec = PassSpec.parse("random*2@7:3:1")
    assert (spec.order, spec.repeat_mode, spec.repeat_count, spec.seed, spec.hit_miss_ratio) == ("repeat", "random", 2, 7, "3:1")
    assert spec.label == "random*2@7:3:1"
    assert PassSpec.parse(spec.label) == spec
    with pytest.raises(ValueError):
        PassSpec.parse("tile*2:0:0")


def test_query_pass_repeats_documents_and_forced_misses_never_hit() -> None:
    # 4 documents of 64 tokens, no question (long_doc_qa's prompts are the documents),
    # a GPU large enough for everything. Query round tile*2 with 1:1: positions 1, 3, 5, 7
    # are forced misses. Every other query request hits its document: (64 - 1) // 16 = 3
    # blocks = 48 tokens (the last token is recomputed).
    scenario = Scenario(
        docs=4, doc_tokens=64, question_tokens=0, gpu_tokens=4096, cpu_gb=None, passes="forward,tile*2:1:1",
    )
    requests = build_requests(scenario)
    assert [r.doc for r in requests if r.pass_ == 2] == [0, 1, 2, 3, 0, 1, 2, 3]
    gpu = simulate(scenario)["runs"][0]
    hits = [r["gpu_hit_tokens"] for r in gpu["requests"] if r["pass"] == 2]
    assert hits == [48, 0, 48, 0, 48, 0, 48, 0]


def test_simulate_speaks_long_doc_qa_flags() -> None:
    code, by_flags = run("simulate", "--repeat-mode", "random", "--repeat-count", "3", "--shuffle-seed", "5", "--json")
    assert code == 0, by_flags
    code, by_passes = run("simulate", "--passes", "forward,random*3@5", "--question-tokens", "0", "--json")
    assert code == 0
    assert json.loads(by_flags)["runs"] == json.loads(by_passes)["runs"]
    code, out = run("simulate", "--repeat-mode", "tile", "--passes", "forward")
    assert code == 2 and "not both" in out
    code, out = run("simulate", "--shuffle-seed", "3")
    assert code == 2 and "--repeat-mode" in out


def test_a_long_doc_qa_pair_gives_the_per_pass_table(tmp_path: Path) -> None:
    run_dir = tmp_path / "lmcache"
    run_dir.mkdir()
    write_round(run_dir / "warmup_round.csv", [0.5, 0.6, 0.7])
    write_round(run_dir / "query_round.csv", [0.05, 0.04, 0.06, 0.05, 0.07, 0.03])
    code, out = run("analyze", "--long-doc-qa", str(run_dir), "--repeat-mode", "tile", "--json")
    assert code == 0, out
    report = json.loads(out)
    # The folder name "lmcache" reads as gpu+cpu. Warmup: 500, 600, 700 ms -> p50 600,
    # mean 600, p90 = 600 + 0.8 * 100 = 680. Query sorted 30, 40, 50, 50, 60, 70 ms ->
    # p50 50, mean 300 / 6 = 50, p90 at position 4.5 -> 65.
    assert report["cells"] == [
        {"config": "gpu+cpu", "pass": 1, "order": "forward", "n": 3, "p50_ms": 600.0, "mean_ms": 600.0, "p90_ms": 680.0},
        {"config": "gpu+cpu", "pass": 2, "order": "tile*2", "n": 6, "p50_ms": 50.0, "mean_ms": 50.0, "p90_ms": 65.0},
    ]
    # long_doc_qa's "TTFT gain": warmup mean / query mean = 12.
    assert report["pass_speedups"] == [
        {"config": "gpu+cpu", "pass": 2, "against_pass": 1, "p50_speedup": 12.0, "mean_speedup": 12.0}
    ]


def test_two_runs_compare_like_the_seed_table(tmp_path: Path) -> None:
    for name, warm, query in (("vllm", 0.58, 0.58), ("lmcache", 0.60, 0.05)):
        (tmp_path / name).mkdir()
        write_round(tmp_path / name / "warmup_round.csv", [warm] * 2)
        write_round(tmp_path / name / "query_round.csv", [query] * 4)
    code, out = run(
        "analyze", "--long-doc-qa", str(tmp_path / "vllm"), "--long-doc-qa", f"gpu+cpu={tmp_path / 'lmcache'}",
        "--repeat-mode", "interleave", "--json",
    )
    assert code == 0, out
    speedups = {s["pass"]: s for s in json.loads(out)["speedups"]}
    # Pass 1: 580 / 600 ms; pass 2: 580 / 50 ms = 11.6x.
    assert speedups[1]["mean_speedup"] == pytest.approx(580 / 600, abs=1e-3)
    assert speedups[2]["p50_speedup"] == pytest.approx(11.6)


def test_random_mode_maps_each_prompt_to_its_document(tmp_path: Path) -> None:
    write_round(tmp_path / "warmup_round.csv", [0.5] * 4)
    write_round(tmp_path / "query_round.csv", [0.05] * 8)
    rows = read_run(tmp_path, "random", config="gpu+cpu", shuffle_seed=3).rows
    random.seed(3)
    order = list(range(4)) * 2
    random.shuffle(order)
    assert [r.doc for r in rows if r.pass_ == 2] == order
    assert [r.seq for r in rows] == list(range(12))  # warmup 0..3, then the query round, as the simulator numbers them
    assert {r.prompt_tokens for r in rows} == {20_000}  # long_doc_qa's default --document-length


@pytest.mark.parametrize(
    ("query_lines", "needle"),
    [
        (["0,0,0.05,1,0.05", "1,1,-0.5,2,1.0"], "query_round.csv line 3: ttft must be from 0.000001 to 3,600 seconds"),
        (["0,0,0.05,1,0.05", "0,1,0.05,2,1.05"], "query_round.csv line 3: prompt_id 0 appears twice"),
        (["0,0,0.05,1,0.05", "one,1,0.05,2,1.05"], "query_round.csv line 3: prompt_id 'one'"),
        (["0,0,0.05,1,0.05", "5,1,0.05,2,1.05"], "query_round.csv line 3: prompt_id 5 is outside 0..1"),
        (["0,0,0.05,1,0.05"], "query_round.csv: expected prompt_id 0..1, missing 1"),
    ],
)
def test_bad_rounds_are_refused_with_their_line(tmp_path: Path, query_lines: list[str], needle: str) -> None:
    write_round(tmp_path / "warmup_round.csv", [0.5])
    (tmp_path / "query_round.csv").write_text("\n".join([HEADER, *query_lines]) + "\n")
    with pytest.raises(MeasurementError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        read_run(tmp_path, "tile", repeat_count=2)
    code, out = run("analyze", "--long-doc-qa", str(tmp_path), "--repeat-mode", "tile", "--repeat-count", "2")
    assert code == 2 and needle in out
    assert "p50" not in out  # nothing of the pair was tabulated


def test_the_pair_can_be_given_as_two_files_with_or_without_a_repeat_mode(tmp_path: Path) -> None:
    write_round(tmp_path / "w.csv", [0.5, 0.5])
    write_round(tmp_path / "q.csv", [0.1, 0.1, 0.1, 0.1])
    code, out = run("analyze", "--long-doc-qa", f"gpu={tmp_path / 'w.csv'},{tmp_path / 'q.csv'}", "--repeat-mode", "tile", "--json")
    assert code == 0, out
    assert [(c["config"], c["n"]) for c in json.loads(out)["cells"]] == [("gpu", 2), ("gpu", 4)]
    # Without --repeat-mode the query round's documents are unknown: the statistics stand, labelled "query".
    code, out = run("analyze", "--long-doc-qa", f"gpu={tmp_path / 'w.csv'},{tmp_path / 'q.csv'}", "--json")
    assert code == 0, out
    assert [c["order"] for c in json.loads(out)["cells"]] == ["forward", "query"]
