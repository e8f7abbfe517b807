"""The trace API over a real server (``kvscope serve``, uvicorn): replay and curves of the bundled trace and of uploads, and 422s naming the field."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner

from app.cli import main


@pytest.fixture(scope="module")
def base_url(live_server: str) -> str:
    return live_server


def cli_json(*args: str) -> object:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def upload(text: str) -> dict[str, tuple[str, bytes]]:
    return {"file": ("mine.jsonl", text.encode())}


def line(n: int, ids: list[int], ts: int = 0) -> str:
    return json.dumps({"timestamp": ts, "input_length": n, "output_length": 1, "hash_ids": ids})


def test_bundled_replay_equals_the_cli(base_url: str) -> None:
    response = httpx.post(f"{base_url}/api/replay", data={"trace": "mooncake-synthetic", "gpu_blocks": "1000", "cpu_blocks": "8000"}, timeout=60)
    assert response.status_code == 200, response.text
    data = response.json()
    cli = cli_json("replay", "mooncake-synthetic", "--gpu-blocks", "1000", "--cpu-blocks", "8000", "--json")
    assert isinstance(cli, dict)
    assert data["requests"] == cli["requests"]
    assert data["tiers"] == cli["tiers"]
    assert data["timeline"] == cli["timeline"]
    assert len(data["requests"]) == 3993


def test_uploaded_replay_equals_the_cli_on_the_same_file(base_url: str, tmp_path) -> None:
    text = "\n".join([line(8, [1, 2], 0), line(12, [5, 6, 7], 5), line(8, [1, 2], 9)])
    path = tmp_path / "mine.jsonl"
    path.write_text(text)
    response = httpx.post(f"{base_url}/api/replay", data={"gpu_blocks": "3", "cpu_blocks": "100", "block_size": "4"}, files=upload(text))
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["trace"]["name"] == "mine.jsonl"
    # The third request finds A's two blocks in CPU after B pushed them off the 3-block GPU: 7 tokens loaded.
    assert [r["cpu_hit_tokens"] for r in data["requests"]] == [0, 0, 7]
    cli = cli_json("replay", str(path), "--gpu-blocks", "3", "--cpu-blocks", "100", "--block-size", "4", "--json")
    assert isinstance(cli, dict) and data["requests"] == cli["requests"]


def test_a_malformed_upload_is_a_422_naming_the_line(base_url: str) -> None:
    text = line(512, [1]) + "\n" + '{"timestamp": 1, "input_length": 512}\n'
    response = httpx.post(f"{base_url}/api/replay", data={"gpu_blocks": "8"}, files=upload(text))
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert error["loc"] == ["body", "file"]
    assert "line 2: missing output_length, hash_ids" in error["msg"]


def test_tiers_too_small_and_bad_fields_are_422s_naming_the_field(base_url: str) -> None:
    small = httpx.post(f"{base_url}/api/replay", data={"gpu_blocks": "373"})
    assert small.status_code == 422
    assert small.json()["detail"][0]["loc"] == ["body", "gpu_blocks"]
    assert "at least 374 blocks" in small.json()["detail"][0]["msg"]
    missing = httpx.post(f"{base_url}/api/replay", data={"cpu_blocks": "10"})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "gpu_blocks"]
    unknown = httpx.post(f"{base_url}/api/replay", data={"gpu_blocks": "400", "trace": "nope"})
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == ["body", "trace"]


def test_an_upload_over_the_web_limit_is_refused(base_url: str) -> None:
    from app.web.routes.replay import WEB_LIMITS

    # One request more than the limit, each a single 1-token prompt (the smallest valid line).
    text = "\n".join(line(1, [i]) for i in range(WEB_LIMITS.max_requests + 1))
    response = httpx.post(f"{base_url}/api/replay", data={"gpu_blocks": "4"}, files=upload(text), timeout=60)
    assert response.status_code == 422
    assert f"more than {WEB_LIMITS.max_requests:,} requests" in response.json()["detail"][0]["msg"]


def test_curve_of_the_bundled_trace_equals_the_cli(base_url: str) -> None:
    response = httpx.post(f"{base_url}/api/curve", data={"points": "7"})
    assert response.status_code == 200, response.text
    data = response.json()
    assert (data["references"], data["distinct_blocks"]) == (121_877, 43_924)
    assert data["points"] == cli_json("curve", "mooncake-synthetic", "--points", "7", "--json")


def test_curve_of_a_scenario(base_url: str) -> None:
    # Two 2-block documents read twice: 4 distinct blocks; each re-reference has depth 4.
    body = {"docs": 2, "doc_tokens": 32, "question_tokens": 0, "passes": "forward,forward", "points": 2}
    response = httpx.post(f"{base_url}/api/curve/scenario", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["points"] == [
        {"capacity_blocks": 2, "hit_ratio": 0.0, "hit_blocks": 0},
        {"capacity_blocks": 4, "hit_ratio": 0.5, "hit_blocks": 4},
    ]
    bad = httpx.post(f"{base_url}/api/curve/scenario", json={**body, "points": 0})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "points"]


def test_bundled_traces_are_listed(base_url: str) -> None:
    traces = httpx.get(f"{base_url}/api/traces").json()
    assert [(t["name"], t["requests"]) for t in traces] == [("mooncake-synthetic", 3993)]


def test_an_uploaded_bailian_trace_is_told_apart_and_replayed_in_16_token_blocks(base_url: str) -> None:
    from tests.sim.traces.test_trace_bailian import SAMPLE

    text = "".join(json.dumps(r) + "\n" for r in SAMPLE)
    response = httpx.post(f"{base_url}/api/replay", data={"gpu_blocks": "16"}, files=upload(text), timeout=60)
    assert response.status_code == 200, response.text
    data = response.json()
    assert (data["trace"]["format"], data["trace"]["block_tokens"]) == ("bailian", 16)
    # As the CLI replays the same file (tests/sim/traces/test_trace_bailian.py derives these hits).
    assert [r["gpu_hit_tokens"] for r in data["requests"]] == [0, 0, 16, 32]


def test_the_pages_replay_takes_an_upload_over_the_plain_body_limit(base_url: str) -> None:
    # 30,000 two-block requests, about 2.6 MB: over the 2 MiB a form without a file may carry (app/web/guard.py),
    # well under the web's 32 MiB for a trace. The page's form is answered as the API is: same tiers.
    text = "\n".join(line(1024, [i % 100, i % 100 + 1000], ts=i) for i in range(30_000))
    assert len(text) > 2 * 2**20
    fields = {"gpu_blocks": "400"}
    page = httpx.post(f"{base_url}/ui/replay", data=fields, files=upload(text), timeout=60)
    assert page.status_code == 200, page.text[:500]
    assert page.headers["content-type"].startswith("text/html")
    api = httpx.post(f"{base_url}/api/replay", data=fields, files=upload(text), timeout=60).json()
    gpu = api["tiers"][0]
    assert f'<tr data-tier="gpu"><td>GPU</td><td class="num">400</td><td class="num">{gpu["lookup_blocks"]:,}</td>' in page.text


def test_a_storage_tier_and_the_cpu_backend_are_taken_as_the_cli_takes_them(base_url: str, tmp_path) -> None:
    # tests/sim/simulation/test_trace_replay.py derives it: the third request misses the 3-block GPU and the 2-chunk CPU and loads
    # its 2 full blocks (8 tokens) from nvme, which holds everything.
    text = "\n".join([line(9, [1, 2, 10], 0), line(9, [3, 4, 11], 1), line(9, [1, 2, 10], 2)])
    path = tmp_path / "mine.jsonl"
    path.write_text(text)
    form = {"gpu_blocks": "3", "cpu_blocks": "2", "block_size": "4", "storage_tiers": "nvme:100t:lru:0", "cpu_backend": "brief"}
    response = httpx.post(f"{base_url}/api/replay", data=form, files=upload(text), timeout=60)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["run"] == "gpu+cpu+nvme" and [r["tier_hits"] for r in data["requests"]] == [{}, {}, {"nvme": 8}]
    cli = cli_json("replay", str(path), "--gpu-blocks", "3", "--cpu-blocks", "2", "--block-size", "4",
                   "--storage-tier", "nvme:100t:lru:0", "--cpu-backend", "brief", "--json", "--no-save")
    assert isinstance(cli, dict) and data["tiers"] == cli["tiers"] and data["totals"] == cli["totals"]
    for bad, needle in (("nvme:8", "in tokens"), ("gpu:100t", "neither gpu nor cpu"), ("nvme", "NAME:SIZE")):
        refused = httpx.post(f"{base_url}/api/replay", data={**form, "storage_tiers": bad}, files=upload(text), timeout=60)
        assert refused.status_code == 422, bad
        assert refused.json()["detail"][0]["loc"] == ["body", "storage_tiers"] and needle in refused.json()["detail"][0]["msg"], bad
    panel = httpx.get(f"{base_url}/ui/replay", timeout=30).text
    assert '<option value="lmcache" selected>lmcache</option><option value="vllm-native">' in panel
    assert 'name="storage_tiers"' in panel
