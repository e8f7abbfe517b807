"""The advisor under load: an idle server's answer that fails at the trace's timestamps, and the answer that meets,
derived by hand; the highest rate each candidate sustains; GPU sizes from the working set in flight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.advise import command
from sim.advise.candidate import Candidate, Target
from sim.advise.load import RATE_PRECISION, SEARCH_EVALUATIONS, highest_rate
from sim.advise.prices import Deployment
from sim.advise.search import Space, advise, sustained_all
from sim.advise.workloads import TraceWorkload
from sim.costs.model import default_costs
from sim.sched.serving import MAX_RATE_PER_S, Serving

TARGET = Target(p90_ms=500)
QWEN_BYTES = 28_672


def pair(tmp_path: Path, gap_ms: int) -> str:
    # Two Mooncake requests of 4 hash ids (2,048 tokens, blocks of 512), 10 output tokens each, distinct prefixes.
    path = tmp_path / f"pair{gap_ms}.jsonl"
    path.write_text(
        json.dumps({"timestamp": 0, "input_length": 2048, "output_length": 10, "hash_ids": [0, 1, 2, 3]}) + "\n"
        + json.dumps({"timestamp": gap_ms, "input_length": 2048, "output_length": 10, "hash_ids": [4, 5, 6, 7]}) + "\n"
    )
    return str(path)


def workload(path: str, timed: bool) -> TraceWorkload:
    return TraceWorkload(path, "qwen2.5-1.5b", QWEN_BYTES, None, 1, serving=Serving() if timed else None,
                         speedup=1.0 if timed else None)


def test_the_idle_answer_fails_at_the_timestamps_and_the_new_one_meets(tmp_path: Path) -> None:
    c = default_costs()
    oh, p = c.overhead_ms, c.prefill_ms_per_token
    path = pair(tmp_path, 0)
    # Idle server (one request at a time): each request computes its 2,048 tokens alone: TTFT = oh + 2,048p, ~250.7 ms
    # with the fitted constants, under 500. The smallest GPU holds one request: its prompt and the KV of 9 generated
    # tokens, 2,057 tokens = 5 blocks of 512, plus the null block: 6 x 512 = 3,072 tokens.
    idle = advise(workload(path, False), TARGET, Space(buy=("gpu",)), Deployment(), None)
    assert idle.meets[0]["config"]["gpu_tokens"] == 3_072
    assert idle.meets[0]["p90_ms"] == pytest.approx(oh + 2048 * p, abs=1e-3)
    assert any(w.startswith("sized for one request at a time: 3,072 GPU tokens") for w in idle.warnings)
    # At the timestamps both arrive at 0. On 3,072 tokens (5 usable blocks) the first takes 4 blocks for its prompt,
    # and the second cannot be admitted (vLLM reserves its whole prompt, 4 blocks, and 1 is free) until the first
    # ends: its prefill step (oh + 2,048p), then 9 decode steps of oh each (the seed fit has no decode cost); then the
    # second's own step. TTFTs x = oh + 2,048p and y = 11 oh + 4,096p; p90 = x + 0.9 (y - x) = 10 oh + 3,891.2p, ~664 ms.
    loaded = workload(path, True)
    failing = loaded.evaluate(Candidate(3_072), None)
    assert failing.p90_ms == pytest.approx(10 * oh + 3891.2 * p, abs=1e-3)
    assert failing.p90_ms > TARGET.p90_ms
    # Held together the two need 2 x 5 blocks + the null block = 5,632 tokens: the working set in flight, and the
    # search's smallest GPU. Both prefill in one step (4,096 tokens within the 8,192 budget): TTFT oh + 4,096p each,
    # ~478.1 ms, under 500.
    assert loaded.working_set_tokens == 5_632
    answer = advise(loaded, TARGET, Space(buy=("gpu",)), Deployment(), None)
    best = answer.meets[0]
    assert best["config"]["gpu_tokens"] == 5_632
    assert best["p90_ms"] == pytest.approx(oh + 4096 * p, abs=1e-3) and best["p90_ms"] <= TARGET.p90_ms
    assert answer.load["working_set_tokens"] == 5_632
    assert best["sustained_per_s"] is None  # it meets with both at once: at any rate
    assert not any(w.startswith("sized for one request") for w in answer.warnings)


def test_the_highest_rate_each_candidate_sustains(tmp_path: Path) -> None:
    c = default_costs()
    oh, p = c.overhead_ms, c.prefill_ms_per_token
    # The same two requests g ms apart. On 3,072 tokens the second waits for the first's end (10 oh + 2,048p) when it
    # comes before it: y = 11 oh + 4,096p - g, x = oh + 2,048p alone. p90 = x + 0.9 (y - x) <= 500 holds while
    # g >= g* = 10 oh + 2,048p - (500 - x) / 0.9, ~182.6 ms: two requests g* apart are 1,000 / g* ~5.48 requests/s.
    x = oh + 2048 * p
    g_star = 10 * oh + 2048 * p - (TARGET.p90_ms - x) / 0.9
    loaded = workload(pair(tmp_path, 1000), True)
    assert loaded.rate_per_s == pytest.approx(1.0)  # the trace's own: 2 requests 1 s apart
    small, large = sustained_all(loaded, [Candidate(3_072), Candidate(5_632)], TARGET)
    assert small is not None
    assert 1000 / g_star * (1 - RATE_PRECISION) <= small <= 1000 / g_star
    assert large is None  # both in one step even when they come together


def test_under_load_no_gpu_size_is_one_prompt() -> None:
    # The seed lab at 1 request/s: a prompt holds 314 blocks (5,024 tokens; 5,040 with the null block); the search starts at
    # the working set in flight, above one prompt, and every row names the rate it sustains.
    result = CliRunner().invoke(command, ["--preset", "seed-lab", "--no-cpu", "--p90-ms", "2000", "--rate", "1",
                                          "--workers", "1", "--json", "--top", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    ws = data["load"]["working_set_tokens"]
    assert ws > 5_040 and (ws // 16 - 1) % 314 == 0  # whole requests' blocks (314 each) and the null block
    assert data["load"]["rate_per_s"] == 1
    assert all(m["config"]["gpu_tokens"] >= ws for m in data["meets"])
    assert all("sustained_per_s" in m for m in data["meets"])
    assert data["meets"][0]["sustained_per_s"] is None or data["meets"][0]["sustained_per_s"] >= 1 * (1 - RATE_PRECISION)


@pytest.mark.parametrize("start", [0.01, 1.0, 3.7, 50.0])
def test_the_rate_search_finds_the_threshold_from_below_or_above(start: float) -> None:
    # A figure that meets up to 3.7 requests/s and not all at once: from any start the answer is the last rate found
    # meeting, within 1% under 3.7, whichever way the search had to go.
    asked: list[float | None] = []

    def meets(rate: float | None) -> bool:
        asked.append(rate)
        return rate is not None and rate <= 3.7

    found = highest_rate(meets, start)
    assert found is not None and 3.7 * (1 - RATE_PRECISION) <= found <= 3.7
    assert len(asked) <= SEARCH_EVALUATIONS
    assert len(set(asked)) == len(asked)  # no rate is asked twice


def test_the_rate_search_bounds() -> None:
    assert highest_rate(lambda rate: True, 1.0) is None  # meets with all at once: any rate
    assert highest_rate(lambda rate: False, 1.0) == 0.0  # not even at the floor
    # Meeting at every rate but not all at once: doubled from 1/s up to the limit, 100,000/s: 2**16 = 65,536 is the
    # last rate tried whose double (131,072) passes it.
    assert MAX_RATE_PER_S == 100_000
    assert highest_rate(lambda rate: rate is not None, 1.0) == 65_536


def test_a_deployment_too_small_for_the_working_set_says_so(tmp_path: Path) -> None:
    # 80 GiB x 0.9 - 71.9 GiB of weights leaves 0.1 GiB: 3,744 tokens of 28,672 B, room for one request of the pair
    # (3,072 tokens with the null block) but not for the two held together (5,632): idle it sizes, under load it is
    # refused naming the working set.
    path = pair(tmp_path, 0)
    small = Deployment(weights_gib=71.9)
    assert advise(workload(path, False), TARGET, Space(buy=("gpu",)), small, None).meets[0]["config"]["gpu_tokens"] == 3_072
    with pytest.raises(ValueError, match=r"less than the requests in flight hold at this load \(5,632 tokens"):
        advise(workload(path, True), TARGET, Space(buy=("gpu",)), small, None)
