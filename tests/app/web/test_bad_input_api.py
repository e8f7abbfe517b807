"""Bad and oversized input over a real uvicorn: every case is a 4xx naming the field (or the file's line) and the limit.

Each case once took the server down or answered 500 (see the hardening issue): a 10^8-block GPU pool built up
front, answers of hundreds of MB, NaN and Infinity in bodies, zero costs, a curve refusing what simulate accepts,
1e308 and deeply nested values in uploaded files, whole inputs repeated in a 422.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from live_servers import ROOT, run_kvscope, serve_process

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    with serve_process() as (url, proc):
        yield url, proc.pid


def _peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _post_json(url: str, text: str, timeout: float = 30) -> httpx.Response:
    return httpx.post(url, content=text, headers={"content-type": "application/json"}, timeout=timeout)


def _detail(response: httpx.Response) -> str:
    return json.dumps(response.json()["detail"])


# -- resource limits -----------------------------------------------------------------------------------------


def test_a_1e8_token_gpu_with_a_tiny_workload_completes_in_bounded_memory(server: tuple[str, int]) -> None:
    url, pid = server
    before = _peak_rss_bytes(pid)
    body = {"docs": 1, "doc_tokens": 1, "question_tokens": 0, "gpu_tokens": 100_000_000, "block_size": 1, "chunk_size": 1, "passes": "forward"}
    response = httpx.post(f"{url}/api/simulate", json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["scenario"]["gpu_blocks"] == 100_000_000
    # Built up front, the pool's three per-block tables alone were 3 x 8 B x 10^8 = 2.4 GB; built on use, a few blocks.
    assert _peak_rss_bytes(pid) - before < 100 * 2**20


def test_a_capacity_curve_up_to_1e7_gpu_tokens_completes(server: tuple[str, int]) -> None:
    url, pid = server
    before = _peak_rss_bytes(pid)
    response = httpx.post(f"{url}/api/capacity", json={"gpu_tokens": 10_000_000, "points": 40}, timeout=60)
    assert response.status_code == 200, response.text
    points = response.json()["curves"][0]["points"]
    assert points[-1]["capacity_tokens"] == 10_000_000  # the grid reaches the scenario's own size
    assert _peak_rss_bytes(pid) - before < 100 * 2**20


def test_an_answer_of_hundreds_of_mb_is_refused_before_it_runs(server: tuple[str, int]) -> None:
    url, _ = server
    # The 5 KB body: 100 passes of 100,000 zipf requests, 10^7 records x 2 runs (~6 GB of JSON).
    body = {"docs": 1, "doc_tokens": 1, "question_tokens": 0, "passes": [{"order": "zipf", "requests": 100_000}] * 100}
    response = httpx.post(f"{url}/api/simulate", json=body, timeout=10)
    assert response.status_code == 422
    assert "the limit here is" in _detail(response) and "estimated" in _detail(response)
    # An explicit pass list of 10^5 documents x 10 passes: 10^6 records.
    body = {"docs": 10, "doc_tokens": 1, "question_tokens": 0, "passes": [{"order": "list", "docs": [0] * 100_000}] * 10}
    response = httpx.post(f"{url}/api/simulate", json=body, timeout=10)
    assert response.status_code == 422, response.text
    assert "estimated" in _detail(response)


# -- bad values ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "loc"),
    [
        ('{"cpu_gb": NaN}', ["body", "cpu_gb"]),
        ('{"cpu_gb": Infinity}', ["body", "cpu_gb"]),
        (
            '{"costs": {"overhead_ms": 1, "prefill_ms_per_token": Infinity, "load_cpu_ms_per_token": 0, '
            '"load_disk_ms_per_token": 0, "store_ms_per_token": 0}}',
            ["body", "costs", "prefill_ms_per_token"],
        ),
    ],
)
def test_nan_and_infinity_are_422_at_their_field(server: tuple[str, int], text: str, loc: list[str]) -> None:
    response = _post_json(f"{server[0]}/api/simulate", text)
    assert response.status_code == 422
    assert [e["loc"] for e in response.json()["detail"]] == [loc]
    assert "finite number" in response.json()["detail"][0]["msg"]


# A lone surrogate is a legal JSON escape (RFC 8259 section 7) that no UTF-8 text can hold: a 422 that repeats it
# (its "input", or a message quoting it) was a 500. Each field here is a string the 422 names and repeats back.
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/simulate", '{"preset": "\\ud800"}', "preset"),
        ("/api/simulate", '{"model": "\\ud800"}', "model"),
        ("/api/simulate", '{"passes": "\\ud800"}', "passes"),
        ("/api/simulate/stream", '{"model": "x\\udfff"}', "model"),
        ("/api/live/runs", '{"targets": ["\\ud800"]}', "targets"),
    ],
)
def test_a_lone_surrogate_is_a_422_naming_its_field(server: tuple[str, int], path: str, body: str, field: str) -> None:
    response = _post_json(f"{server[0]}{path}", body)
    assert response.status_code == 422, response.text[:300]
    # The answer is UTF-8 JSON (here all ASCII: the surrogate travels as its escape) that names the field.
    errors = json.loads(response.content.decode("utf-8"))["detail"]
    assert any(e["loc"][:2] == ["body", field] for e in errors), errors


def test_costs_that_make_every_ttft_zero_are_422(server: tuple[str, int]) -> None:
    zero = dict.fromkeys(("overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "load_disk_ms_per_token", "store_ms_per_token"), 0)
    response = httpx.post(f"{server[0]}/api/simulate", json={"costs": zero}, timeout=10)
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "costs"] and "overhead_ms + prefill_ms_per_token must be at least 0.001 ms" in error["msg"]


def test_simulate_json_refuses_zero_costs_and_never_prints_infinity(tmp_path: Path) -> None:
    zero = tmp_path / "zero.json"
    zero.write_text(json.dumps({"overhead_ms": 0, "prefill_ms_per_token": 0, "load_cpu_ms_per_token": 0,
                                "load_disk_ms_per_token": 0, "store_ms_per_token": 0}))
    result = run_kvscope(["simulate", "--costs", str(zero), "--json"])
    assert result.returncode == 2
    assert "zero.json: not a cost profile (overhead_ms + prefill_ms_per_token must be at least 0.001 ms" in result.stderr
    result = run_kvscope(["simulate", "--json", "--docs", "3"])
    assert result.returncode == 0
    json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"{name} in simulate --json"))


def test_capacity_accepts_every_scenario_simulate_accepts(server: tuple[str, int]) -> None:
    url, _ = server
    # A GPU of exactly one 5,011-token document: enough whole-document; one token short of a prompt at block level.
    body = {"granularity": "doc", "gpu_tokens": 5011}
    assert httpx.post(f"{url}/api/simulate", json=body, timeout=30).status_code == 200
    response = httpx.post(f"{url}/api/capacity", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert [c["granularity"] for c in response.json()["curves"]] == ["block", "doc"]
    page = httpx.post(f"{url}/ui/analysis/capacity", data={"preset": "seed-lab", **{k: str(v) for k, v in body.items()}}, timeout=60)
    assert page.status_code == 200, page.text


def test_1e308_ttfts_are_422_naming_the_line(server: tuple[str, int]) -> None:
    url, _ = server
    rows = "config,pass,order,seq,doc,prompt_tokens,ttft_ms\ngpu,1,forward,0,0,5024,575.9\ngpu,1,forward,1,1,5024,1e308\n"
    response = httpx.post(f"{url}/api/analyze", files={"file": ("m.csv", rows)}, timeout=30)
    assert response.status_code == 422
    assert "line 3: column ttft_ms" in _detail(response) and "at most 3,600,000 ms" in _detail(response)
    table = "config,pass,order,p50_ms,mean_ms\ngpu,1,forward,1e308,1e308\n"
    response = httpx.post(f"{url}/api/calibrate", files={"file": ("t.csv", table)}, timeout=30)
    assert response.status_code == 422
    assert "line 2: p50_ms must be from 0 to 3,600,000 ms" in _detail(response)


# 1e308 is shown as the file has it, not as the 309 digits of int(1e308).
@pytest.mark.parametrize(("layers", "shown"), [("1e308", "got 1e+308<"), ("-28", "got -28<")])
def test_a_config_json_with_impossible_layers_is_422(server: tuple[str, int], layers: str, shown: str) -> None:
    config = f'{{"num_hidden_layers": {layers}, "num_attention_heads": 12, "num_key_value_heads": 2, "hidden_size": 1536}}'
    response = httpx.post(f"{server[0]}/ui/analysis/size", files={"config": ("config.json", config)}, timeout=10)
    assert response.status_code == 422
    assert "num_hidden_layers must be from 1 to 1,000" in response.text
    assert shown in response.text and len(response.content) < 500


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ('"num_key_value_heads": [2]', "config.json: num_key_value_heads must be a whole number, got [2]"),
        ('"num_key_value_heads": 1e308', "config.json: num_key_value_heads must be from 1 to 1,024, got 1e+308"),
        ('"sliding_window": "x", "use_sliding_window": true', "config.json: sliding_window must be a whole number, got &#39;x&#39;"),
        ('"sliding_window": -4096', "config.json: sliding_window must be from 1 to 1,073,741,824, got -4,096"),
    ],
)
def test_a_config_json_with_a_malformed_field_is_422_naming_it(server: tuple[str, int], fields: str, said: str) -> None:
    config = f'{{"num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "hidden_size": 1536, {fields}}}'
    response = httpx.post(f"{server[0]}/ui/analysis/size", files={"config": ("config.json", config)}, timeout=10)
    assert response.status_code == 422, response.text[:300]
    assert said in response.text


# A fraction of a layer is named on both panels that read a config.json: int() read 28.5 layers as 28.
@pytest.mark.parametrize(
    ("path", "field", "extra"),
    [
        ("/ui/analysis/size", "config", {}),
        ("/ui/analysis/advise", "advise_config", {"advise_p50_ms": "100", "advise_buy_gpu": "on", "advise_buy_cpu": "on"}),
    ],
)
def test_a_config_json_with_a_fraction_of_a_layer_is_422(server: tuple[str, int], path: str, field: str, extra: dict) -> None:
    config = '{"num_hidden_layers": 28.5, "num_attention_heads": 12, "hidden_size": 1536}'
    response = httpx.post(f"{server[0]}{path}", data=extra, files={field: ("config.json", config)}, timeout=30)
    assert response.status_code == 422, response.text[:300]
    assert "config.json: num_hidden_layers must be a whole number, got 28.5" in response.text


@pytest.mark.parametrize(
    ("path", "field", "extra"),
    [
        ("/api/analyze", "file", {}),
        ("/api/replay", "file", {"gpu_blocks": "100"}),
        ("/api/curve", "file", {}),
        ("/api/calibrate", "file", {}),
        ("/ui/analysis/measurements", "file", {}),
        ("/ui/analysis/profile", "profile", {}),
        ("/ui/analysis/size", "config", {}),
        ("/ui/analysis/advise", "advise_config", {"advise_p50_ms": "100"}),
        ("/api/compare", "file", {}),
        ("/api/runs/import", "file", {}),
    ],
)
def test_json_nested_100000_deep_in_an_upload_is_422(server: tuple[str, int], path: str, field: str, extra: dict) -> None:
    response = httpx.post(f"{server[0]}{path}", data=extra, files={field: ("deep.jsonl", DEEP + "\n")}, timeout=30)
    assert response.status_code == 422, response.text[:300]
    assert "nested deeper than 64 levels" in response.text


# Every route that takes a JSON body (the OpenAPI schema's, at the time of writing).
JSON_ROUTES = ["/api/simulate", "/api/simulate/stream", "/api/fleet", "/api/live/runs", "/api/curve/scenario", "/api/capacity", "/api/policies", "/api/size", "/api/advise"]


@pytest.mark.parametrize("path", JSON_ROUTES)
def test_a_json_body_nested_100000_deep_is_422_naming_the_body_and_the_limit(server: tuple[str, int], path: str) -> None:
    response = _post_json(f"{server[0]}{path}", '{"passes": ' + DEEP + "}")
    assert response.status_code == 422, response.text[:300]
    assert response.json()["detail"] == [
        {"type": "json_too_deep", "loc": ["body"], "msg": "the JSON body is nested deeper than 64 levels (the limit)"}
    ]


def test_a_json_body_at_the_nesting_limit_reaches_its_route_and_one_level_more_does_not(server: tuple[str, int]) -> None:
    def post(lists: int) -> httpx.Response:
        # The object and ``lists`` lists inside it: 1 + lists levels. Chunked, so the body is read as it arrives.
        body = ('{"passes": ' + "[" * lists + "]" * lists + "}").encode()
        return httpx.post(f"{server[0]}/api/simulate", content=iter([body[:10], body[10:]]), headers={"content-type": "application/json"}, timeout=30)

    # 64 levels: the route's own check answers (passes is text or a list of pass objects): a 422 at passes.
    at_limit = post(63)
    assert at_limit.status_code == 422
    assert at_limit.json()["detail"][0]["loc"][:2] == ["body", "passes"]
    # 65 levels: refused for its depth before the route parses it.
    over = post(64)
    assert over.status_code == 422
    assert over.json()["detail"][0]["type"] == "json_too_deep"


def test_the_json_routes_named_here_are_every_json_body_route(server: tuple[str, int]) -> None:
    spec = httpx.get(f"{server[0]}/openapi.json", timeout=30).json()
    taking_json = sorted(
        path for path, ops in spec["paths"].items() for op in ops.values()
        if "application/json" in op.get("requestBody", {}).get("content", {})
    )
    assert taking_json == sorted(JSON_ROUTES)


# -- bodies that cannot be read ------------------------------------------------------------------------------

FORM = "application/x-www-form-urlencoded"


# Each was a 400 saying only that the body could not be parsed (or Starlette's words without a location): now a 422 at
# the body naming what is wrong and the limit.
@pytest.mark.parametrize(
    ("path", "kind", "body", "said"),
    [
        # Python converts at most 4,300 digits to an int (sys.int_info.default_max_str_digits), so json.loads fails.
        ("/api/simulate", "application/json", b'{"docs": ' + b"9" * 5000 + b"}", 'has 5,000 digits (after "docs"); the limit is 4,300 digits'),
        # 0xff is never UTF-8; it comes after the 12 bytes of '{"preset": "'.
        ("/api/simulate", "application/json", b'{"preset": "\xff\xfe"}', 'not UTF-8 text (JSON is UTF-8, RFC 8259 section 8.1): byte 0xff at offset 12 (after "preset")'),
        # A multipart body's parts are told apart by the boundary its Content-Type names: without one nothing is read,
        # for a route FastAPI reads the form of (analyze) and one that reads its own (the page's run).
        ("/api/analyze", "multipart/form-data", b"abc", "no boundary"),
        ("/ui/run", "multipart/form-data", b"abc", "no boundary"),
        # Starlette reads at most 1,000 form fields; 1,001 given.
        ("/ui/run", FORM, "&".join(f"f{i}=1" for i in range(1001)).encode(), "Maximum number of fields is 1000"),
    ],
)
def test_a_body_that_cannot_be_read_is_422_naming_the_body_and_why(server: tuple[str, int], path: str, kind: str, body: bytes, said: str) -> None:
    response = httpx.post(f"{server[0]}{path}", content=body, headers={"content-type": kind}, timeout=30)
    assert response.status_code == 422, response.text[:300]
    [error] = response.json()["detail"]
    assert error["loc"] == ["body"] and said in error["msg"], error


def test_other_http_errors_keep_their_answer(server: tuple[str, int]) -> None:
    # The handler of unreadable bodies sees every HTTP error: a 404 of a route or of no route is left as it was.
    assert httpx.get(f"{server[0]}/api/runs/999999", timeout=10).json() == {"detail": "no run 999999"}
    missing = httpx.get(f"{server[0]}/no/such/page", timeout=10)
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}


# -- strict types and ASCII digits -------------------------------------------------------------------------

# A JSON body has JSON's types: true is not 1, "3" is not 3, 3.0 is not an integer, 1 is not true. Each was taken
# (pydantic's lax mode). Every JSON body route (JSON_ROUTES, checked against the OpenAPI above) is asked once, at an
# integer field of its own; the advisor's is nested in its scenario, so strictness reaches nested models too.
STRICT_CASES = [
    ("/api/simulate", {"docs": True}, ["body", "docs"]),
    ("/api/simulate", {"docs": "3"}, ["body", "docs"]),
    ("/api/simulate", {"docs": 3.0}, ["body", "docs"]),
    ("/api/simulate", {"no_cpu": 1}, ["body", "no_cpu"]),
    ("/api/simulate", {"passes": [{"order": "zipf", "seed": True}]}, ["body", "passes"]),
    ("/api/simulate/stream", {"docs": True}, ["body", "docs"]),
    ("/api/fleet", {"replicas": True}, ["body", "replicas"]),
    ("/api/live/runs", {"docs": True}, ["body", "docs"]),
    ("/api/curve/scenario", {"points": True}, ["body", "points"]),
    ("/api/capacity", {"points": True}, ["body", "points"]),
    ("/api/policies", {"docs": True}, ["body", "docs"]),
    ("/api/size", {"docs": True}, ["body", "docs"]),
    ("/api/advise", {"scenario": {"docs": True}}, ["body", "scenario", "docs"]),
]


def test_every_json_route_is_asked_for_strict_types() -> None:
    assert sorted({path for path, _, _ in STRICT_CASES}) == sorted(JSON_ROUTES)


@pytest.mark.parametrize(("path", "body", "loc"), STRICT_CASES)
def test_a_json_body_of_the_wrong_json_type_is_422_at_its_field(server: tuple[str, int], path: str, body: dict, loc: list[str]) -> None:
    response = httpx.post(f"{server[0]}{path}", json=body, timeout=30)
    assert response.status_code == 422, response.text[:300]
    assert any(e["loc"][: len(loc)] == loc for e in response.json()["detail"]), response.json()


@pytest.mark.parametrize("path", sorted(JSON_ROUTES))
def test_a_json_text_sent_as_plain_text_is_422_not_500(server: tuple[str, int], path: str) -> None:
    # FastAPI passes a body without a JSON content type on as its bytes; the strict reading took them for a parsed
    # value and failed to encode them (a 500 the fuzzer found on every JSON route). As lax reading did, a 422.
    response = httpx.post(f"{server[0]}{path}", content=b'{"docs": 3}', headers={"content-type": "text/plain"}, timeout=30)
    assert response.status_code == 422, response.text[:300]
    assert response.json()["detail"][0]["loc"][0] == "body"


def test_an_explicit_pass_list_is_still_an_array(server: tuple[str, int]) -> None:
    # Strict JSON reading still makes a tuple of an array (the explicit order's documents), as JSON has no tuples.
    body = {"docs": 2, "doc_tokens": 100, "passes": [{"order": "list", "docs": [1, 0]}]}
    response = httpx.post(f"{server[0]}/api/simulate", json=body, timeout=30)
    assert response.status_code == 200, response.text[:300]
    assert [r["doc"] for r in response.json()["runs"][0]["requests"]] == [1, 0]


# Digits in a text field are ASCII: Python's \d and int() read any script's, so zipf@١٢ (Arabic-Indic) was zipf@12.
@pytest.mark.parametrize(
    ("field", "text"),
    [("passes", "forward,zipf@\u0661\u0662"), ("passes", "tile*\u0662"), ("passes", "tile*2:\u0663:1"), ("question_tokens", "\u0661\u0663")],
)
def test_digits_of_another_script_are_422_at_their_field(server: tuple[str, int], field: str, text: str) -> None:
    response = httpx.post(f"{server[0]}/api/simulate", json={"docs": 3, "doc_tokens": 100, field: text}, timeout=30)
    assert response.status_code == 422, response.text[:300]
    assert [e["loc"][:2] for e in response.json()["detail"]] == [["body", field]]


# A tier must hold the least it stores, one 256-token chunk by default (only full chunks are stored): for the seed
# model's 28,672 bytes a token that is 256 x 28,672 = 7,340,032 bytes. 5e-324 GiB was a tier of 0 tokens.
@pytest.mark.parametrize(
    ("body", "field", "said"),
    [
        ({"cpu_gb": 5e-324}, "cpu_gb", "at least one chunk of 256 tokens: 7,340,032 bytes"),
        ({"cpu_tokens": 255}, "cpu_tokens", "at least one chunk of 256 tokens: 256 tokens"),
        ({"disk_gb": 1e-9}, "disk_gb", "at least one chunk of 256 tokens: 7,340,032 bytes"),
        ({"storage_tiers": "far:10t"}, "storage_tiers", "tier far must hold at least one chunk of 256 tokens"),
        # Storing partial chunks, the least is a token: 28,672 bytes, and 2e-5 GiB (21,474 bytes) is less.
        ({"cpu_gb": 2e-5, "save_unfull_chunk": True}, "cpu_gb", "at least one token: 28,672 bytes"),
    ],
)
def test_a_tier_below_the_least_it_stores_is_422_at_its_field(server: tuple[str, int], body: dict, field: str, said: str) -> None:
    response = httpx.post(f"{server[0]}/api/simulate", json={"docs": 3, "doc_tokens": 100, **body}, timeout=30)
    assert response.status_code == 422, response.text[:300]
    errors = response.json()["detail"]
    assert [e["loc"][:2] for e in errors] == [["body", field]] and said in errors[0]["msg"], errors


def test_a_tier_of_exactly_the_least_it_stores_is_simulated(server: tuple[str, int]) -> None:
    for body in ({"cpu_gb": None, "cpu_tokens": 256}, {"cpu_gb": None, "cpu_tokens": 1, "save_unfull_chunk": True}):
        response = httpx.post(f"{server[0]}/api/simulate", json={"docs": 3, "doc_tokens": 100, **body}, timeout=30)
        assert response.status_code == 200, (body, response.text[:300])


# -- body limits and what an error repeats ----------------------------------------------------------------


def test_a_422_repeats_little_of_a_large_input(server: tuple[str, int]) -> None:
    huge = "x" * 1_500_000
    response = httpx.post(f"{server[0]}/api/simulate", json={"preset": huge}, timeout=30)
    assert response.status_code == 422
    assert len(response.content) < 5_000  # it was the whole 1.5 MB


def test_a_passes_text_over_its_length_limit_is_422_before_parsing(server: tuple[str, int]) -> None:
    text = "forward," * 150_000  # 1.2 million characters: under the body limit, over the field's
    response = httpx.post(f"{server[0]}/api/simulate", json={"passes": text}, timeout=10)
    assert response.status_code == 422
    assert "at most 1000000 characters" in _detail(response)
    assert len(response.content) < 5_000


# Text fields that list things, each too long by its count of items: refused by counting (or by the text's length)
# before any item is parsed. Parsed first, 1.6 MB of storage tiers held the event loop (and /healthz) for 3 s, 2 MB of
# question lengths 1.7 s, 120,000 passes 0.7 s; the last item of each is malformed, so a parse would fail on it.
@pytest.mark.parametrize(
    ("field", "text", "said"),
    [
        ("passes", "forward," * 120_000 + "sideways", "120,001 passes in the passes text; the limit is 100"),
        ("passes", ["0/" * 120_000 + "x"], "the list has 120,001 documents; the limit is 100,000"),
        ("passes", ["forward"] * 120_000 + ["sideways"], "at most 100 items after validation, not 120001"),
        ("question_tokens", "13," * 300_000 + "x", "the text is 900,001 characters long; the limit is 80,000"),
        ("question_tokens", [13] * 300_000, "List should have at most 10000 items after validation, not 300000"),
        ("storage_tiers", "far:1," * 200_000 + "x", "the text is 1,200,001 characters long; the limit is 1,024"),
        ("storage_tiers", ["far:1"] * 200_000 + ["x"], "200,001 tiers; the limit is 4"),
    ],
)
def test_a_long_list_in_a_text_field_is_refused_by_its_length_before_parsing(
    server: tuple[str, int], field: str, text: str | list[str], said: str
) -> None:
    response = httpx.post(f"{server[0]}/api/simulate", json={"docs": 10, field: text}, timeout=30)
    assert response.status_code == 422, response.text[:300]
    errors = response.json()["detail"]  # a list refused as text too (the field takes either) has two
    assert any(e["loc"][:2] == ["body", field] and said in e["msg"] for e in errors), errors


def _routes_taking_files(url: str) -> set[str]:
    """Every route a file is posted to, found where each is declared: the API's in its OpenAPI (a body field that is
    a file), the page's in the templates (a form with a file input)."""
    spec = httpx.get(f"{url}/openapi.json", timeout=30).json()
    api = set()
    for path, ops in spec["paths"].items():
        for op in ops.values():
            for kind, content in op.get("requestBody", {}).get("content", {}).items():
                name = content["schema"].get("$ref", "").rsplit("/", 1)[-1]
                fields = json.dumps(spec["components"]["schemas"].get(name, {}).get("properties", {}))
                if "application/octet-stream" in fields:  # a file among the body's fields
                    assert kind == "multipart/form-data", (path, kind)  # a file is posted as multipart, so documented
                    api.add(path)
    pages = set()
    for template in (ROOT / "templates").rglob("*.html"):
        for form in re.findall(r"<form\b.*?</form>", template.read_text(), flags=re.S):
            if 'type="file"' in form:
                pages.add(re.search(r'hx-post="([^"]+)"', form).group(1))  # type: ignore[union-attr]
    return api | pages


