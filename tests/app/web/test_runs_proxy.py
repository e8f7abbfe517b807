"""A watched upstream's proxied requests are kept as a ``proxy`` run as they are measured: a server killed with
SIGKILL leaves every request the watch had measured, and the page replays the kept run in the watch panel from its
stored events (no upstream needed)."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from live_servers import emulator, free_port, serve_process
from playwright.sync_api import Page, expect

from app.runs.store import RunStore

Serve = Callable[..., AbstractContextManager[str]]


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.browser
def test_proxied_requests_are_kept_as_they_are_measured_and_replay_in_the_watch_panel(
    page: Page, tmp_path: Path, live_server_factory: Serve
) -> None:
    db = tmp_path / "runs.db"
    live, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    with emulator("--kv-events", live, "--kv-events-replay", replay, "--speed", "50", "--gpu-tokens", "1024") as emu, \
            serve_process("--db", str(db), "--upstream", f"emu={emu}", "--kv-events", f"emu={live}",
                          "--kv-events-replay", f"emu={replay}") as (url, proc):
        for i in range(3):
            with httpx.stream("POST", url + "/v1/completions", json={"prompt": words(f"p{i}x", 160), "max_tokens": 2,
                                                                     "stream": True}) as r:
                r.read()
        # The watch lists a request once it is measured, after its record was committed.
        wait_for(lambda: len(httpx.get(url + "/api/watch/emu").json()["requests"]) == 3)
        seen = httpx.get(url + "/api/watch/emu").json()["requests"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = RunStore(db)
    (run,) = store.list()
    # Killed: nobody finished it, and opening the database found its process gone.
    assert (run.kind, run.status, run.record_count) == ("proxy", "interrupted", 3)
    kept = store.records(run.id)
    # Each request as the watch measured it: the same TTFTs in the same order, named by the upstream.
    assert [r["ttft_ms"] for r in kept] == [r["ttft_ms"] for r in sorted(seen, key=lambda r: r["seq"])]
    assert {r["target"] for r in kept} == {"emu"}
    events = [e for batch in store.events(run.id) for e in batch]
    assert [e["type"] for e in events].count("measured") == 3
    assert any(e["type"] == "store" for e in events)  # the server's KV events were kept too
    store.close()

    with live_server_factory("--db", str(db)) as base:  # no upstream: the run replays from the database alone
        page.goto(f"{base}/?run={run.id}")
        view = page.locator("#watch-emu")
        expect(view.locator("[data-role=kept-watch-run]")).to_have_text(
            f"Kept run {run.id} (proxy recording), replayed from its stored events.")
        expect(view.locator("[data-role=status]")).to_contain_text(f"of kept run {run.id}", timeout=15_000)
        for seq in (0, 1, 2):  # proxied requests are numbered from 0
            expect(page.locator(f"#watch-emu-req-{seq}")).to_be_attached()
        # Measured and the twin's predicted TTFT: one point per kept request each.
        assert view.locator('[data-role="chart"]').evaluate("d => d.data.map(t => t.x.length)") == [3, 3]
