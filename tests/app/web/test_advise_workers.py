"""The advisor's searches in the web's workers over a real uvicorn: within the search budget, in the same bounded pool
as the simulations (503 + Retry-After when it is full), stopped at the search deadline, and the page's progress read
from the worker while the search runs."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from live_servers import serve_process

# The sidebar's seed lab, GPU and CPU bought: 438 candidates, a few seconds of simulation.
PANEL = {"advise_p50_ms": "100", "advise_buy_gpu": "on", "advise_buy_cpu": "on"}
API = {"p50_ms": 100, "buy": ["gpu", "cpu"]}
HEAVY = {"docs": 200, "doc_tokens": 10_000, "passes": "forward,forward,reverse"}  # ~1 s, as in test_liveness


def _work(url: str) -> dict[str, int]:
    return httpx.get(f"{url}/healthz", timeout=5).json()["work"]


def test_a_page_search_runs_in_a_worker_and_the_page_sees_its_progress() -> None:
    with serve_process() as (url, _):
        started = httpx.post(f"{url}/ui/analysis/advise", data=PANEL, timeout=30)
        assert started.status_code == 200, started.text[:300]
        job = re.search(r'hx-get="(/ui/analysis/advise/[^"]+)"', started.text)
        assert job is not None
        assert _work(url)["running"] == 1  # the pool's count: the search is one of its calls
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            poll = httpx.get(f"{url}{job.group(1)}", timeout=30)
            assert poll.status_code == 200
            if 'id="advise-progress"' not in poll.text:
                break
            if counted := re.search(r"([\d,]+) of ([\d,]+) candidates simulated", poll.text):
                seen.append((int(counted.group(1).replace(",", "")), int(counted.group(2).replace(",", ""))))
            time.sleep(0.1)
        assert "advise-table" in poll.text, poll.text[:500]  # the answer replaced the progress
        # Progress written by the worker and read by the server while the search ran: part-way, out of 222: 6 GPU
        # sizes x (no CPU tier + 6 CPU sizes x 6 CPU policies), under the scenario's own backend (lmcache) alone.
        assert any(0 < done < total == 6 * (1 + 6 * 6) for done, total in seen), seen
        assert [d for d, _ in seen] == sorted(d for d, _ in seen)
        assert _work(url)["completed"] == 1 and _work(url)["running"] == 0


def test_a_page_search_waits_its_turn_in_the_worker_pool() -> None:
    with serve_process("--budget", "concurrency=1,queue=0,seconds=60") as (url, _):
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(lambda: httpx.post(f"{url}/api/simulate", json=HEAVY, timeout=60))
            deadline = time.monotonic() + 10
            while _work(url)["running"] < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            refused = httpx.post(f"{url}/ui/analysis/advise", data=PANEL, timeout=30)
            assert held.result().status_code == 200
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) >= 1
        assert "1 simulations are running or waiting" in refused.text


def test_an_api_search_over_the_search_budget_is_422_at_points() -> None:
    # 222 candidates (the scenario's own backend) of ~10,000 block steps each, before any shrinking: far over 100,000.
    with serve_process("--budget", "search_work=1e5") as (url, _):
        response = httpx.post(f"{url}/api/advise", json=API, timeout=60)
        assert response.status_code == 422
        error = response.json()["detail"][0]
        assert error["loc"] == ["body", "points"]
        assert "the limit here is 100,000 block steps" in error["msg"]


def test_an_api_search_past_the_search_deadline_answers_503() -> None:
    with serve_process("--budget", "search_seconds=1") as (url, _):
        start = time.monotonic()
        response = httpx.post(f"{url}/api/advise", json=API, timeout=60)
        assert response.status_code == 503
        assert "the limit here is 1 s" in response.json()["detail"]
        assert time.monotonic() - start < 1 + 3  # the deadline, the worker's grace and a margin
        assert _work(url)["timed_out"] == 1


def test_sigterm_stops_the_server_while_a_page_search_runs() -> None:
    # The search is a task of the server's event loop awaiting a worker process: neither may hold the shutdown.
    import signal

    from app.cli.serve import GRACEFUL_SHUTDOWN_S

    with serve_process() as (url, proc):
        assert httpx.post(f"{url}/ui/analysis/advise", data=PANEL, timeout=30).status_code == 200
        assert _work(url)["running"] == 1
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=GRACEFUL_SHUTDOWN_S + 10)
        assert time.monotonic() - start < GRACEFUL_SHUTDOWN_S + 3
