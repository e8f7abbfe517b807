"""``kvscope watch`` keeps its KV events as a ``watch`` run, committed each second: exported as JSONL they are the
``--record`` file line for line, a watch killed with SIGKILL leaves a prefix of them, whole, and the page plays a
kept watch in the watch panel to the state the watch ended with."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from app.runs.store import RunStore
from live_servers import KVSCOPE, ROOT, emulator, free_port


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}w{i}" for i in range(n))


def watch_while_prompting(tmp_path: Path, db: Path, kill_after_s: float | None) -> tuple[subprocess.Popen[str], Path]:
    live = f"tcp://127.0.0.1:{free_port()}"
    record = tmp_path / "events.jsonl"
    with emulator("--kv-events", live, "--speed", "100") as url:
        watch = subprocess.Popen(
            [*KVSCOPE, "watch", "--kv-events", live, "--seconds", "4", "--record", str(record), "--db", str(db),
             "--json"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        started = time.monotonic()
        n = 0
        while watch.poll() is None and time.monotonic() - started < 20:
            # A new 64-token prompt each time: 4 new GPU blocks, so every prompt brings KV events.
            httpx.post(url + "/v1/completions", json={"prompt": words(f"p{n}", 64), "max_tokens": 1}).raise_for_status()
            n += 1
            time.sleep(0.1)
            if kill_after_s is not None and time.monotonic() - started >= kill_after_s:
                os.kill(watch.pid, signal.SIGKILL)
                break
        watch.wait(timeout=20)
    return watch, record


def test_a_watch_is_kept_as_its_recording(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    watch, record = watch_while_prompting(tmp_path, db, None)
    err = watch.stderr.read() if watch.stderr else ""
    assert watch.returncode == 0, err
    assert "kept as run 1 (kvscope runs show 1)" in err
    out = tmp_path / "kept.jsonl"
    exported = subprocess.run([*KVSCOPE, "runs", "--db", str(db), "export", "1", "--format", "jsonl", "--out", str(out)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert exported.returncode == 0, exported.stderr
    # Line for line what --record wrote (the same Recorder wrote both).
    assert record.read_text() and out.read_text() == record.read_text()
    (run,) = json.loads(subprocess.run([*KVSCOPE, "runs", "--db", str(db), "list", "--json"], cwd=ROOT,
                                       capture_output=True, text=True, timeout=60).stdout)
    assert (run["kind"], run["status"], run["records"]) == ("watch", "done", len(record.read_text().splitlines()))
    assert run["summary"]["events"] == run["records"]


def test_a_watch_killed_mid_way_leaves_whole_seconds_of_events(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    watch, record = watch_while_prompting(tmp_path, db, kill_after_s=2.5)
    assert watch.returncode == -signal.SIGKILL
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = RunStore(db)
    (run,) = store.list()
    kept = [json.dumps(r, separators=(",", ":")) for r in store.records(run.id)]
    recorded = record.read_text().splitlines()
    # Committed once a second: after 2.5 s at least one commit is in, and what is kept is the recording's start.
    assert 0 < len(kept) <= len(recorded) and kept == recorded[: len(kept)]
    assert run.status == "interrupted"  # nobody finished it, and opening the database found its process gone


@pytest.mark.browser
def test_a_kept_watch_replays_in_the_watch_panel(page: Page, tmp_path: Path, live_server_factory) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "runs.db"
    watch, _ = watch_while_prompting(tmp_path, db, None)
    out = watch.stdout.read() if watch.stdout else ""
    assert watch.returncode == 0
    gpu = json.loads(out)["media"]["GPU"]  # what the watch held at its end, by its own summary
    with live_server_factory("--db", str(db)) as base:
        page.goto(f"{base}/?run=1")
        view = page.locator("#watch-watch")
        expect(view.locator("[data-role=kept-watch-run]")).to_have_text("Kept run 1 (kvscope watch), replayed from its stored events.")
        expect(page).to_have_url(f"{base}/live?run=1")  # the link opens the Live & Watch view
        expect(view.locator("[data-role=status]")).to_contain_text("of kept run 1", timeout=15_000)
        # The last occupancy the recording gives is the state the watch ended with (no capacity is known offline,
        # so the bar is full at what it holds).
        label = view.locator('.watch-tier[data-tier="gpu"] .watch-tier-label')
        expect(label).to_contain_text(f"GPU: {gpu['tokens']:,} of {gpu['tokens']:,} tokens")
