"""The watch's twin under concurrent traffic: requests held from arrival to end as they overlapped on the server
(``app.proxy.overlap_twin``), so its blocks stay the server's, against ``kvscope emulate --kv-events``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import httpx
import pytest
from live_servers import busy, emulator, free_port

Serve = Callable[..., AbstractContextManager[str]]


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))  # the emulator: one token per word


def accounted(url: str, count: int, compared: int) -> dict:
    """The watch once it has accounted for ``count`` requests and compared the tiers after request ``compared``."""
    deadline = time.monotonic() + 20
    while True:
        state = httpx.get(url + "/api/watch/emu").json()
        if len(state["requests"]) >= count and state["divergence"] is not None and state["divergence"]["seq"] == compared:
            return state
        assert time.monotonic() < deadline, "the requests were never accounted for"
        time.sleep(0.05)


def test_the_twin_keeps_the_servers_blocks_when_a_request_runs_beside_another(live_server_factory: Serve) -> None:
    # A 640-token GPU: 40 blocks of 16, 39 usable, numbered 1..39 in the order they are first handed out.
    # X, 300 words (18 full blocks + 12 tokens: 19 blocks), alone: it takes 1..19 and frees them, the partial
    # block 19 to the front, its full blocks tail first: the free queue is [19, 20..39, 18, 17, ..., 1].
    # A, 290 other words for 15 tokens (290 + 14 = 304 tokens: 19 blocks, 18 of them full), takes 19 and 20..37
    # (no eviction) and holds them while it decodes. B, 100 words for 1 token (7 blocks), sent when A's first token came, runs
    # beside A: it takes 38, 39 and X's 18..14 from the front, evicting five of X's blocks. B then A end. The
    # server holds X's 1..13, B's 6 and A's 18 full blocks: 37. A twin that served them one at a time in the order
    # their answers ended (B, then A) would have found B room in the 20 blocks A never held and taken only four of
    # X's blocks for A: 38, one more than the server's. The overlap twin must hold exactly the server's.
    # Speed 0.2: A's 14 decode steps take ~116 ms each, 1.6 s for B to arrive while A runs.
    live, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    with emulator("--kv-events", live, "--kv-events-replay", replay, "--no-cpu-tier", "--gpu-tokens", "640",
                  "--speed", "0.2") as emu:
        with live_server_factory("--upstream", f"emu={emu}", "--kv-events", f"emu={live}",
                                 "--kv-events-replay", f"emu={replay}") as url:
            x = httpx.post(url + "/v1/completions", json={"prompt": words("x", 300), "max_tokens": 1}, timeout=30)
            assert x.status_code == 200
            accounted(url, 1, 0)
            b_done: list[int] = []

            def send_b() -> None:
                answer = httpx.post(url + "/v1/completions", json={"prompt": words("b", 100), "max_tokens": 1}, timeout=30)
                b_done.append(answer.status_code)

            body = {"prompt": words("a", 290), "max_tokens": 15, "stream": True}
            sender = None
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as a:
                for line in a.iter_lines():
                    if sender is None and line.startswith("data: ") and '"text"' in line:
                        sender = threading.Thread(target=send_b)
                        sender.start()
            assert sender is not None
            sender.join(timeout=30)
            assert b_done == [200]
            # B's answer ends first, but the tiers are compared only once A, still running then, is accounted for.
            state = accounted(url, 3, 1)
            steps = httpx.get(emu + "/kvscope/emulator").json()["steps"]
    # Did B run beside A on the server (a step scheduling both)? Emulator seqs: X 0, A 1, B 2.
    if not any({"1", "2"} <= set(s["scheduled"]) for s in steps):
        why = busy()
        if why is None:
            pytest.fail("B did not run beside A on an idle machine")
        pytest.skip(f"{why}: B reached the server after A had ended")
    assert state["media"]["GPU"]["blocks"] == 37
    assert state["twin"]["gpu_blocks"] == 37
    assert state["divergence"]["differ"] == 0 and state["divergence"]["exact"] is True
    assert state["divergence"]["first_parted"] is None
