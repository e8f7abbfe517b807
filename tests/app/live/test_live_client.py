"""The live client without a network: target parsing, ``/metrics`` parsing, prompt sizing, and how a run copes with
servers that lack metrics, use older metric names, fail, or are not vLLM (``httpx.MockTransport`` fakes)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import httpx
import pytest
from live_servers import run_async

from app.live import prom
from app.live.prompts import sized_text
from app.live.session import LiveOptions, LiveRun
from app.live.targets import Target, TargetSpecError, parse_target, parse_targets, targets_from_env
from sim.calibration.measurements import Measurement
from sim.engine.events import Error, Event, Measured, PassDone, RunDone, RunWarning
from sim.workloads.scenario import Scenario

# Two 40-token documents, a 3-token question, read twice: 4 requests of 43 tokens.
SMALL = Scenario(docs=2, doc_tokens=40, question_tokens=3, passes="forward,forward", cpu_gb=None)


# -- targets ------------------------------------------------------------------------


def test_targets_are_named_http_urls() -> None:
    assert parse_target("gpu+cpu=http://10.0.0.5:8001/") == Target("gpu+cpu", "http://10.0.0.5:8001")
    assert parse_targets(["https://vllm.internal"]) == [Target("gpu", "https://vllm.internal")]
    assert targets_from_env("gpu=http://a:1,gpu+cpu=http://b:2") == [Target("gpu", "http://a:1"), Target("gpu+cpu", "http://b:2")]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("gpu=file:///etc/passwd", "not an http:// or https:// URL"),
        ("gpu=ftp://host/", "not an http:// or https:// URL"),
        ("gpu=localhost:8000", "not an http:// or https:// URL"),
        ("gpu=http://", "has no host"),
        ("gpu=http://host:99999", "invalid port"),
        ("gpu=http://host/?next=x", "base URL"),
        ("bad name=http://host", "target name"),
    ],
)
def test_bad_targets_are_refused(spec: str, fragment: str) -> None:
    with pytest.raises(TargetSpecError, match=fragment):
        parse_targets([spec])


def test_target_names_must_be_unique() -> None:
    with pytest.raises(TargetSpecError, match="given twice"):
        parse_targets(["gpu=http://a", "gpu=http://b"])


# -- /metrics ------------------------------------------------------------------------


def test_prometheus_text_is_parsed_with_labels_and_summed_over_engines() -> None:
    text = """# HELP vllm:prefix_cache_hits_total Prefix cache hits.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 32.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 8.0
