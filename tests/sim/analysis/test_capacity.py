"""Capacity curves: each point is the direct simulation at its capacity; thresholds are kvscope sweep's."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from app.cli import main
from sim.analysis.capacity import cpu_curve, gpu_curve
from sim.simulation.run import simulate
from sim.workloads.scenario import Scenario

SEED = Scenario()  # seed-lab: 10 x 5,011-token documents, forward, forward, reverse
KEYS = ("pass", "order", "gpu_hit_tokens", "cpu_hit_tokens", "p50_ms", "mean_ms")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def direct(scenario: Scenario, run_name: str) -> list[dict]:
    result = simulate(scenario)
    passes = next(r for r in result["runs"] if r["name"] == run_name)["passes"]
    return [{k: p[k] for k in KEYS} for p in passes]


def sample(points: list[dict]) -> list[dict]:
    """First, last, every marked point and a few in between."""
    picked = [points[0], points[-1], *[p for p in points if p["marks"]], *points[3::9]]
    return list({p["capacity_tokens"]: p for p in picked}.values())


@pytest.fixture(scope="module")
def gpu() -> dict:
    return gpu_curve(SEED, points=30)


@pytest.fixture(scope="module")
def cpu() -> dict:
    return cpu_curve(SEED, points=20)


def test_gpu_points_equal_direct_simulations(gpu: dict) -> None:
    for curve in gpu["curves"]:
        for point in sample(curve["points"]):
            scenario = SEED.replace(gpu_tokens=point["capacity_tokens"], granularity=curve["granularity"], cpu_gb=None)
            assert point["passes"] == direct(scenario, "gpu"), (curve["granularity"], point["capacity_tokens"])


def test_cpu_points_equal_direct_simulations(cpu: dict) -> None:
    points = cpu["curves"][0]["points"]
    # Capacity 0 is the GPU tier alone.
    assert points[0]["capacity_tokens"] == 0 and points[0]["marks"] == ["no_cpu"]
    assert points[0]["passes"] == direct(SEED, "gpu")
    for point in sample(points[1:]):
        scenario = SEED.replace(cpu_gb=None, cpu_tokens=point["capacity_tokens"])
        assert point["passes"] == direct(scenario, "gpu+cpu"), point["capacity_tokens"]


def test_marks_are_sweeps_thresholds_and_the_current_capacity(gpu: dict, cpu: dict) -> None:
    code, out = run("sweep", "--json")
    assert code == 0
    sweep = json.loads(out)
    marks = {m["key"]: m["capacity_tokens"] for m in gpu["marks"]}
    assert marks == {
        "current": 21_520,
        "gpu_block": sweep["gpu"]["block_granularity_tokens"],
        "gpu_doc": sweep["gpu"]["doc_granularity_tokens"],
    }
    marks = {m["key"]: m["capacity_tokens"] for m in cpu["marks"]}
    assert marks == {
        "no_cpu": 0,
        "current": SEED.cpu_capacity_tokens,
        "cpu_any_hit": sweep["cpu"]["any_hit_tokens"],
        "cpu_all_served": sweep["cpu"]["all_served_tokens"],
    }


def test_the_curve_turns_at_the_threshold(gpu: dict) -> None:
    # Pass 2 of the seed is a same-order re-read, so its GPU hits are zero at every grid
    # capacity below the block threshold and positive from the threshold on (LRU is a
    # stack algorithm: a larger cache holds what a smaller one does).
    block = next(c for c in gpu["curves"] if c["granularity"] == "block")["points"]
    threshold = next(m["capacity_tokens"] for m in gpu["marks"] if m["key"] == "gpu_block")
    for point in block:
        pass2 = point["passes"][1]["gpu_hit_tokens"]
        assert (pass2 > 0) == (point["capacity_tokens"] >= threshold), point["capacity_tokens"]


def test_grid_starts_at_the_smallest_runnable_capacity_and_is_increasing(gpu: dict) -> None:
    for curve in gpu["curves"]:
        caps = [p["capacity_tokens"] for p in curve["points"]]
        assert caps == sorted(set(caps))
        assert caps[0] == SEED.replace(granularity=curve["granularity"]).min_gpu_tokens
        # Hits never fall as the LRU tier grows (stack property), in every pass.
        for i in range(3):
            hits = [p["passes"][i]["gpu_hit_tokens"] for p in curve["points"]]
            assert hits == sorted(hits)


def test_a_shared_system_prompt_hits_at_every_capacity() -> None:
    # Every prompt starts with the same 1,024-token system prompt (64 blocks). Its blocks are
    # freed last (head of each request), so they stay the most recently used and survive
    # even the smallest GPU: every request but the very first hits exactly 1,024 tokens there.
    scenario = Scenario(docs=6, doc_tokens=3000, shared_prefix_tokens=1024, cpu_gb=None, passes="forward,forward")
    curve = gpu_curve(scenario, points=5)
    smallest = curve["curves"][0]["points"][0]
    assert [p["gpu_hit_tokens"] for p in smallest["passes"]] == [5 * 1024, 6 * 1024]


def test_csv_has_one_row_per_capacity_and_pass() -> None:
    code, out = run("capacity", "--points", "6", "--csv")
    assert code == 0, out
    rows = list(csv.DictReader(io.StringIO(out)))
    points = {(r["granularity"], r["capacity_tokens"]) for r in rows}
    assert len(rows) == 3 * len(points)  # three passes per point
    assert {r["marks"] for r in rows if r["capacity_tokens"] == "21520"} == {"current"}


def test_table_names_the_marks() -> None:
    code, out = run("capacity", "--tier", "cpu", "--points", "4")
    assert code == 0, out
    assert "cpu_all_served: same-order re-read: all served from CPU at 48,640 tokens" in out
    assert [line.split()[0] for line in out.splitlines() if line.rstrip().endswith("  current")] == ["56,173"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["capacity", "--points", "0"], "--points"),
        (["capacity", "--points", "400", "--docs", "1000"], "the limit is 100,000,000"),
        (["capacity", "--csv", "--json"], "not both"),
    ],
)
def test_bad_curves_exit_2(args: list[str], needle: str) -> None:
    code, out = run(*args)
    assert code == 2 and needle in out
