"""``POST /api/simulate/stream`` with requests overlapping, read from a real uvicorn: ``step`` events as the ledger has them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from live_servers import sse

from app.cli import main
from sim.costs.model import default_costs
from sim.engine.events import STEP_EVENT_KINDS

# Three seed-lab documents read once (5,024-token prompts, one output token each), GPU only, two in flight.
EXTRA = ("seq", "running_seqs", "waiting_seqs")
BODY = {"docs": 3, "passes": "forward", "no_cpu": True, "concurrency": 2}


@pytest.fixture(scope="module")
def server(live_server_factory: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    with live_server_factory("--budget", "seconds=60") as url:  # a loaded machine's workers start late (see test_sched_api)
        yield url


def read(url: str, body: dict) -> list[tuple[str, dict]]:
    with httpx.stream("POST", f"{url}/api/simulate/stream", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        return list(sse(response.iter_lines()))


def test_overlapping_requests_stream_their_steps(server: str) -> None:
    messages = read(server, BODY)
    gpu = [(name, data) for name, data in messages if data.get("run") == "gpu"]
    # Step 1: requests 0 and 1 have arrived. 0 takes 5,024 of the 8,192-token budget, 1 is admitted for the other
    # 3,168 (chunked prefill); 0 has its prompt computed and its one token: it finishes, and the closed loop's
    # request 2 arrives as the step ends. Step 2: 1's last 1,856 tokens, then 2's 5,024 (6,880 in all); both finish.
    # A request's events come at the step of its first token (its lookups as at its first admission), then the
    # GPU's occupancy, a pass's summary once all its requests are done, and last the step itself.
    assert [(n, d["step"] if n == "step" else d.get("seq")) for n, d in gpu] == [
        ("run", None), ("request", 0), ("lookup", 0), ("ttft", 0), ("occupancy", 0), ("step", 1),
        ("request", 1), ("lookup", 1), ("ttft", 1), ("request", 2), ("lookup", 2), ("ttft", 2), ("occupancy", 1),
        ("pass", None), ("done", None), ("step", 2),
    ]
    step1, step2 = (d for n, d in gpu if n == "step")
    assert (step1["scheduled"], step1["admitted"], step1["finished"]) == (
        {"0": 5024, "1": 3168}, [{"seq": 0, "hit_tokens": 0}, {"seq": 1, "hit_tokens": 0}], [0],
    )
    assert (step2["scheduled"], step2["admitted"], step2["finished"]) == ({"1": 1856, "2": 5024}, [{"seq": 2, "hit_tokens": 0}], [1, 2])
    # No CPU tier: a step costs the fixed cost plus its prefill tokens; request 1's TTFT spans both steps.
    c = default_costs()
    dt1, dt2 = c.overhead_ms + 8192 * c.prefill_ms_per_token, c.overhead_ms + 6880 * c.prefill_ms_per_token
    assert (step1["dt_ms"], step2["t_ms"], step2["dt_ms"]) == pytest.approx((dt1, dt1, dt2), abs=0.001)
    ttft = {d["seq"]: d["ttft_ms"] for n, d in gpu if n == "ttft"}
    assert ttft == pytest.approx({0: dt1, 1: dt1 + dt2, 2: dt2}, abs=0.001)
    # Nothing outside the kinds a stepped stream sends (no evictions or loads here: one pass, no CPU tier).
    assert {n for n, _ in messages} == set(STEP_EVENT_KINDS) - {"evict", "load"}


def test_the_stream_says_what_the_json_answer_and_the_ledger_say(server: str, tmp_path: Path) -> None:
    body = {**BODY, "no_cpu": False, "docs": 4, "passes": "forward,forward"}
    messages = read(server, body)
    result = httpx.post(f"{server}/api/simulate", json=body, timeout=120).json()
    ledger = tmp_path / "steps.jsonl"
    cli = CliRunner().invoke(main, ["simulate", "--no-save", "--json", "--docs", "4", "--passes", "forward,forward",
                                    "--concurrency", "2", "--steps", str(ledger)])
    assert cli.exit_code == 0, cli.output
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    for run in result["runs"]:
        name = run["name"]
        # A step event is the ledger's line, with who runs and waits after it (EXTRA) beside it.
        steps = [{k: v for k, v in d.items() if k not in ("type", *EXTRA)} for n, d in messages if n == "step" and d["run"] == name]
        assert steps == [line for line in lines if line["run"] == name]
        ttfts = sorted((d["seq"], d["ttft_ms"], d["source"], d["cpu_hit_tokens"]) for n, d in messages if n == "ttft" and d["run"] == name)
        assert ttfts == [(r["seq"], r["ttft_ms"], r["source"], r["cpu_hit_tokens"]) for r in run["requests"]]
        # A pass's summary adds, for the page's table, its time per output token and output tokens per second.
        summaries = [d["summary"] for n, d in messages if n == "pass" and d["run"] == name]
        assert [{k: v for k, v in p.items() if k not in ("tpot_ms", "output_tokens_per_s")} for p in summaries] == run["passes"]
        assert next(d for n, d in messages if n == "done" and d["run"] == name)["totals"] == run["totals"]


def test_bad_serving_fields_on_the_stream_are_422_before_any_event(server: str) -> None:
    response = httpx.post(f"{server}/api/simulate/stream", json={"concurrency": 2, "rate": 1}, timeout=30)
    assert response.status_code == 422 and "give concurrency or rate, not both" in response.text
    # One request at a time the stream is as before: no step events.
    assert "step" not in {n for n, _ in read(server, {"docs": 2, "passes": "forward", "no_cpu": True})}
