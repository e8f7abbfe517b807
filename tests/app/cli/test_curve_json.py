"""``kvscope curve TRACE --json``: the curve of the reference loop, through the installed executable (one path: click's).

Each case runs the real executable on the bundled sample and on traces the
test writes; its output is checked against the curve of the reference loop
(``python_stack_profile``) over the trace read line by line as JSON.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest
from live_servers import KVSCOPE, ROOT

from sim.analysis.curve import curve_points
from sim.analysis.stack_distance import python_stack_profile
from sim.traces import line as trace_line
from sim.traces.reader import open_trace


def run(argv: list[str], args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = subprocess.run([*argv, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    return done.returncode, done.stdout, done.stderr


def mooncake(path: Path, requests: int, seed: int, block: int = 512) -> Path:
    """Requests that re-read a random earlier request's prefix (a run) and then add new ids, in the usual form."""
    rng = random.Random(seed)
    rows: list[list[int]] = []
    fresh = 0
    with path.open("w") as f:
        for i in range(requests):
            ids: list[int] = []
            if rows and rng.random() < 0.7:
                earlier = rng.choice(rows)
                ids = earlier[: rng.randint(1, len(earlier))]
            new = rng.randint(0 if ids else 1, 6)
            ids += range(fresh, fresh + new)
            fresh += new
            rows.append(ids)
            tokens = (len(ids) - 1) * block + rng.randint(1, block)
            f.write(json.dumps({"timestamp": i * 3, "input_length": tokens, "output_length": 2, "hash_ids": ids}) + "\n")
    return path


def reference_output(trace: str, points: int, monkeypatch: pytest.MonkeyPatch) -> str:
    """What ``--json`` must print: the reference loop's curve of the trace read one line at a time as JSON."""
    with monkeypatch.context() as m:
        m.setattr(trace_line, "parse", lambda raw: None)
        m.setattr(trace_line, "parse_lines", lambda chunk: None)
        stream = open_trace(trace).block_stream().tolist()
    return json.dumps(curve_points(python_stack_profile(stream), points), indent=1) + "\n"


def test_json_prints_what_the_reference_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    odd = mooncake(tmp_path / "odd.jsonl", 300, seed=3)
    # A float timestamp: the line reader's JSON decode reads this line, the usual-form reading does not.
    lines = odd.read_text().splitlines()
    lines[150] = lines[150].replace('"timestamp": 450,', '"timestamp": 450.5,')
    odd.write_text("\n".join(lines))  # and no newline after the last line
    cases = [
        ("mooncake-synthetic", []),
        ("mooncake-synthetic", ["--points", "7"]),
        (str(mooncake(tmp_path / "a.jsonl", 400, seed=1)), ["--points=10000"]),
        (str(mooncake(tmp_path / "b.jsonl", 900, seed=2)), ["--points", "1"]),
        (str(odd), []),
    ]
    for trace, more in cases:
        points = int(more[-1].split("=")[-1]) if more else 100
        expected = reference_output(trace, points, monkeypatch)
        assert run(KVSCOPE, ["curve", *more, trace, "--json"]) == (0, expected, ""), (trace, more)


def test_a_bailian_trace_is_read_line_by_line_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its lines are not Mooncake's usual form: the line reader detects the format and chains the ids.
    path = tmp_path / "bailian.jsonl"
    rows = [
        {"chat_id": i, "parent_chat_id": -1, "timestamp": i * 0.5, "input_length": 40, "output_length": 7,
         "hash_ids": [1, 2, 3] if i % 2 else [1, 2, 9], "turn": 1, "type": "text"}
        for i in range(6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    expected = reference_output(str(path), 3, monkeypatch)
    assert run(KVSCOPE, ["curve", str(path), "--json", "--points", "3"]) == (0, expected, "")


def test_a_closed_pipe_ends_quietly_with_status_1() -> None:
    # The reader has gone (``| head`` that exited): status 1 and nothing on stderr (click.core.Command.main).
    def closed_pipe(argv: list[str]) -> tuple[int, bytes]:
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            done = subprocess.run([*argv, "curve", "mooncake-synthetic", "--json"], cwd=ROOT, stdout=write_end,
                                  stderr=subprocess.PIPE, timeout=120)
        finally:
            os.close(write_end)
        return done.returncode, done.stderr

    assert closed_pipe(KVSCOPE) == (1, b"")
