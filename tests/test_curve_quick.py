"""``kvscope curve TRACE --json`` without click (app.launch): the same bytes, errors and exit status as the click command.

Each case runs the real executable, and the click command in a fresh interpreter beside it
(``app.cli.entry.run``, which is what ``kvscope`` ran before the quick form), on the bundled sample and on
traces the test writes; the quick form's output is also checked against the curve of the reference
loop (``python_stack_profile``) over the trace read line by line as JSON.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from app.launch import curve_arguments
from live_servers import KVSCOPE, ROOT
from sim import trace_line
from sim.curve import curve_points
from sim.stack_distance import python_stack_profile
from sim.trace import open_trace

# The click command as a user met it before the quick form: the group's entry, in its own interpreter.
CLICK = [sys.executable, "-c", "import sys; from app.cli.entry import run; sys.argv[0] = 'kvscope'; run()"]
# The executable, reporting at exit which of click, inspect (dataclasses' import of it is put off) and pydantic
# were imported (on stderr, after everything it printed).
PROBE = [sys.executable, "-c", (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write('LOADED ' + ' '.join(m for m in ('click', 'inspect', 'pydantic') if m in sys.modules)))\n"
    "from app.launch import run\nsys.argv[0] = 'kvscope'\nrun()"
)]
QUICK = "LOADED "  # none of them


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


def test_the_quick_form_prints_what_click_and_the_reference_print(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
        args = ["curve", *more, trace, "--json"]
        quick = run(PROBE, args)
        assert quick == (0, expected, QUICK), (trace, more)
        assert run(CLICK, args) == (0, expected, ""), (trace, more)


def test_the_sample_through_the_installed_executable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(KVSCOPE, ["curve", "mooncake-synthetic", "--json"]) == (0, reference_output("mooncake-synthetic", 100, monkeypatch), "")


def test_a_bailian_trace_is_read_as_click_reads_it(tmp_path: Path) -> None:
    # Its lines are not Mooncake's usual form: the line reader detects the format and chains the ids.
    path = tmp_path / "bailian.jsonl"
    rows = [
        {"chat_id": i, "parent_chat_id": -1, "timestamp": i * 0.5, "input_length": 40, "output_length": 7,
         "hash_ids": [1, 2, 3] if i % 2 else [1, 2, 9], "turn": 1, "type": "text"}
        for i in range(6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["curve", str(path), "--json", "--points", "3"]
    code, out, err = run(PROBE, args)
    assert (code, err) == (0, QUICK)
    assert (code, out, "") == run(CLICK, args)


@pytest.mark.parametrize(
    "make, args, env",
    [
        (None, ["curve", "no-such-file.jsonl", "--json"], {}),  # neither a file nor a bundled name
        ("bad", ["curve", "{f}", "--json"], {}),  # a malformed line: named by its number
        (None, ["curve", "mooncake-synthetic", "--json", "--points", "0"], {}),
        (None, ["curve", "mooncake-synthetic", "--json", "--points", "10001"], {}),
        (None, ["curve", "mooncake-synthetic", "--json", "--points", "+5"], {}),  # click's int() reads it: 5
        (None, ["curve", "mooncake-synthetic", "--json", "--json"], {}),
        (None, ["curve", "mooncake-synthetic"], {}),  # the table, not JSON: click's
        (None, ["curve", "mooncake-synthetic", "--json"], {"KVSCOPE_CLI_BUDGET": "work=1000"}),  # over the budget
        (None, ["curve", "mooncake-synthetic", "--json"], {"KVSCOPE_CLI_BUDGET": "work=lots"}),  # a bad budget
        (None, ["curve", "mooncake-synthetic", "--json"], {"_KVSCOPE_COMPLETE": "bash_source"}),  # shell completion
        (None, ["curve", "--json"], {}),  # no trace: a scenario's curve
        (None, ["curve", "mooncake-synthetic", "--json", "--format", "bailian"], {}),
        (None, ["curve", "-h"], {}),
        (None, ["--help"], {}),
    ],
)
def test_anything_else_is_clicks_to_answer(tmp_path: Path, make: str | None, args: list[str], env: dict[str, str]) -> None:
    if make == "bad":
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}\n{broken\n')
        args = [a.replace("{f}", str(bad)) for a in args]
    environ = {**os.environ, **env}
    code, out, err = run(PROBE, args, environ)
    err, _, loaded = err.rpartition("LOADED ")
    assert "click" in loaded.split()
    assert (code, out, err) == run(CLICK, args, environ)


@pytest.mark.parametrize(
    "args, parsed",
    [
        (["curve", "t.jsonl", "--json"], ("t.jsonl", 100)),
        (["curve", "--json", "--points", "42", "t.jsonl"], ("t.jsonl", 42)),
        (["curve", "--points=7", "t.jsonl", "--json"], ("t.jsonl", 7)),
        (["curve", "t.jsonl"], None),  # the table
        (["curve", "--json"], None),  # a scenario
        (["curve", "a", "b", "--json"], None),  # click's error: one TRACE
        (["curve", "t.jsonl", "--json", "--points"], None),  # --points without its value
        (["curve", "t.jsonl", "--json", "--points", "007"], None),  # click's int() reads 7: click's
        (["curve", "t.jsonl", "--json", "--points", "5", "--points", "6"], None),
        (["curve", "t.jsonl", "--json", "--block-size", "16"], None),
        (["curve", "-", "--json"], None),
        (["curve", "", "--json"], None),
        (["replay", "t.jsonl", "--json"], None),
        ([], None),
    ],
)
def test_only_the_curves_plain_form_is_taken(args: list[str], parsed: tuple[str, int] | None) -> None:
    assert curve_arguments(args) == parsed


def test_a_closed_pipe_ends_as_click_ends_it() -> None:
    # The reader has gone (``| head`` that exited): status 1 and nothing on stderr, as click.core.Command.main does.
    def closed_pipe(argv: list[str]) -> tuple[int, bytes]:
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            done = subprocess.run([*argv, "curve", "mooncake-synthetic", "--json"], cwd=ROOT, stdout=write_end,
                                  stderr=subprocess.PIPE, timeout=120)
        finally:
            os.close(write_end)
        return done.returncode, done.stderr

    assert closed_pipe(KVSCOPE) == closed_pipe(CLICK) == (1, b"")