def test_every_route_that_takes_a_file_takes_a_body_over_the_json_limit(server: tuple[str, int]) -> None:
    url, _ = server
    routes = _routes_taking_files(url)
    # The case, and the advisor's config.json: both took files and were held to the 2 MiB of a JSON body.
    assert {"/api/analyze", "/api/compare", "/ui/analysis/measurements", "/ui/analysis/advise"} <= routes
    # 3 MiB: over the 2 MiB of any other body, under the upload limit (two 16 MiB files and the form: 40 MiB).
    # Not a file any route reads: each refuses it (4xx) after reading it, never with 413 before.
    junk = b"x" * (3 * 2**20)
    for path in sorted(routes):
        response = httpx.post(f"{url}{path}", files={"file": ("junk.csv", junk)}, timeout=60)
        assert response.status_code != 413, (path, response.text[:200])
        assert response.status_code < 500, (path, response.text[:200])


def test_bodies_over_the_route_limit_are_413_before_they_are_read(server: tuple[str, int]) -> None:
    url, _ = server
    body = json.dumps({"passes": "forward," * 1_300_000})  # 10 MB
    response = _post_json(f"{url}/api/simulate", body)
    assert response.status_code == 413
    assert "2,097,152 bytes" in response.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
        yield b'{"passes": "'
        for _ in range(40):
            yield b"forward," * 10_000
        yield b'"}'

    response = httpx.post(f"{url}/api/simulate", content=chunks(), headers={"content-type": "application/json"}, timeout=30)
    assert response.status_code == 413
    # An upload route takes more: a 2.7 MB measurement file (20,000 rows with a long model name) is read.
    rows = "config,pass,order,seq,doc,prompt_tokens,ttft_ms,model\n" + f"gpu,1,forward,0,0,5024,575.9,{'m' * 100}\n" * 20_000
    response = httpx.post(f"{url}/api/analyze", files={"file": ("m.csv", rows)}, timeout=60)
    assert response.status_code == 200, response.text[:300]