vllm:prefix_cache_queries_total{engine="0",model_name="m \\"quoted\\""} 72.0 1700000000000
vllm:cache_config_info{block_size="16",num_gpu_blocks="1345"} 1.0
not a metric line
"""
    samples = prom.parse(text)
    assert prom.total(samples, prom.GPU_HITS) == 40.0
    assert prom.total(samples, prom.GPU_QUERIES) == 72.0
    assert samples[2].labels["model_name"] == 'm "quoted"'
    assert prom.info_labels(samples) == {"block_size": "16", "num_gpu_blocks": "1345"}
    assert prom.total(samples, prom.EXTERNAL_HITS) is None


def test_the_cpu_tier_is_read_from_the_offloading_labels_of_the_cache_config() -> None:
    # vllm/config/cache.py: kv_offloading_size (GiB, "None" when off) and kv_offloading_backend are CacheConfig
    # fields, and CacheConfig.metrics_info exports every field as a label of vllm:cache_config_info.
    on = prom.Offload.read({"block_size": "16", "kv_offloading_size": "2.0", "kv_offloading_backend": "lmcache"})
    assert (on.configured, on.size_gb, on.describe()) == (True, 2.0, "lmcache, 2 GiB")
    off = prom.Offload.read({"block_size": "16", "kv_offloading_size": "None", "kv_offloading_backend": "native"})
    # Not configured through the cache config; a --kv-transfer-config connector would not show: unknown.
    assert (off.configured, off.describe()) == (None, None)
    assert prom.Offload.read(None).configured is None
    assert prom.Offload.read({"kv_offloading_size": "nan"}).configured is None


def test_older_gpu_counter_names_are_read_when_the_new_ones_are_absent() -> None:
    samples = prom.parse('vllm:gpu_prefix_cache_queries_total{engine="0"} 100\nvllm:gpu_prefix_cache_hits_total{engine="0"} 64\n')
    counters = prom.CacheCounters.read(samples)
    assert (counters.gpu_queries, counters.gpu_hits) == (100.0, 64.0)


# -- prompt sizing ------------------------------------------------------------------------


def test_sized_text_lands_exactly_on_a_one_token_per_word_tokenizer() -> None:
    async def count(text: str) -> int:
        return len(text.split())

    sized = run_async(sized_text(count, ["Document", "0:"], random.Random(1), 5011))
    assert sized.tokens == 5011 and len(sized.text.split()) == 5011
    assert sized.text.startswith("Document 0: ")


def test_sized_text_takes_the_longest_text_below_when_exact_is_impossible() -> None:
    # Every word is 2 tokens: an odd target cannot be met, so the answer is one token short.
    async def count(text: str) -> int:
        return 2 * len(text.split())

    sized = run_async(sized_text(count, [], random.Random(2), 101))
    assert sized.tokens == 100 and len(sized.text.split()) == 50


# -- runs against fake servers ---------------------------------------------------------------


@dataclass
class FakeVllm:
    """A vLLM-like server in a function: counts tokens as words; every prompt hits half its tokens on GPU."""

    model: str = "fake-model"
    metrics: str = "current"  # "current", "old" or "none"
    models_body: str | None = None
    fail_after: int | None = None  # completions answered before it starts answering 500
    completions: int = 0
    queries: int = 0
    hits: int = 0
    seen_hosts: set[str] = field(default_factory=set)

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.seen_hosts.add(request.url.host)
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            if self.models_body is not None:
                return httpx.Response(200, text=self.models_body, headers={"content-type": "text/html"})
            return httpx.Response(200, json={"object": "list", "data": [{"id": self.model, "max_model_len": 4096}]})
        if path == "/metrics":
            return self._metrics()
        if path == "/tokenize":
            return httpx.Response(200, json={"count": len(json.loads(request.content)["prompt"].split())})
        if path == "/v1/completions":
            return self._complete(json.loads(request.content))
        return httpx.Response(404, json={"detail": "Not Found"})

    def _metrics(self) -> httpx.Response:
        if self.metrics == "none":
            return httpx.Response(404, text="Not Found")
        prefix = "vllm:gpu_prefix_cache" if self.metrics == "old" else "vllm:prefix_cache"
        text = (
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="1345"} 1.0\n'
            f'{prefix}_queries_total{{engine="0"}} {self.queries}\n{prefix}_hits_total{{engine="0"}} {self.hits}\n'
        )
        return httpx.Response(200, text=text)

    def _complete(self, body: dict) -> httpx.Response:
        if self.fail_after is not None and self.completions >= self.fail_after:
            return httpx.Response(500, json={"error": {"message": "engine dead", "type": "InternalServerError", "code": 500}})
        self.completions += 1
        n = len(body["prompt"].split())
        self.queries += n
        self.hits += n // 2
        chunk = {"choices": [{"index": 0, "text": " hi", "finish_reason": None}]}
        usage = {"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1}}
        stream = f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(usage)}\n\ndata: [DONE]\n\n"
        return httpx.Response(200, text=stream, headers={"content-type": "text/event-stream"})


def run_live(fake: FakeVllm, targets: list[Target] | None = None, scenario: Scenario = SMALL) -> tuple[LiveRun, list[Event], list[Measurement]]:
    written: list[Measurement] = []
    live = LiveRun(
        scenario, targets or [Target("gpu", "http://fake.test")], LiveOptions(timeout_s=5),
        sink=written.append, transport=httpx.MockTransport(fake.handler),
    )

    async def collect() -> list[Event]:
        return [event async for event in live.events()]

    return live, run_async(collect()), written


def test_hits_come_from_counter_deltas_under_the_current_names() -> None:
    fake = FakeVllm()
    live, events, written = run_live(fake)
    measured = [e for e in events if isinstance(e, Measured)]
    # Each prompt is 40 + 3 = 43 words (the fake counts words); the fake hits 43 // 2 = 21 of them.
    assert [m.prompt_tokens for m in measured] == [43] * 4
    assert [m.gpu_hit_tokens for m in measured] == [21] * 4
    assert all(m.cpu_hit_tokens is None for m in measured)  # no external counters on this server
    assert [m.seq for m in written] == [0, 1, 2, 3] and not live.failed
    assert [e.summary["pass"] for e in events if isinstance(e, PassDone)] == [1, 2]
    assert isinstance(events[-1], RunDone) and events[-1].totals["gpu_hit_tokens"] == 84


def test_older_counter_names_still_give_hits() -> None:
    _, events, _ = run_live(FakeVllm(metrics="old"))
    assert [e.gpu_hit_tokens for e in events if isinstance(e, Measured)] == [21] * 4
    assert not [e for e in events if isinstance(e, RunWarning)]


def test_a_server_without_metrics_gives_a_ttft_only_run_with_a_warning() -> None:
    live, events, written = run_live(FakeVllm(metrics="none"))
    warnings = [e.message for e in events if isinstance(e, RunWarning)]
    assert any("/metrics answered HTTP 404" in w and "TTFT only" in w for w in warnings)
    assert len(written) == 4 and all(m.gpu_hit_tokens is None and m.ttft_ms > 0 for m in written)
    assert not live.failed and not [e for e in events if isinstance(e, Error)]


def test_a_server_that_starts_failing_gives_an_error_and_keeps_what_was_measured() -> None:
    live, events, written = run_live(FakeVllm(fail_after=3))
    errors = [e for e in events if isinstance(e, Error)]
    assert len(errors) == 1 and errors[0].run == "gpu"
    assert "POST /v1/completions: HTTP 500: engine dead" in errors[0].message
    assert [m.seq for m in written] == [0, 1, 2]
    assert live.failed == {"gpu": errors[0].message}


def test_a_server_that_is_not_vllm_is_named_as_such() -> None:
    live, events, _ = run_live(FakeVllm(models_body="<html>hello</html>"))
    assert "is this a vLLM server?" in live.failed["gpu"]
    assert [e.kind for e in events] == ["error"]


def test_one_target_down_does_not_stop_the_other() -> None:
    fake = FakeVllm()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down.test":
            raise httpx.ConnectError("connection refused", request=request)
        return fake.handler(request)

    written: list[Measurement] = []
    targets = [Target("gpu", "http://down.test"), Target("gpu+cpu", "http://up.test")]
    live = LiveRun(SMALL, targets, LiveOptions(timeout_s=5), sink=written.append, transport=httpx.MockTransport(handler))

    async def collect() -> list[Event]:
        return [event async for event in live.events()]

    events = run_async(collect())
    assert list(live.failed) == ["gpu"] and "cannot connect" in live.failed["gpu"]
    assert "down.test" not in live.failed["gpu"]  # messages reach the browser; URLs do not
    assert {m.config for m in written} == {"gpu+cpu"} and len(written) == 4
    assert any(isinstance(e, RunDone) and e.run == "gpu+cpu" for e in events)


def test_overlapping_requests_record_ttft_only() -> None:
    written: list[Measurement] = []
    fake = FakeVllm()
    live = LiveRun(
        SMALL, [Target("gpu", "http://fake.test")], LiveOptions(concurrency=2, timeout_s=5), sink=written.append,
        transport=httpx.MockTransport(fake.handler),
    )

    async def collect() -> list[Event]:
        return [event async for event in live.events()]

    events = run_async(collect())
    assert any(isinstance(e, RunWarning) and "2 requests at a time" in e.message for e in events)
    assert sorted(m.seq for m in written) == [0, 1, 2, 3]
    assert all(m.gpu_hit_tokens is None for m in written)


def test_the_prediction_of_a_request_comes_before_its_measurement() -> None:
    _, events, _ = run_live(FakeVllm())
    kinds = [e.kind for e in events]
    # The run starts with the shadow's tiers; each request's shadow events end in ttft, then measured follows.
    assert kinds[0] == "run"
    for i, kind in enumerate(kinds):
        if kind == "measured":
            assert kinds[i - 1] == "ttft"


def test_targets_are_measured_one_after_the_other_unless_side_by_side() -> None:
    fake = FakeVllm()
    order: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/completions":
            order.append(request.url.host)
        return fake.handler(request)

    targets = [Target("gpu", "http://a.test"), Target("gpu+cpu", "http://b.test")]
    live = LiveRun(SMALL, targets, LiveOptions(timeout_s=5), transport=httpx.MockTransport(handler))

    async def collect() -> list[Event]:
        return [event async for event in live.events()]

    run_async(collect())
    # Four requests each (2 documents x 2 passes): every one of the first target's before any of the second's.
    assert order == ["a.test"] * 4 + ["b.test"] * 4
    order.clear()
    live = LiveRun(SMALL, targets, LiveOptions(timeout_s=5, side_by_side=True), transport=httpx.MockTransport(handler))
    run_async(collect())
    assert sorted(order) == ["a.test"] * 4 + ["b.test"] * 4 and set(order[:4]) == {"a.test", "b.test"}


def test_the_shadow_of_a_vllm_reporting_offloading_has_that_cpu_tier_whatever_its_name() -> None:
    from app.live.client import TargetInfo
    from app.live.shadow import shadow_scenario

    reported = TargetInfo("gpu", "m", block_size=16, num_gpu_blocks=1345, offload=prom.Offload("lmcache", 2.0))
    scenario = shadow_scenario(SMALL, Target("gpu", "http://x.test"), reported)
    assert (scenario.cpu_gb, scenario.gpu_tokens) == (2.0, 16 * 1345)
    # vLLM's native offloading (--kv-offloading-backend native): the twin runs the vllm-native backend.
    native = TargetInfo("gpu", "m", block_size=16, num_gpu_blocks=1345, offload=prom.Offload("native", 2.0))
    twin = shadow_scenario(SMALL.replace(cpu_policy="fifo"), Target("gpu", "http://x.test"), native)
    assert (twin.cpu_backend, twin.cpu_policy, twin.cpu_gb) == ("vllm-native", "lru", 2.0)
    assert shadow_scenario(SMALL, Target("gpu", "http://x.test"), reported).cpu_backend == SMALL.cpu_backend
    # Without the labels the name still decides: "gpu" has no CPU tier.
    silent = TargetInfo("gpu", "m", block_size=16, num_gpu_blocks=1345)
    assert shadow_scenario(SMALL, Target("gpu", "http://x.test"), silent).cpu_capacity_tokens is None
