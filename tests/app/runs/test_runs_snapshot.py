"""A run deleted while it is read (an export, a diff) over a real uvicorn: the reader gets the run whole, never a 500.

Each route read the run in several queries (the route looked it up, then the export looked it up again, then its
records); a delete landing between two of them failed the second with "no run N" (a 500). The store here deletes
the run from another thread right after the first look-up of it, so the delete lands between the two every time,
not by luck; the reads are one snapshot now, so they see the run as it was.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from live_servers import threaded_server

from app.runs.store import MEMORY, NewRun, Run, RunStore
from app.web.app import make_app
from app.web.context import Web

REQUESTS = 7  # records of each run saved here
DELETE_WAIT_S = 1.0  # how long the first look-up waits for the delete it started (in memory it waits for the read)


class DeletesWhenRead(RunStore):
    """A store that, on the first look-up of run ``target``, deletes it from another thread before answering."""

    target: int | None = None
    landed: bool | None = None  # whether the delete had committed when the look-up answered

    def get(self, run_id: int) -> Run:
        run = super().get(run_id)
        if run_id == self.target:
            self.target = None
            deleter = threading.Thread(target=self.delete, args=(run_id,))
            deleter.start()
            deleter.join(DELETE_WAIT_S)
            self.landed = not deleter.is_alive()
        return run


@pytest.fixture(scope="module", params=["file", "memory"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, DeletesWhenRead]]:
    path = tmp_path_factory.mktemp("runs") / "runs.db" if request.param == "file" else MEMORY
    store = DeletesWhenRead(path)
    with threaded_server(make_app(Web(runs=store))) as url:
        yield url, store


def _measured_run(store: RunStore, name: str, ttft_ms: float) -> int:
    rows = [
        {"config": "gpu", "pass": 1, "order": "forward", "seq": i, "doc": i, "prompt_tokens": 100, "ttft_ms": ttft_ms}
        for i in range(REQUESTS)
    ]
    return store.save(NewRun("import", name=name), records=rows)


def _gone(url: str, run_id: int) -> bool:
    """Whether the delete has happened by now (in memory it waits for the read's end: a moment after the answer)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if httpx.get(f"{url}/api/runs/{run_id}", timeout=10).status_code == 404:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "json"])
def test_an_export_reads_the_run_whole_when_it_is_deleted_meanwhile(served: tuple[str, DeletesWhenRead], fmt: str) -> None:
    url, store = served
    run_id = _measured_run(store, f"export {fmt}", 5.0)
    store.target = run_id
    response = httpx.get(f"{url}/api/runs/{run_id}/export", params={"format": fmt}, timeout=30)
    assert response.status_code == 200, response.text[:300]
    # Every one of its requests: a header and REQUESTS rows (csv), REQUESTS lines (jsonl), REQUESTS records (json).
    if fmt == "csv":
        assert len(response.text.splitlines()) == 1 + REQUESTS
    elif fmt == "jsonl":
        assert [json.loads(line)["seq"] for line in response.text.splitlines()] == list(range(REQUESTS))
    else:
        body: dict[str, Any] = response.json()
        assert body["id"] == run_id and len(body["records"]) == REQUESTS
    # On a file the delete committed between the two look-ups (and the snapshot kept the run); in memory it waited
    # for the read to end. Either way it happened.
    assert store.landed is (store.path != MEMORY)
    assert _gone(url, run_id)


def test_a_diff_reads_both_runs_whole_when_one_is_deleted_meanwhile(served: tuple[str, DeletesWhenRead]) -> None:
    url, store = served
    a, b = _measured_run(store, "a", 5.0), _measured_run(store, "b", 10.0)
    store.target = b
    response = httpx.get(f"{url}/api/runs/{a}/diff/{b}", timeout=30)
    assert response.status_code == 200, response.text[:300]
    [cell] = response.json()["passes"]
    # One cell (gpu, pass 1) of REQUESTS requests each, p50 5 ms in a and 10 ms in b: a change of 10 / 5 = 2.
    assert cell["requests"] == {"a": REQUESTS, "b": REQUESTS, "change": 1.0}
    assert cell["p50_ms"]["change"] == 2.0
    assert _gone(url, b)


def test_a_run_deleted_before_it_is_read_is_404(served: tuple[str, DeletesWhenRead]) -> None:
    url, store = served
    a, b = _measured_run(store, "a", 5.0), _measured_run(store, "b", 5.0)
    store.delete(b)
    assert httpx.get(f"{url}/api/runs/{b}/export", timeout=10).status_code == 404
    assert httpx.get(f"{url}/api/runs/{a}/diff/{b}", timeout=10).json() == {"detail": f"no run {b}"}
