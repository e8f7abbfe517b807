"""The emulator keeps its promised times: tokens leave when the steps of vLLM's scheduler (the stepped engine) end.

An idle engine starts a step when a request arrives; requests that arrive
while a step runs join the next one, batched under the token budget. Measured
here at the client, over real uvicorn on loopback, with a bare socket and a
streaming httpx client (what live mode uses); the time to the first token is
to the first chunk that carries text.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import httpx
import pytest

from live_servers import busy, emulator, run_async

from app.live import prom
from sim.blocks.request import Request, Units
from sim.costs.model import CostModel
from sim.engine.loop import Engine, TierSpec
from sim.sched.arrivals import Timed
from sim.sched.config import SchedulerConfig
from sim.sched.stepped import SteppedEngine, SteppedRun

pytestmark = pytest.mark.slow


def words(tag: str, count: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


async def raw_first_token_ms(url: str, prompt: str) -> float:
    """The same over a bare socket: the request's bytes prepared before the clock starts, then read until the
    first chunk carrying text. What loopback costs, without an HTTP library's own work on a busy machine."""
    host, port = url.removeprefix("http://").split(":")
    # One token: the request ends with its prefill, so no decode step of it delays the next request's prefill.
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "stream": True}).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        sent = time.perf_counter()
        writer.write(head + body)
        seen = b""
        while b'"text"' not in seen:
            chunk = await reader.read(65536)
            if not chunk:
                raise AssertionError("the stream carried no text")
            seen += chunk
        return (time.perf_counter() - sent) * 1000
    finally:
        writer.close()


