"""``POST /api/runs/import`` under the web's budget, over a real uvicorn on loopback: four large imports at once keep
the server's memory bounded and its health check answering in milliseconds, and a file that would pass the memory
budget is refused before it is read."""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from live_servers import busy, serve_process

from app.budgets import MIB, WebBudget
from app.runs import importer
from app.runs.store import StoreFull

IMPORTS = 4
FILE_BYTES = 15 * MIB
HEALTH_EVERY_S = 0.02
HEADER = "config,pass,order,seq,doc,prompt_tokens,ttft_ms,gpu_hit_tokens,cpu_hit_tokens,computed_tokens,source,target,model,started_at\n"


def measurement_csv(target_bytes: int) -> tuple[bytes, int]:
    """A valid measurement file of just under ``target_bytes`` (rows of 85-98 bytes, two configurations, three
    passes), and how many rows it holds."""
    lines, size, n = [HEADER], len(HEADER), 0
    while True:
        config = ("gpu", "gpu+cpu")[n % 2]
        line = (f"{config},{1 + (n // 2) % 3},forward,{n},{n % 10},5024,{500 + (n % 997) / 10:.1f},0,0,5024,live,"
                f"{config},qwen2.5-1.5b,2026-12-01T21:00:{n % 60:02d}.000Z\n")
        if size + len(line) > target_bytes:
            return "".join(lines).encode(), n
        lines.append(line)
        size += len(line)
        n += 1


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} for {pid}")


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.slow
def test_four_large_imports_at_once_keep_the_server_small_and_its_health_check_quick(tmp_path: Path) -> None:
    # Each file is 15 MiB, under the 16 MiB upload limit, and of fewer rows than a run keeps (200,000), so each is a
    # real import of every row. Before imports ran in the workers, one such file grew the server by hundreds of MiB
    # (every row held as a dict, and again as its JSON text) and four at once held the event loop for seconds.
    content, rows = measurement_csv(FILE_BYTES)
    assert FILE_BYTES - 200 < len(content) <= FILE_BYTES and rows > 150_000
    # The default budget but for the import deadline: raised so that all four finish even on a crowded 2-core
    # machine (the workers run at nice +10, and took over 30 s there): what is measured is memory and the event loop.
    budget = replace(WebBudget(), import_seconds=150)
    with serve_process("--db", str(tmp_path / "runs.db"), "--budget", "import_seconds=150") as (url, proc):
        latencies: list[float] = []
        stop = threading.Event()

        def probe() -> None:
            with httpx.Client(timeout=10) as client:
                while not stop.is_set():
                    started = time.perf_counter()
                    assert client.get(url + "/healthz").status_code == 200
                    latencies.append(time.perf_counter() - started)
                    time.sleep(HEALTH_EVERY_S)

        answers: list[httpx.Response] = []

        def send(k: int) -> None:
            files = {"file": (f"big{k}.csv", content, "text/csv")}
            answers.append(httpx.post(url + "/api/runs/import", files=files, timeout=budget.import_seconds * 2))

        prober = threading.Thread(target=probe)
        senders = [threading.Thread(target=send, args=(k,)) for k in range(IMPORTS)]
        prober.start()
        for t in senders:
            t.start()
        for t in senders:
            t.join(timeout=budget.import_seconds * 2)
        stop.set()
        prober.join(timeout=15)
        server_peak_mib = _status_kib(proc.pid, "VmHWM") / 1024
        workers_peak_mib = [_status_kib(p, "VmHWM") / 1024 for p in _children(proc.pid)]
        assert [a.status_code for a in answers] == [201] * IMPORTS, [a.text[:200] for a in answers]
        for answer in answers:
            run = httpx.get(f"{url}/api/runs/{answer.json()['id']}", timeout=30).json()
            assert run["records"] == rows and run["summary"]["requests"] == rows
    assert server_peak_mib < (budget.memory + 256 * MIB) / MIB, (server_peak_mib, workers_peak_mib)
    p99_ms = statistics.quantiles(latencies, n=100)[98] * 1000
    print(f"server peak RSS {server_peak_mib:.0f} MiB, workers {[round(w) for w in workers_peak_mib]} MiB; "
          f"/healthz p99 {p99_ms:.1f} ms over {len(latencies)} probes")
    if p99_ms >= 100 and (why := busy()):
        pytest.skip(f"/healthz p99 {p99_ms:.0f} ms, not measurable here: {why}")
    assert p99_ms < 100


def test_a_file_that_would_pass_the_memory_budget_is_refused_naming_the_budget(tmp_path: Path) -> None:
    # With a 16 MiB memory budget, reading a 2 MiB file (about 10 bytes held per byte: 20 MiB) would pass it: 422
    # naming the file field and the budget, and nothing kept.
    content, _ = measurement_csv(2 * MIB)
    with serve_process("--budget", "memory=16MiB") as (url, _):
        r = httpx.post(url + "/api/runs/import", files={"file": ("two.csv", content, "text/csv")}, timeout=60)
        assert r.status_code == 422, r.text
        (error,) = r.json()["detail"]
        assert error["loc"] == ["body", "file"] and "memory budget of 16 MiB" in error["msg"]
        assert httpx.get(url + "/api/runs", timeout=10).json() == []


def test_a_file_of_more_rows_than_a_run_keeps_is_refused_at_the_first_row_past_it(tmp_path: Path) -> None:
    # A run keeps at most max_records rows: with 3, the fourth row of a five-row file is refused, and the rows
    # after it are never read (a malformed sixth line would otherwise be the error).
    lines = measurement_csv(2_000)[0].splitlines(keepends=True)
    content = b"".join(lines[:6]) + b"not,a,row\n"  # the header, five rows, a line that is not one
    with pytest.raises(StoreFull, match="at most 3 records"):
        importer.prepare(content, "five.csv", str(tmp_path), max_records=3)
