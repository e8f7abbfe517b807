"""The HTTP API over a real uvicorn: /api/simulate is ``kvscope simulate --json``, bad bodies get 422 naming field and bound."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import httpx
import pytest
from live_servers import run_kvscope

from app.web.views import VIEWS
from sim.workloads.presets import PRESETS


def cli_json(*flags: str) -> dict:
    done = run_kvscope(["simulate", *flags, "--json"])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("body", "flags"),
    [
        ({}, []),
        ({"preset": "seed-lab", "docs": 6, "passes": "forward,reverse", "cpu_gb": 0.5}, ["--docs", "6", "--passes", "forward,reverse", "--cpu-gb", "0.5"]),
        ({"preset": "three-tiers", "no_cpu": True}, ["--preset", "three-tiers", "--no-cpu"]),
        ({"preset": "seed-lab-doc", "cpu_tokens": 20_000, "passes": ["forward", "3/1/2"]}, ["--preset", "seed-lab-doc", "--cpu-tokens", "20000", "--passes", "forward,3/1/2"]),
        (
            {"cpu_gb": 0.2, "storage_tiers": ["remote:0.5:fifo:0.01", {"name": "far", "tokens": 50_000}], "cpu_backend": "brief"},
            ["--cpu-gb", "0.2", "--storage-tier", "remote:0.5:fifo:0.01", "--storage-tier", "far:50000t", "--cpu-backend", "brief"],
        ),
        (
            {"cpu_backend": "vllm-native", "cpu_policy": "arc", "blocks_per_chunk": 2, "store_threshold": 2, "offload_prompt_only": False, "output_tokens": 40},
            [
                "--cpu-backend", "vllm-native", "--cpu-policy", "arc", "--blocks-per-chunk", "2", "--store-threshold", "2",
                "--offload-prompt-only", "false", "--output-tokens", "40",
            ],
        ),
        ({"storage_tiers": "remote:0.5:lru:admission=2", "cpu_gb": 0.2}, ["--storage-tier", "remote:0.5:lru:admission=2", "--cpu-gb", "0.2"]),
    ],
)
def test_simulate_equals_the_cli_json(live_server: str, body: dict, flags: list[str]) -> None:
    response = httpx.post(f"{live_server}/api/simulate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json() == cli_json(*flags)


def test_cost_constants_in_the_body_are_used(live_server: str) -> None:
    # With every cost zero but 1 ms per computed token, a request's TTFT is its computed tokens in ms.
    costs = {"overhead_ms": 0, "prefill_ms_per_token": 1, "load_cpu_ms_per_token": 0, "load_disk_ms_per_token": 0, "store_ms_per_token": 0}
    data = httpx.post(f"{live_server}/api/simulate", json={"docs": 3, "costs": costs}, timeout=60).json()
    for run in data["runs"]:
        for r in run["requests"]:
            assert r["ttft_ms"] == pytest.approx(r["computed_tokens"])


def detail(response: httpx.Response) -> list[dict]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "loc", "needle"),
    [
        ({"docs": 0}, ["body", "docs"], "greater than or equal to 1"),
        ({"docs": 20_000}, ["body", "docs"], "less than or equal to 10000"),
        ({"cpu_gb": -1}, ["body", "cpu_gb"], "greater than 0"),
        ({"doc_tokens": "many"}, ["body", "doc_tokens"], "valid integer"),
        ({"granularity": "page"}, ["body", "granularity"], "'block' or 'doc'"),
        ({"preset": "seed-labb"}, ["body", "preset"], "unknown preset 'seed-labb'"),
        ({"passes": "forward,revrse"}, ["body", "passes"], "unknown pass order 'revrse'"),
        ({"model": "gpt-99"}, ["body", "model"], "unknown model 'gpt-99'"),
        ({"gpu_blocks": 3}, ["body", "gpu_blocks"], "Extra inputs are not permitted"),
        ({"costs": {"overhead_ms": -1}}, ["body", "costs", "overhead_ms"], "greater than or equal to 0"),
        # Fine alone, not together: located at the field to change, naming the rule.
        ({"chunk_size": 100}, ["body", "chunk_size"], "must be a multiple of block_size (16)"),
        ({"gpu_tokens": 4000}, ["body", "gpu_tokens"], "must hold one whole prompt plus vLLM's null block: at least 5040"),
        ({"passes": "forward,3/12"}, ["body", "passes"], "pass 2 lists document 12, but there are only 10"),
        ({"storage_tiers": "cpu:1"}, ["body", "storage_tiers"], "tier names must be unique and none of gpu, cpu, disk: cpu"),
        ({"cpu_backend": "redis"}, ["body", "cpu_backend"], "'lmcache', 'vllm-native' or 'brief'"),
        ({"store_threshold": 1001}, ["body", "store_threshold"], "less than or equal to 1000"),
        ({"blocks_per_chunk": 0}, ["body", "blocks_per_chunk"], "greater than or equal to 1"),
        ({"store_threshold": 2}, ["body", "store_threshold"], "only cpu_backend vllm-native reads it"),
        ({"cpu_backend": "vllm-native", "cpu_policy": "s3fifo"}, ["body", "cpu_policy"], "vllm-native offers lru and arc"),
        ({"storage_tiers": "far:8:lru:unit_tokens=512"}, ["body", "storage_tiers"], "unit_tokens must be the chunk size (256)"),
    ],
)
def test_bad_body_gets_422_naming_field_and_bound(live_server: str, body: dict, loc: list, needle: str) -> None:
    errors = detail(httpx.post(f"{live_server}/api/simulate", json=body, timeout=30))
    assert any(e["loc"] == loc and needle in e["msg"] for e in errors), errors


def test_stream_has_its_own_bounds(live_server: str) -> None:
    url = f"{live_server}/api/simulate/stream"
    errors = detail(httpx.post(url, json={"pace_ms": 20_000}, timeout=30))
    assert errors[0]["loc"] == ["body", "pace_ms"] and "10000" in errors[0]["msg"]
    # 500 documents are fine for /api/simulate but too many tiles to stream: the limit is 200.
    errors = detail(httpx.post(url, json={"docs": 500, "gpu_tokens": 100_000}, timeout=30))
    assert errors[0]["loc"] == ["body", "docs"] and "200" in errors[0]["msg"]
    # 100 documents x 11 passes = 1,100 requests per run, over the stream's 1,000.
    errors = detail(httpx.post(url, json={"docs": 100, "passes": ",".join(["forward"] * 11)}, timeout=30))
    assert errors[0]["loc"] == ["body"] and "1,000 requests" in errors[0]["msg"] and "1,100" in errors[0]["msg"]


def test_presets_lists_every_preset_and_each_simulates(live_server: str) -> None:
    presets = httpx.get(f"{live_server}/api/presets", timeout=10).json()
    assert [p["name"] for p in presets] == list(PRESETS)
    for p in presets:
        assert p["description"] and p["fields"] == PRESETS[p["name"]]
        response = httpx.post(f"{live_server}/api/simulate", json={"preset": p["name"]}, timeout=60)
        assert response.status_code == 200, (p["name"], response.text)


def test_openapi_documents_the_api_and_its_bounds(live_server: str) -> None:
    spec = httpx.get(f"{live_server}/openapi.json", timeout=10).json()
    assert {"/api/simulate", "/api/simulate/stream", "/api/presets", "/healthz"} <= set(spec["paths"])
    docs_field = spec["components"]["schemas"]["ScenarioInput"]["properties"]["docs"]
    assert {"minimum": 1, "maximum": 10_000} .items() <= docs_field["anyOf"][0].items()
    assert "text/event-stream" in spec["paths"]["/api/simulate/stream"]["post"]["responses"]["200"]["content"]
    assert httpx.get(f"{live_server}/docs", timeout=10).status_code == 200


def test_healthz(live_server: str) -> None:
    data = httpx.get(f"{live_server}/healthz", timeout=10).json()
    assert data["status"] == "ok"
    assert set(data["streams"]) >= {"open", "started", "completed", "abandoned", "events_sent"}


class _Scripts(HTMLParser):
    """Collects every <script> (its attributes and body) and every on* attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.handlers: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handlers += [f"<{tag} {name}>" for name, _ in attrs if name.startswith("on")]
        if tag == "script":
            self.scripts.append({**dict(attrs), "body": ""})
            self._in_script = True

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1]["body"] = (self.scripts[-1]["body"] or "") + data


@pytest.mark.parametrize("path", [view.path for view in VIEWS])
def test_page_has_no_inline_script_and_a_csp_forbidding_them(live_server: str, path: str) -> None:
    # Every view (app.web.views): a nav link swaps the body, so no view may bring a script of its own either.
    response = httpx.get(live_server + path, timeout=10)
    assert response.status_code == 200
    assert "script-src 'self'" in response.headers["content-security-policy"]
    parsed = _Scripts()
    parsed.feed(response.text)
    assert parsed.scripts, "the page loads its scripts"
    assert all(s.get("src") and not (s["body"] or "").strip() for s in parsed.scripts), parsed.scripts
    assert parsed.handlers == []
    for script in parsed.scripts:
        assert httpx.get(live_server + str(script["src"]), timeout=10).status_code == 200, script["src"]
