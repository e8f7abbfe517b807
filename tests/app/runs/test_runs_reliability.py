"""The runs database under stress: writers in parallel (threads of one store, other stores, other processes) and a
server killed with SIGKILL in the middle of a live run. Afterwards the database opens, passes
``PRAGMA integrity_check``, and holds every request that had completed.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from app.runs.store import NewRun, RunStore
from live_servers import KVSCOPE, ROOT, emulator, free_port, stop, wait_until_up

WRITER = """
import sys
from app.runs.store import NewRun, RunStore
store = RunStore(sys.argv[1])
writer = store.open(NewRun("proxy", name="process " + sys.argv[2]))
for seq in range(int(sys.argv[3])):
    writer.append({"seq": seq, "writer": sys.argv[2]})
    if seq % 10 == 0:
        store.save(NewRun("simulate", name="saved by process " + sys.argv[2]), records=[{"seq": seq}])
writer.finish()
print(writer.id)
"""


def check_whole(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # Every run's count says how many records it holds, and they are numbered 0..n-1 without a gap.
        for run_id, count in conn.execute("SELECT id, record_count FROM runs"):
            numbers = [n for (n,) in conn.execute("SELECT n FROM records WHERE run_id = ? ORDER BY n", (run_id,))]
            assert numbers == list(range(count)), run_id


def test_parallel_writers_lose_and_corrupt_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = RunStore(path)
    other = RunStore(path)  # a second store in the same process: its own writer connection
    per_thread, threads_n, processes_n, per_process = 60, 6, 3, 80
    ids: list[int] = []
    failures: list[BaseException] = []

    def thread_writer(n: int) -> None:
        try:
            mine = store if n % 2 else other
            writer = mine.open(NewRun("live", name=f"thread {n}"))
            ids.append(writer.id)
            for seq in range(per_thread):
                writer.append({"seq": seq, "thread": n})
                if seq % 15 == 0:
                    mine.save(NewRun("simulate", name=f"saved by thread {n}"), events=[[{"type": "run", "seq": seq}]])
            writer.finish()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(i), str(per_process)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(processes_n)
    ]
    threads = [threading.Thread(target=thread_writer, args=(n,)) for n in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    outs = [p.communicate(timeout=120) for p in procs]
    assert not failures, failures
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    ids += [int(out.strip()) for out, _ in outs]

    check_whole(path)
    fresh = RunStore(path)
    for run_id in ids:
        run = fresh.get(run_id)
        expected = per_thread if run.info.kind == "live" else per_process
        assert (run.info.status, run.info.record_count, len(fresh.records(run_id))) == ("done", expected, expected)
    # Saves: a thread saves at seq 0, 15, 30, 45 (4 each); a process at 0, 10, ..., 70 (8 each).
    assert len(fresh.list(kind="simulate", limit=1000)) == threads_n * 4 + processes_n * 8


@pytest.mark.slow
def test_a_server_killed_mid_live_run_leaves_every_answered_request(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with emulator("--no-cpu-tier", "--speed", "20") as gpu:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [*KVSCOPE, "serve", "--port", str(port), "--log-level", "warning", "--db", str(path), "--target", f"gpu={gpu}"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            wait_until_up(url, proc, timeout_s=30, path="/healthz")
            created = httpx.post(f"{url}/api/live/runs", json={"targets": ["gpu"]}, timeout=30)
            assert created.status_code == 201, created.text
            run_id = created.json()["run_id"]
            answered: list[int] = []
            with httpx.stream("GET", url + created.json()["events"], timeout=60) as response:
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        event = json.loads(line[5:])
                        if event["type"] == "measured":
                            answered.append(event["seq"])
                            if len(answered) == 8:
                                os.kill(proc.pid, signal.SIGKILL)  # mid-run: the seed lab has 30 requests
                                break
            proc.wait(timeout=10)
            assert proc.returncode == -signal.SIGKILL
        finally:
            stop(proc)

    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with sqlite3.connect(path) as conn:  # nobody finished it ...
        assert conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone() == ("running",)
    store = RunStore(path)  # ... and its process is gone, as whoever opens the database next finds
    assert store.get(run_id).info.status == "interrupted"
    # The server commits a request's record before it sends its `measured` event: every one the client saw is kept
    # (and perhaps a few answered while the kill was on its way; not all 30 of the seed lab).
    kept = [r["seq"] for r in store.records(run_id)]
    assert set(answered) <= set(kept) and len(kept) < 30
    # Named, not addressed: the server shows kept runs to browsers, which never see a target's URL.
    assert {r["target"] for r in store.records(run_id)} == {"gpu"}
    check_whole(path)