async def token_times(client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int) -> list[float]:
    """When each chunk carrying text reached the client (perf_counter seconds: CLOCK_MONOTONIC, the emulator's clock
    too), streaming ``max_tokens`` tokens."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True}
    times = []
    async with client.stream("POST", url + "/v1/completions", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: ") and '"text"' in line:
                times.append(time.perf_counter())
    assert len(times) == max_tokens
    return times


@pytest.mark.parametrize("speed", ["1", "20"])
def test_serial_first_tokens_arrive_when_the_model_says_within_a_millisecond(speed: str) -> None:
    # Distinct prompts of 200..1,320 words, one at a time over a bare socket: nothing queues, so each first
    # token is due at arrival + the model's TTFT / speed, and what the client sees exceeds that only by
    # loopback (sending the request before the server stamps its arrival, and the first chunk back). The
    # emulator's own work (parsing, tokenizing, hashing, the simulator) falls inside the deadline. Rounds of
    # 15 requests, up to five, until one's median error is within 1 ms (the min of medians, as `make bench`
    # reports figures). On a machine with more runnable processes than cores, a process waits for a core for
    # milliseconds and no round may get there: then the test is skipped saying so, never passed.
    with emulator("--no-cpu-tier", "--speed", speed) as url:

        async def run() -> list[float]:
            medians: list[float] = []
            async with httpx.AsyncClient(timeout=60) as client:
                for round_ in range(5):
                    errors = []
                    for i in range(15):
                        measured = await raw_first_token_ms(url, words(f"s{round_}x{i}w", 200 + 80 * i))
                        last = (await client.get(url + "/kvscope/emulator")).json()["requests"][-1]
                        assert last["queued_ms"] == 0
                        assert last["late_ms"] >= 0  # released at or after its deadline, never before
                        errors.append(measured - last["delay_ms"])
                    medians.append(statistics.median(errors))
                    if abs(medians[-1]) < 1.0:
                        break
            return medians

        medians = run_async(run())
    best = min(abs(m) for m in medians)
    if best >= 1.0 and (why := busy()):
        pytest.skip(f"{why}: best median {best:.2f} ms over {len(medians)} rounds")
    assert best < 1.0, medians


def offline(state: dict, arrivals_ms: list[float], prompt_tokens: int, output_tokens: int) -> SteppedRun:
    """The stepped engine alone, on the emulator's tiers, costs and scheduler, with requests of lone blocks arriving
    at ``arrivals_ms`` (model ms): what it predicts for that batch."""
    sched = state["scheduler"]
    engine = Engine("gpu", TierSpec(Units(state["block_size"], state["chunk_size"]), gpu_tokens=state["gpu_tokens"]), CostModel(**state["costs"]))
    config = SchedulerConfig(sched["max_num_batched_tokens"], sched["max_num_seqs"], max_model_len=sched["max_model_len"])
    block, kv = state["block_size"], prompt_tokens + output_tokens - 1
    requests = [
        Request(seq, 1, "live", seq, prompt_tokens, [seq * 10_000 + i for i in range(prompt_tokens // block)],
                -(-kv // block), (prompt_tokens - 1) // block, [], state["chunk_size"], output_tokens=output_tokens)
        for seq in range(len(arrivals_ms))
    ]
    return SteppedEngine(engine, config).run(requests, Timed(tuple(arrivals_ms)))


# The seed fit's step costs (sim.costs.model.default_costs), for the reasoning below: a step costs its fixed part
# plus this much per computed prompt token (decodes add nothing: the seed table cannot tell their cost).
FIXED_MS, PER_TOKEN_MS = 23.2219, 0.111060


@pytest.mark.parametrize("speed", [1, 10])
def test_concurrent_prompts_are_batched_and_their_tokens_leave_at_the_engines_steps(speed: int) -> None:
    # Four prompts of 5,000 distinct words (5,000 tokens) sent at once for 3 tokens each, to an emulator with vLLM's
    # defaults here (an 8,192-token step budget, no CPU tier). The emulator reads and tokenizes the prompts one
    # after the other, so the first runs alone in step 1 (5,000 tokens: 23.2 + 0.111 x 5,000 = 578.5 ms); the
    # others arrive during it and share the steps after it, FCFS under the budget: step 2 decodes request 0 and
    # computes 5,000 + 3,191 prompt tokens (23.2 + 0.111 x 8,191 = 932.9 ms), step 3 decodes two and computes the
    # rest of request 2 and all of request 3 (1,809 + 5,000: 779.4 ms). First tokens come at 578.5, 1,511.4,
    # 2,290.8 and 2,290.8 ms after step 1 began (at speed 1), where one prefill after another would give 578.5,
    # 1,157, 1,735.5 and 2,314: requests 1 and 2 ~30% apart from that.
    # The prediction is the stepped engine's, run here offline with the arrivals the emulator's engine saw. The
    # emulator's schedule must be that prediction (its step ledger exactly, each request's first and last token
    # due within 10% of it), and on the emulator's clock, its tokens released within 10% of it too, then read by
    # the client within 10%. On a machine with more runnable processes than cores the emulator can be slow to
    # read the prompts (they then miss step 1 and do not batch as reasoned) and both processes slow to wake up:
    # those checks are then skipped saying so; the schedule's are not.
    n, prompt_tokens, output_tokens = 4, 5000, 3
    with emulator("--no-cpu-tier", "--speed", str(speed)) as url:

        async def run() -> tuple[list[list[float]], dict, list[tuple[float, float]]]:
            async with httpx.AsyncClient(timeout=120) as client:
                scraped: list[tuple[float, float]] = []
                done = asyncio.Event()

                async def scrape() -> None:
                    while not done.is_set():
                        samples = prom.parse((await client.get(url + "/metrics")).text)
                        scraped.append((prom.total(samples, ("vllm:num_requests_running",)), prom.total(samples, ("vllm:num_requests_waiting",))))
                        await asyncio.sleep(0.002)

                scraper = asyncio.create_task(scrape())
                times = await asyncio.gather(
                    *(token_times(client, url, words(f"b{speed}c{k}w", prompt_tokens), output_tokens) for k in range(n))
                )
                done.set()
                await scraper
                state = (await client.get(url + "/kvscope/emulator")).json()
            return list(times), state, scraped

        times, state, scraped = run_async(run())
    records = {r["seq"]: r for r in state["requests"][-n:]}
    arrivals = sorted((r["engine_arrival_ms"], seq) for seq, r in records.items())
    order = [seq for _, seq in arrivals]  # offline, request i is the emulator's order[i]
    predicted = offline(state, [a for a, _ in arrivals], prompt_tokens, output_tokens)
    epoch, ledger = state["epoch_s"], state["steps"]  # this emulator served these four requests only
    # The schedule: the emulator's steps are the offline run's, decision for decision.
    assert [{order.index(int(k)): v for k, v in s["scheduled"].items()} for s in ledger] == [
        step.scheduled for step in predicted.steps
    ]
    assert [(s["running"], s["waiting"]) for s in ledger] == [(s.running, s.waiting) for s in predicted.steps]
    ended = {seq: s for s in ledger for seq in s["finished"]}
    late, client_late = [], []
    # Which client stream was which request: records carry no text, so streams are matched by their first
    # tokens' order (FCFS: the arrival order; requests 2 and 3 share their steps, hence their times).
    by_first = sorted(times, key=lambda t: t[0])
    for rank, (flight, seq) in enumerate(zip(predicted.flights, order)):
        r = records[seq]
        want = (flight.ttft_ms / speed, flight.e2e_ms / speed)
        arrived_ms = r["engine_arrival_ms"] / speed  # wall ms since the emulator's epoch
        due = (r["due_ms"] - arrived_ms, ended[seq]["end_ms"] - arrived_ms)
        assert due == pytest.approx(want, rel=0.10), (rank, due, want)
        released = (r["due_ms"] + r["late_ms"] - arrived_ms, ended[seq]["released_ms"] - arrived_ms)
        if released != pytest.approx(want, rel=0.10):
            late.append((rank, released, want))
        got = by_first[rank]
        arrived = epoch + arrived_ms / 1000
        client = ((got[0] - arrived) * 1000, (got[-1] - arrived) * 1000)
        if client != pytest.approx(want, rel=0.10):
            client_late.append((rank, client, want))
    # /metrics' scheduler gauges, scraped over and over while the requests ran, only ever showed a step's own
    # (running, waiting), and in the steps' order (a gauge changes when a step ends).
    seen = [pair for i, pair in enumerate(scraped) if i == 0 or pair != scraped[i - 1]]
    steps = [(0.0, 0.0)] + [(float(s["running"]), float(s["waiting"])) for s in ledger]
    it = iter(steps)
    assert all(any(pair == step for step in it) for pair in seen), (seen, steps)
    if len(seen) < 2 and (why := busy()):  # the scrapes did not come between the steps' ends
        pytest.skip(f"{why}: /metrics scraped {len(scraped)} times, only ever idle")
    assert len(seen) >= 2  # it saw the batch move
    # The batch as reasoned above, when the prompts were read in time for it: first tokens at the reasoned
    # times after step 1 began (within 0.5%: the costs above are rounded), not one prefill apart.
    shape = [{order.index(int(k)): v for k, v in s["scheduled"].items()} for s in ledger[:3]]
    if shape != [{0: 5000}, {0: 1, 1: 5000, 2: 3191}, {0: 1, 1: 1, 2: 1809, 3: 5000}]:
        why = busy()
        if why is None:
            pytest.fail(f"the prompts did not batch as reasoned on an idle machine: {shape}")
        pytest.skip(f"{why}: the emulator read the prompts too slowly to batch them in step 2: {shape}")
    step1 = predicted.steps[0].t_ms
    firsts = [f.arrival_ms + f.ttft_ms - step1 for f in predicted.flights]
    s1, s2, s3 = (FIXED_MS + PER_TOKEN_MS * t for t in (5000, 8191, 6809))
    assert firsts == pytest.approx([s1, s1 + s2, s1 + s2 + s3, s1 + s2 + s3], rel=0.005)
    for what, off in (("released", late), ("client", client_late)):
        if off and (why := busy()):
            pytest.skip(f"{why}: {what} {off} (ms measured, predicted)")
        assert not off, (what, off)
