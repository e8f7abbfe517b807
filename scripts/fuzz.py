"""``make fuzz``: schemathesis against a local ``kvscope serve`` for a bounded time, then the figures that matter.

Starts the server on a free loopback port, lets schemathesis generate requests
from the OpenAPI schema (valid and invalid) for ``--seconds``, and reports
from its HAR log: cases sent, answers by status class, 5xx count, the slowest
answer, and the server's peak RSS (its own and its largest worker's); then, on
stderr, the slowest answers with their route, body and ``Server-Timing``. Fails
(exit 1) on any 5xx or an answer slower than ``--max-answer-s``.

    make fuzz                      # 180 s
    make fuzz ARGS="--seconds 600"
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.request import urlopen

from app.budgets import WebBudget
from app.web.deadline import MARGIN_S

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_rss_mib(pid: int, key: str = "VmHWM") -> float:
    """The process's peak RSS (``VmRSS`` for the present one), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


SLOWEST_SHOWN = 8  # the slowest answers, each with its route, body and the server's own share


def describe(entry: dict) -> str:
    """One HAR entry: ms taken (the client's), status, the server's share (``Server-Timing``), route, body's start."""
    request, response = entry["request"], entry["response"]
    timing = next((h["value"] for h in response["headers"] if h["name"].lower() == "server-timing"), "-")
    body = (request.get("postData") or {}).get("text", "")
    return (f"{entry['time']:.0f} ms {response['status']} ({timing}) {request['method']} {request['url']} "
            f"body[{len(body)}]={body[:160]!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=180, help="schemathesis' time budget")
    parser.add_argument("--max-answer-s", type=float, default=WebBudget().seconds + MARGIN_S,
                        help="the slowest answer allowed (default: the per-request deadline plus its margin)")
    parser.add_argument("--workers", default="2", help="schemathesis' concurrent workers")
    args = parser.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # An advisor search may run for search_seconds (120 s by default) and an import for import_seconds (30 s), budgets
    # of their own; here they get the per-request deadline, so the slowest-answer rule also checks that they stop at
    # theirs (a 15 MiB import at its 30 s deadline was the slowest answer of a 10-minute run).
    search_s = max(1.0, args.max_answer_s - MARGIN_S)
    workdir = Path(tempfile.mkdtemp(prefix="kvscope-fuzz-"))
    # Its runs in a database of its own: the fuzzer's thousands of runs never reach the user's.
    server = subprocess.Popen(
        [str(BIN / "kvscope"), "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
         "--budget", f"search_seconds={search_s:g},import_seconds={search_s:g}", "--db", str(workdir / "runs.db")],
        # The server's log (a 500's traceback) is kept beside the HAR: a 500 the replay of its request does not
        # repeat is only explained there.
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=(workdir / "server.log").open("w"),
    )
    har = workdir / "fuzz.har"
    peaks: dict[int, float] = {}
    try:
        for _ in range(300):
            try:
                if urlopen(f"{url}/healthz", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        rss_start = peak_rss_mib(server.pid, "VmRSS")
        fuzz = subprocess.Popen(
            [
                str(BIN / "st"), "run", f"{url}/openapi.json", "--max-time", str(args.seconds), "--workers", args.workers,
                "--checks", "not_a_server_error", "--request-timeout", "60", "--generation-database", "none",
                "--suppress-health-check", "all", "--report", "har", "--report-har-path", str(har), "--no-color",
            ],
            cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        while fuzz.poll() is None:  # sample the server's and its workers' peaks while it runs
            for pid in [server.pid, *children(server.pid)]:
                peaks[pid] = max(peaks.get(pid, 0.0), peak_rss_mib(pid))
            time.sleep(1)
        output = fuzz.stdout.read() if fuzz.stdout else ""
        rss_end = peak_rss_mib(server.pid, "VmRSS")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
            stopped = "on SIGTERM"
        except subprocess.TimeoutExpired:  # still draining: its figures are in the HAR all the same
            server.kill()
            server.wait()
            stopped = "killed: not stopped 30 s after SIGTERM"
    tail = "\n".join(output.strip().splitlines()[-12:])
    entries = json.loads(har.read_text())["log"]["entries"] if har.exists() else []
    statuses = [e["response"]["status"] for e in entries]
    times_ms = sorted(e["time"] for e in entries)
    by_class = {f"{c}xx": sum(1 for s in statuses if s // 100 == c) for c in (2, 4, 5)}
    slowest = max(entries, key=lambda e: e["time"], default=None)
    report = {
        "seconds": args.seconds,
        "cases": len(entries),
        "answers": by_class,
        "5xx": by_class["5xx"],
        "503_busy_or_deadline": statuses.count(503),
        "p50_ms": round(times_ms[len(times_ms) // 2], 1) if times_ms else None,
        "p99_ms": round(times_ms[int(len(times_ms) * 0.99)], 1) if times_ms else None,
        "slowest_ms": round(slowest["time"], 1) if slowest else None,
        "slowest": f"{slowest['request']['method']} {slowest['request']['url']}" if slowest else None,
        "server_rss_start_mib": round(rss_start, 1),
        "server_rss_end_mib": round(rss_end, 1),
        "server_peak_rss_mib": round(peaks.get(server.pid, 0.0), 1),
        "worker_peak_rss_mib": round(max((v for k, v in peaks.items() if k != server.pid), default=0.0), 1),
        "server_stopped": stopped,
        "server_log": str(workdir / "server.log"),
    }
    print(tail)
    print(json.dumps(report, indent=1))
    for e in sorted(entries, key=lambda e: e["time"], reverse=True)[:SLOWEST_SHOWN]:
        print("slow:", describe(e), file=sys.stderr)
    server_errors = [e for e in entries if e["response"]["status"] >= 500 and e["response"]["status"] != 503]
    for e in server_errors[:5]:
        print("5xx:", e["request"]["method"], e["request"]["url"], e["response"]["status"], file=sys.stderr)
    failed = by_class["5xx"] > statuses.count(503) or (slowest is not None and slowest["time"] > args.max_answer_s * 1000)
    print(f"(HAR log: {har})")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
