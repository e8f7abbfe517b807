"""``kvscope watch`` against ``kvscope emulate --kv-events`` on loopback: the resident state at exit, a recording that
``watch --from`` plays to the same state and ``kvscope replay`` reads as a trace, and the errors."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx

from live_servers import KVSCOPE, ROOT, emulator, free_port, run_kvscope


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}w{i}" for i in range(n))  # one token per word, all distinct


def test_watch_joins_late_and_ends_with_the_servers_blocks(tmp_path: Path) -> None:
    live, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    record = tmp_path / "events.jsonl"
    with emulator("--kv-events", live, "--kv-events-replay", replay, "--chunk-size", "32", "--speed", "100") as url:
        # Three 100-token documents before anyone watches: 6 full blocks each (96 tokens) on the GPU, and 3 full
        # 32-token chunks each on the CPU, named as 2 blocks per chunk.
        for d in range(3):
            httpx.post(url + "/v1/completions", json={"prompt": words(f"doc{d}", 100), "max_tokens": 1}).raise_for_status()
        watch = subprocess.Popen(
            [*KVSCOPE, "watch", "--kv-events", live, "--replay", replay, "--seconds", "4", "--json",
             "--record", str(record)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        # A 96-token prompt, sent until the watch ends: the first time it stores 6 blocks and 3 chunks; later its
        # last block is recomputed (at most 95 tokens hit), a copy of the same hash, so the distinct blocks stay.
        deadline = time.monotonic() + 20
        while watch.poll() is None and time.monotonic() < deadline:
            httpx.post(url + "/v1/completions", json={"prompt": words("ping", 96), "max_tokens": 1}).raise_for_status()
            time.sleep(0.2)
        out, err = watch.communicate(timeout=20)
    assert watch.returncode == 0, err
    summary = json.loads(out)
    # What the watch saw live plus what it asked the replay endpoint for when it joined: 4 prompts x 6 blocks.
    assert summary["media"]["GPU"]["blocks"] == 24 and summary["media"]["GPU"]["tokens"] == 384
    assert summary["media"]["CPU"]["blocks"] == 24 and summary["media"]["CPU"]["tokens"] == 384
    assert summary["gaps"] == 0 and summary["lost"] == 0 and summary["history_missed"] == 0
    assert summary["joined_at"] >= 3  # the three documents' batches came before it
    assert summary["prefix_count"] == 8
    assert sorted((p["medium"], p["blocks"], p["tokens"]) for p in summary["prefixes"]) == [("CPU", 6, 96)] * 4 + [("GPU", 6, 96)] * 4
    assert {"batches", "events", "gaps", "media", "prefixes"} <= set(summary)

    played = run_kvscope(["watch", "--from", str(record), "--json"])
    assert played.returncode == 0, played.stderr
    again = json.loads(played.stdout)
    assert again["media"] == summary["media"] and again["prefixes"] == summary["prefixes"]

    # The recording is a trace: one request per GPU store, its whole chain of 16-token blocks.
    replayed = run_kvscope(["replay", str(record), "--block-size", "16", "--gpu-blocks", "1000", "--json"])
    assert replayed.returncode == 0, replayed.stderr
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    requests = [line for line in lines if "hash_ids" in line]
    # 3 documents, the first ping, and one copy of the ping's last block per later ping (its chain is all 6).
    assert [r["input_length"] for r in requests[:4]] == [96, 96, 96, 96]
    assert all(r["input_length"] == 96 for r in requests)


def test_watch_says_when_no_publisher_answers() -> None:
    silent = f"tcp://127.0.0.1:{free_port()}"
    result = run_kvscope(["watch", "--kv-events", silent, "--seconds", "1", "--json"])
    assert result.returncode == 1
    summary = json.loads(result.stdout)
    assert summary["batches"] == 0 and summary["received"] == 0
    assert f"no message from {silent}" in summary["problems"][-1]


def test_watch_refuses_bad_flags(tmp_path: Path) -> None:
    bad = run_kvscope(["watch", "--kv-events", "http://127.0.0.1:5557"])
    assert bad.returncode == 2 and "--kv-events" in bad.stderr and "tcp://HOST:PORT" in bad.stderr
    neither = run_kvscope(["watch"])
    assert neither.returncode == 2 and "--from FILE" in neither.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"seq": 0, "ts": 1.0, "event": {"type": "BlockStored"}}\n')
    played = run_kvscope(["watch", "--from", str(broken)])
    assert played.returncode == 2 and "line 1" in played.stderr
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b'{"seq": 0}\n\x00\x01')
    played = run_kvscope(["watch", "--from", str(binary)])
    assert played.returncode == 2 and str(binary) in played.stderr and "line 2" in played.stderr
