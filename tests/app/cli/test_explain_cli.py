"""``kvscope explain`` and the explain switches of the CLI and the HTTP API (over a real uvicorn).

The seed's facts (tests/sim/explain/test_explain.py derives them): doc 0's pass-2 request (seq 10) lost its 313 hittable
blocks to the requests for docs 4 and 5 in pass 1; a GPU of 45,248 tokens keeps its first block, 50,240 all.
"""

from __future__ import annotations

import json

import httpx
from click.testing import CliRunner

from app.cli import main


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_one_request_in_words() -> None:
    code, out = invoke("explain", "--request", "10", "--no-cpu")
    assert code == 0, out
    assert (
        "doc 0, pass 2: 5,008 tokens evicted from GPU in pass 1 by the requests for docs 4 and 5; "
        "a GPU of 45,248 tokens would have kept the first block, 50,240 all of them"
    ) in out
    assert "doc 0, pass 2: 16 tokens last-token" in out


def test_per_pass_table_and_json() -> None:
    code, out = invoke("explain", "--no-cpu", "--passes", "forward,forward")
    assert code == 0, out
    rows = [line.split() for line in out.splitlines() if line.startswith("gpu ")]
    # pass 2: 10 x 5,008 evicted, 10 x 16 last-token; all of it hits with a 50,240-token GPU.
    assert rows[1][:4] == ["gpu", "2", "forward", "computed"]
    assert "50,080" in rows[1] and rows[1][-1] == "50,240"
    code, out = invoke("explain", "--no-cpu", "--passes", "forward,forward", "--json")
    run = json.loads(out)["runs"][0]
    assert run["groups"][1]["needs"]["gpu"]["needed_tokens"] == [{"tokens": 50_240, "requests": 10}]
    assert run["capacity_search"]["left_out"] == 0


def test_a_trace_is_explained_per_time_window() -> None:
    code, out = invoke("explain", "--trace", "mooncake-synthetic", "--gpu-blocks", "2000", "--windows", "3",
                       "--max-runs", "0", "--json")
    assert code == 0, out
    result = json.loads(out)
    run = result["runs"][0]
    assert [g["window"] for g in run["groups"]] == [1, 2, 3]
    assert sum(g["requests"] for g in run["groups"]) == result["trace"]["requests"]
    # No re-simulation allowed: every evicted request is counted as left out, none guessed.
    assert run["capacity_search"]["runs"] == 0
    assert run["totals"]["needs"]["gpu"]["all_hit_tokens"] is None


def test_bad_explain_flags_exit_2_naming_the_flag() -> None:
    code, out = invoke("explain", "--request", "30")
    assert code == 2 and "--request" in out and "30" in out
    code, out = invoke("explain", "--gpu-blocks", "10")
    assert code == 2 and "--gpu-blocks: only with --trace" in out
    code, out = invoke("explain", "--trace", "mooncake-synthetic")
    assert code == 2 and "--gpu-blocks" in out


def test_no_explain_leaves_the_maps_out() -> None:
    code, out = invoke("simulate", "--docs", "3", "--json", "--no-explain")
    assert code == 0
    record = json.loads(out)["runs"][0]["requests"][0]
    assert "gpu_miss" not in record and "computed" not in record
    code, out = invoke("simulate", "--docs", "3", "--json")
    assert json.loads(out)["runs"][0]["requests"][0]["gpu_miss"]


def test_api_records_and_summaries_explain_and_can_leave_it_out(live_server: str) -> None:
    data = httpx.post(f"{live_server}/api/simulate", json={"docs": 10}, timeout=60).json()
    gpu = data["runs"][0]
    assert gpu["requests"][10]["gpu_miss"] == {"last-token": 16, "evicted": 5008}
    assert gpu["passes"][1]["infinite_hit_tokens"] == 50_080
    plain = httpx.post(f"{live_server}/api/simulate?explain=false", json={"docs": 10}, timeout=60).json()
    assert "gpu_miss" not in plain["runs"][0]["requests"][10]
    assert "gpu_miss" not in plain["runs"][0]["passes"][1]
