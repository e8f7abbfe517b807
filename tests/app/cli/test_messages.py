"""What a new user's slips are told: a port in use (serve, emulate), a measurement file given to replay, a long_doc_qa
round given to calibrate without its flags, live's errors worded as every command's, and the proxy's answer for a
vLLM path (forwarded, or refused naming it). Real processes on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from live_servers import KVSCOPE, ROOT, emulator, free_port

HEADER = "prompt_id,request_start,ttft,request_end,ttft_time"  # long_doc_qa's round CSV (tests/test_longdocqa.py)


def kvscope(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KVSCOPE, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KVSCOPE_DB": ":memory:", **(env or {})})


@pytest.fixture()
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("command", ["serve", "emulate"])
def test_a_port_in_use_says_so_and_names_port(command: str, taken_port: int) -> None:
    done = kvscope(command, "--host", "127.0.0.1", "--port", str(taken_port))
    assert done.returncode == 1, done
    assert f"Error: port {taken_port} on 127.0.0.1 is in use" in done.stderr
    assert "--port N" in done.stderr
    # emulate's banner ("... on http://HOST:PORT") only once it listens: never before this error.
    assert "kvscope emulator for" not in done.stderr
    assert "Traceback" not in done.stderr


def test_emulate_prints_its_banner_with_the_port_it_listens_on() -> None:
    port = free_port()
    proc = subprocess.Popen([*KVSCOPE, "emulate", "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
        assert banner.rstrip().endswith(f"on http://127.0.0.1:{port}"), banner
        # Said once the socket listens: a connection made right after it is accepted (queued until uvicorn serves).
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_replay_given_a_measurement_file_says_what_reads_it(tmp_path: Path) -> None:
    csv = tmp_path / "runs.csv"
    assert kvscope("simulate", "--docs", "2", "--passes", "forward", "--out", str(csv)).returncode == 0
    done = kvscope("replay", str(csv), "--gpu-blocks", "100")
    assert done.returncode == 2
    assert "a measurement file" in done.stderr and "Mooncake or Bailian JSONL traces" in done.stderr
    assert f"kvscope analyze {csv} reads measurement files" in done.stderr


def test_calibrate_given_a_long_doc_qa_round_names_its_flags(tmp_path: Path) -> None:
    (tmp_path / "warmup_round.csv").write_text("\n".join([HEADER, "0,0,0.5,1,0.5", "1,1,0.7,2,1.7"]) + "\n")
    (tmp_path / "query_round.csv").write_text("\n".join([HEADER, "0,0,0.05,1,0.05", "1,1,0.05,2,1.05"]) + "\n")
    done = kvscope("calibrate", "query_round.csv", "--no-save", cwd=tmp_path)
    assert done.returncode == 2
    for flag in ("--repeat-mode", "--docs (its --num-documents)", "--doc-tokens (its --document-length)"):
        assert flag in done.stderr, done.stderr


def test_live_errors_begin_as_every_commands(tmp_path: Path) -> None:
    closed = free_port()  # nothing listens there
    done = kvscope("live", "--target", f"gpu=http://127.0.0.1:{closed}", "--docs", "2", "--passes", "forward",
                   "--no-save")
    lines = [line for line in done.stderr.splitlines() if "cannot connect" in line]
    assert lines and all(line.startswith("Error: target gpu") for line in lines), done.stderr


def test_the_proxy_forwards_tokenize_and_names_what_it_refuses(live_server_factory) -> None:
    with emulator("--speed", "50") as emu, live_server_factory("--upstream", f"emu={emu}") as url:
        body = {"model": "qwen2.5-1.5b", "prompt": "one two three"}
        for path in ("/tokenize", "/upstream/emu/tokenize"):
            via = httpx.post(url + path, json=body, timeout=20)
            assert via.status_code == 200, via.text
            assert via.json() == httpx.post(emu + "/tokenize", json=body).json()
        tokens = via.json()["tokens"]
        back = httpx.post(url + "/detokenize", json={"model": "qwen2.5-1.5b", "tokens": tokens}, timeout=20)
        assert back.status_code == 200 and back.json() == httpx.post(emu + "/detokenize", json={"model": "qwen2.5-1.5b", "tokens": tokens}).json()
        # Forwarded only: the watch numbers and measures completions, not tokenizer calls.
        assert httpx.get(url + "/api/watch/emu").json()["requests"] == []
        refused = httpx.post(url + "/v1/embeddings", json={"input": "x"}, timeout=20)
        assert refused.status_code == 404
        message = refused.json()["error"]["message"]
        assert "does not forward POST /v1/embeddings" in message and "POST /tokenize" in message


def test_serve_says_where_it_listens_with_the_port_chosen_for_zero() -> None:
    """uvicorn names its address only when it binds the socket itself; serve binds it (to name --port when the port
    is taken), so serve says where it listens, with the port the kernel chose for --port 0."""
    proc = subprocess.Popen([*KVSCOPE, "serve", "--host", "127.0.0.1", "--port", "0", "--db", ":memory:"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = line.split(" at ", 1)[1].split("/ ", 1)[0]
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0"), line
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(url + "/healthz", timeout=5).status_code == 200
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, line
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
