"""The emulator keeps its promised times: first tokens due at the model's TTFT / speed, prefills one at a time.

A request's prefill starts when it arrives or when the prefill before it ends,
whichever is later; its first token is due at that start + its modelled TTFT /
speed. Measured here at the client, over real uvicorn on loopback, with a
streaming httpx client (what live mode uses); the time to the first token is
from sending the request to receiving the first chunk that carries text.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import httpx
import pytest

from live_servers import busy, emulator, run_async

pytestmark = pytest.mark.slow


def words(tag: str, count: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


async def raw_first_token_ms(url: str, prompt: str) -> float:
    """The same over a bare socket: the request's bytes prepared before the clock starts, then read until the
    first chunk carrying text. What loopback costs, without an HTTP library's own work on a busy machine."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"prompt": prompt, "max_tokens": 2, "stream": True}).encode()
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


async def first_token_ms(client: httpx.AsyncClient, url: str, prompt: str) -> float:
    body = {"prompt": prompt, "max_tokens": 2, "stream": True}
    sent = time.perf_counter()
    async with client.stream("POST", url + "/v1/completions", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: ") and '"text"' in line:
                return (time.perf_counter() - sent) * 1000
    raise AssertionError("the stream carried no text")


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


@pytest.mark.parametrize("concurrent", [2, 4])
def test_concurrent_prefills_are_served_one_after_another(concurrent: int) -> None:
    # N prompts of 5,000 distinct words sent at once to an emulator at speed 1: one prefill runs at a time (the
    # emulator does not batch), so the k-th first token lands after k prefills, ~k x one prefill's delay (the
    # model's ~579 ms, read from the emulator's records below, not restated here), which dwarfs the few ms by
    # which the requests' arrivals differ.
    with emulator("--no-cpu-tier") as url:

        async def run() -> tuple[list[float], list[dict]]:
            async with httpx.AsyncClient(timeout=60) as client:
                ttfts = await asyncio.gather(
                    *(first_token_ms(client, url, words(f"c{k}w", 5000)) for k in range(concurrent))
                )
                records = (await client.get(url + "/kvscope/emulator")).json()["requests"][-concurrent:]
            return sorted(ttfts), records

        ttfts, records = run_async(run())
    delays = {r["delay_ms"] for r in records}
    assert len(delays) == 1  # equal prompts, equal model TTFTs
    one = delays.pop()
    # The schedule itself, exactly: the first prefill starts when its request arrives; each later one starts
    # when the one before it is due (its first token sent), and is due one delay later.
    by_start = sorted(records, key=lambda r: r["start_ms"])
    assert by_start[0]["queued_ms"] == 0
    for before, after in zip(by_start, by_start[1:]):
        assert after["start_ms"] == pytest.approx(before["due_ms"], abs=0.002)
        assert after["queued_ms"] > 0
    for r in by_start:
        assert r["due_ms"] == pytest.approx(r["start_ms"] + one, abs=0.002)
        assert r["late_ms"] >= 0
    # At the client: k x delay, give or take the arrivals' spread and loopback HTTP. The arrivals spread by the
    # time the emulator takes to read and tokenize the prompts before each (16 ms for four of 5,000 new words on
    # an idle core), which a machine with more runnable processes than cores stretches past 8% of a prefill:
    # then the test says so and skips.
    off = [(k, ttft) for k, ttft in enumerate(ttfts, start=1) if ttft != pytest.approx(k * one, abs=0.08 * one)]
    if off and (why := busy()):
        pytest.skip(f"{why}: first tokens {ttfts} ms against {one} ms a prefill")
    assert not off, (ttfts, one)
