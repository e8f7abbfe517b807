"""A server the benchmarks start as a subprocess on a free loopback port, waited for until it answers, then stopped."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(argv: Sequence[str], port: int, probe: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Run ``argv`` (which listens on ``port``) until the block ends; yields its URL once ``probe`` answers 200."""
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + probe, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"{' '.join(argv[:3])} did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
