"""Helpers for live-mode tests: real servers (``kvscope emulate``) in subprocesses on free loopback ports."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar
from pathlib import Path

import httpx

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
KVSCOPE = [str(Path(sys.executable).with_name("kvscope"))]


def sse(lines: Iterator[str]) -> Iterator[tuple[str, dict]]:
    """(event name, JSON data) per message of a text/event-stream."""
    name, data = "", []
    for line in lines:
        if line == "":
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


def busy() -> str | None:
    """Why a millisecond cannot be measured here now (more runnable processes than cores), or None: timing tests
    that miss their mark on such a machine are skipped saying so, never passed."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    return f"the machine is busy (load {load:.1f} on {cores} cores)" if load > cores else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 20.0, path: str = "/health") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server for {url} exited with {proc.returncode}: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(url + path, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server for {url} did not come up in {timeout_s} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def emulator(*args: str) -> Iterator[str]:
    """``kvscope emulate ARGS`` on a free port; yields its base URL and always stops it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*KVSCOPE, "emulate", "--port", str(port), *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_until_up(url, proc)
        yield url
    finally:
        stop(proc)


@contextmanager
def serve_process(*args: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``kvscope serve --host 127.0.0.1 --port FREE ARGS``; yields the base URL and the process, and always stops it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*KVSCOPE, "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", *args],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    try:
        wait_until_up(url, proc, timeout_s=30, path="/healthz")
        yield url, proc
    finally:
        stop(proc)


def run_kvscope(args: Sequence[str], timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KVSCOPE, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)


@contextmanager
def threaded_server(app: Any) -> Iterator[str]:
    """An ASGI app on a real uvicorn in a thread of this process, on a free loopback port; yields its base URL."""
    import threading

    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the threaded server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=5)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to the end in a thread of its own: Playwright's sync API keeps an event loop running in
    the main thread for the whole session, where ``asyncio.run`` would refuse to start."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
