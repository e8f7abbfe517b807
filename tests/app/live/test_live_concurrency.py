"""``live --concurrency N``: each request's measured TTFT beside vLLM's scheduler (the stepped engine) at the times the
requests were sent, against real emulators on loopback."""

from __future__ import annotations

import pytest
from live_servers import busy, emulator, run_async, run_kvscope

from app.live.session import LiveOptions, LiveRun
from app.live.targets import parse_targets
from sim.calibration.calibrate import seed_scenario
from sim.costs.model import default_costs
from sim.engine.events import Error, Event, Measured, PassDone, Ttft

pytestmark = pytest.mark.slow


async def _events(live: LiveRun) -> list[Event]:
    return [event async for event in live.events()]


def test_live_at_concurrency_2_predicts_each_requests_ttft_within_10_percent() -> None:
    # The seed lab cut to 4 documents (5,024-token prompts, 3 passes: 12 requests a target), two in flight, against
    # "vLLM alone" and "vLLM + LMCache" emulators at speed 1. Requests 0 and 1 leave together; the emulator reads
    # them a few ms apart, so request 0 runs alone in its first step (a lone prefill: 23.2 + 0.111 x 5,024 =
    # 581 ms by the seed fit) and request 1 shares the next with request 0's decode: its TTFT is about two
    # prefills, ~1,160 ms, where the sequential engine (the shadow at concurrency 1) predicts 581 for it. Each
    # request's TTFT as the client measured it must be within 10% of the stepped engine's prediction at the times
    # the requests were sent. The recomputed prompts' (hundreds of ms) always; the GPU-served ones' (~25-50 ms,
    # where 10% is a few ms) unless the machine has more runnable processes than cores: both the emulator and
    # the client then wait for a core for tens of ms at a time, and that check is skipped saying so.
    scenario = seed_scenario().replace(docs=4)
    with emulator("--no-cpu-tier") as gpu_url, emulator("--cpu-gb", "1.5") as cpu_url:
        targets = parse_targets([f"gpu={gpu_url}", f"gpu+cpu={cpu_url}"])
        live = LiveRun(scenario, targets, LiveOptions(concurrency=2, max_tokens=4))
        events = run_async(_events(live))
    assert not [e for e in events if isinstance(e, Error)], live.failed
    measured = {(e.run, e.seq): e.ttft_ms for e in events if isinstance(e, Measured)}
    predicted = {(e.run, e.seq): e.ttft_ms for e in events if isinstance(e, Ttft)}
    assert len(measured) == len(predicted) == 24
    # The predictions come after the measurements (the stepped engine needs every send time), before the passes.
    kinds = [type(e).__name__ for e in events if e.run == "gpu"]
    assert kinds.index("Ttft") > max(i for i, k in enumerate(kinds) if k == "Measured")
    assert kinds.index("PassDone") > max(i for i, k in enumerate(kinds) if k == "Ttft")
    lone = default_costs().overhead_ms + default_costs().prefill_ms_per_token * 5024
    assert predicted[("gpu", 0)] == pytest.approx(lone, rel=0.01)
    assert predicted[("gpu", 1)] > 1.7 * lone  # queued behind request 0's prefill: the overlap is predicted
    off = {k: (measured[k], round(predicted[k], 1)) for k in measured if measured[k] != pytest.approx(predicted[k], rel=0.10)}
    long = [k for k in measured if predicted[k] > 0.5 * lone]
    # Pass 1's four prompts on each target: four documents (20,096 tokens) fit the 21,504 the GPU holds, so
    # passes 2 and 3 hit it.
    assert len(long) == 8 and not [k for k in long if k in off], off
    if off and (why := busy()):
        pytest.skip(f"{why}: {off} (measured, predicted ms)")
    assert not off
    # The pass summaries carry the stepped prediction too.
    summaries = [e.summary for e in events if isinstance(e, PassDone) and e.run == "gpu"]
    assert [s["pass"] for s in summaries] == [1, 2, 3]
    first = sorted(predicted[("gpu", seq)] for seq in range(4))
    assert summaries[0]["predicted"]["p50_ms"] == pytest.approx((first[1] + first[2]) / 2, abs=0.01)


def test_live_cli_at_concurrency_2_prints_the_stepped_prediction() -> None:
    # The same through the command, two documents read once at speed 10: request 0 is a lone prefill (58.1 ms),
    # request 1, sent beside it, waits for that step and then takes its own: ~116 ms from its send, less by however
    # late the client sent it. The pass's predicted mean is the stepped engine's, (58.1 + ~116) / 2 ~ 87 ms, where
    # one at a time predicts 58.1: above 1.1 x 58.1 unless the second request left more than ~47 ms after the first.
    with emulator("--no-cpu-tier", "--speed", "10") as url:
        result = run_kvscope(
            ["live", "--target", f"gpu={url}", "--preset", "seed-lab", "--docs", "2", "--passes", "forward",
             "--concurrency", "2", "--json", "--no-save"],
            timeout_s=120,
        )
    assert result.returncode == 0, result.stderr
    import json

    report = json.loads(result.stdout)
    (run,) = report["predicted"]["runs"]
    lone = (default_costs().overhead_ms + default_costs().prefill_ms_per_token * 5024) / 10
    assert run["passes"][0]["mean_ms"] > 1.1 * lone
