"""Every command the docs show with its output, run: each ``console`` block of README.md and of docs/*.md is a
list of ``$ COMMAND`` lines, each followed by the output it prints (stdout and stderr as a terminal shows them).
Each block runs in a fresh folder with a runs database of its own, so "kept as run 1" means the block's first run.
A line ``...`` in the output stands for any lines, a ``...`` within a line for any text in it (what varies from
run to run: a path, a hash, a rate); a time of day (``2026-11-30 21:28:12``) for any time.
A block that calls the dashboard's API starts it as a reader would, ``$ kvscope serve [FLAGS] &`` (or
``kvscope emulate ... &``, ``v/bin/kvscope serve &``): the test starts that server on a free port for the block's
length, and the block's ``localhost:8000`` and ``127.0.0.1:8000`` stand for that port, so a block never depends on a
server it does not start; a server shown with ``--port 8001`` or ``8002`` (the docs' two emulators) gets a free port
of its own that those addresses stand for; ``127.0.0.1:5557`` and ``:5558`` (vLLM's KV event ports) for two more.
Such a server answers within 120 s, not the web's 4 s (``KVSCOPE_BUDGET``, which a shown ``--budget`` replaces), so
that what a block shows does not depend on how busy the machine running the tests is.
"""

from __future__ import annotations

import csv
import os
import re
import shlex
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from live_servers import KVSCOPE, ROOT, emulator, free_port, stop, wait_until_up
from test_packaging import checkout_files, copy_tree

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def fenced() -> list[tuple[str, str, str]]:
    """(where, language, text) of every fenced block of the docs."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            line = text[: m.start()].count("\n") + 1
            out.append((f"{doc.relative_to(ROOT)}:{line}", m.group(1), m.group(2)))
    return out


def blocks() -> list[tuple[str, str]]:
    return [(where, text) for where, language, text in fenced() if language == "console"]


def steps(block: str) -> list[tuple[str, str]]:
    """(command, expected output) in the block's order."""
    out: list[tuple[str, list[str]]] = []
    continued = False
    for line in block.splitlines():
        if continued:  # a command's line ending in a backslash goes on on the next line, as in a shell
            out[-1] = (out[-1][0] + "\n" + line, out[-1][1])
        elif line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"output before any command: {line!r}"
            out[-1][1].append(line)
        continued = line.endswith("\\") and not out[-1][1]
    return [(cmd, "\n".join(lines)) for cmd, lines in out]


SERVER = re.compile(r"^((?:\S*/)?kvscope (?:serve|emulate)\b.*?)\s*&$")
DASHBOARD = re.compile(r"\b(?:localhost|127\.0\.0\.1):8000\b")
DOCS_PORTS = ("8000", "8001", "8002", "5557", "5558")
PORTS = re.compile(rf"\b(?:localhost|127\.0\.0\.1):({'|'.join(DOCS_PORTS)})\b")
SERVER_PORT = re.compile(r"\s--port\s+(8001|8002)\b")


def on_free_ports(command: str, ports: dict[str, int]) -> str:
    """The command with the docs' ports (``DOCS_PORTS``) moved to the test's free ones."""
    return PORTS.sub(lambda m: f"127.0.0.1:{ports[m.group(1)]}", command)


def server_on_free_port(command: str, ports: dict[str, int]) -> tuple[str, int]:
    """A background server's command on its free port (its shown ``--port 8001``/``8002``'s, else 8000's)."""
    shown = SERVER_PORT.search(command)
    if shown is None:
        return f"{on_free_ports(command, ports)} --port {ports['8000']}", ports["8000"]
    port = ports[shown.group(1)]
    return on_free_ports(SERVER_PORT.sub(f" --port {port}", command), ports), port


def test_a_block_that_calls_the_api_starts_the_server_it_calls() -> None:
    for where, block in blocks():
        commands = [command for command, _ in steps(block)]
        if any(DASHBOARD.search(c) for c in commands):
            assert any(SERVER.match(c) for c in commands), f"{where}: calls localhost:8000 but starts no server"


BUILDS = re.compile(r"^pip wheel\b.* \.(?:\s|$)", re.M)


def builds(block: str) -> bool:
    """Whether the block builds kvscope from the checkout it runs in."""
    return any(BUILDS.match(command) for command, _ in steps(block))


LONG_DOC_QA = "results/lmcache"
WORKLOAD_FLAGS = ("--repeat-mode", "--repeat-count", "--shuffle-seed", "--hit-miss-ratio", "--docs", "--doc-tokens")
SERVER_FLAGS = ("--gpu-tokens", "--cpu-gb")


def long_doc_qa_run(command: str, folder: Path) -> None:
    """A long_doc_qa run in ``folder``: the workload the command's flags name, sent one request at a time by
    ``kvscope live`` to ``kvscope emulate`` with the tiers they name, its rounds written as long_doc_qa writes them
    (LMCache's benchmarks/long_doc_qa/long_doc_qa.py: ``warmup_round.csv`` and ``query_round.csv``, a row per
    ``prompt_id`` in the round's order, ``request_start`` and ``ttft_time`` in seconds from the round's first request,
    ``ttft`` in seconds; live records no end of a request, so ``request_end`` is left out)."""
    words = shlex.split(command)
    flags = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
    server = [a for f in SERVER_FLAGS if f in flags for a in (f, flags[f])]
    workload = [a for f in WORKLOAD_FLAGS if f in flags for a in (f, flags[f])]
    measured = folder / "measured.csv"
    folder.mkdir(parents=True)
    with emulator(*server) as url:
        subprocess.run([*KVSCOPE, "live", "--target", f"lmcache={url}", *workload, "--out", str(measured), "--no-save"],
                       check=True, capture_output=True, timeout=300)
    rows = list(csv.DictReader(measured.open()))
    measured.unlink()
    for pass_, name in (("1", "warmup_round.csv"), ("2", "query_round.csv")):
        round_ = [r for r in rows if r["pass"] == pass_]
        start = datetime.fromisoformat(round_[0]["started_at"])
        lines = ["prompt_id,request_start,ttft,ttft_time"]
        for prompt_id, r in enumerate(round_):
            began_s = (datetime.fromisoformat(r["started_at"]) - start).total_seconds()
            ttft_s = float(r["ttft_ms"]) / 1000
            lines.append(f"{prompt_id},{began_s},{ttft_s},{began_s + ttft_s}")
        (folder / name).write_text("\n".join(lines) + "\n")


TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def matches(got: list[str], want: list[str]) -> bool:
    """``want``'s lines against ``got``'s, ``...`` matching any run of lines (none included)."""
    if not want:
        return not got
    if want[0] == "...":
        return any(matches(got[i:], want[1:]) for i in range(len(got) + 1))
    return bool(got) and line_matches(got[0], want[0]) and matches(got[1:], want[1:])


def line_matches(got: str, want: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in TIME.sub("T", want).split("..."))
    return re.fullmatch(pattern, TIME.sub("T", got)) is not None


def test_dots_within_a_line_stand_for_any_text_of_that_line_only() -> None:
    shown = ["  GPU      ...     314 blocks    5,024 tokens"]
    # A prefix's hash varies from run to run; the rest of its line does not.
    assert matches(["  GPU      26f98434543e9d37     314 blocks    5,024 tokens"], shown)
    assert not matches(["  GPU      26f98434543e9d37     313 blocks    5,024 tokens"], shown)
    # Within a line they span no line break: two printed lines are not one shown line.
    assert not matches(["  GPU      26f9", "     314 blocks    5,024 tokens"], shown)
    # Everything else in the line is literal, regular-expression characters included.
    assert not matches(["kvscope 0.1.0 from /x/app (python 3a11)"], ["kvscope 0.1.0 from .../app (python 3.11)"])


def test_every_block_showing_a_prompt_is_checked() -> None:
    # A block of "$ COMMAND" lines says "this ran and printed this": only a console block is run to hold it to that.
    # Commands that need what no test has (a GPU, vLLM, LMCache's script) are shown without a prompt.
    unchecked = [where for where, language, text in fenced() if language != "console" and re.search(r"^\$ ", text, re.M)]
    assert not unchecked


def test_the_docs_show_commands_to_check() -> None:
    assert len(blocks()) >= 6  # README's recipes and the command-line page's tables at least


@pytest.mark.parametrize(
    ("where", "block"), [pytest.param(w, b, id=w, marks=[pytest.mark.slow] if builds(b) else []) for w, b in blocks()]
)
def test_a_shown_command_prints_what_is_shown(where: str, block: str, tmp_path: Path) -> None:
    env = {**os.environ, "KVSCOPE_DB": str(tmp_path / "runs.db"), "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
           "COLUMNS": "200", "NO_COLOR": "1"}
    if re.search(r"\bjq\b", block) and shutil.which("jq") is None:
        pytest.skip(f"{where} reads JSON with jq, which this machine lacks (apt install jq)")
    folder = copy_tree(checkout_files(), tmp_path / "kvscope") if builds(block) else tmp_path
    reading = [command for command, _ in steps(block) if LONG_DOC_QA in command]
    if reading:
        long_doc_qa_run(reading[0], folder / LONG_DOC_QA)
    ports = {shown: free_port() for shown in DOCS_PORTS}
    servers: list[subprocess.Popen[bytes]] = []
    try:
        for command, expected in steps(block):
            server = SERVER.match(command)
            if server:
                assert not expected, f"{where}: $ {command} is started in the background and prints nothing shown"
                started, port = server_on_free_port(server.group(1), ports)
                servers.append(subprocess.Popen(["bash", "-c", f"exec {started}"], cwd=folder,
                                                env={**env, "KVSCOPE_BUDGET": "seconds=120"},
                                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
                wait_until_up(f"http://127.0.0.1:{port}", servers[-1], timeout_s=60,
                              path="/healthz" if " serve" in command else "/health")
                continue
            done = subprocess.run(["bash", "-c", f"{{ {on_free_ports(command, ports)}\n}} 2>&1"],
                                  cwd=folder, env=env, capture_output=True, text=True, timeout=300)
            got = [line.rstrip() for line in done.stdout.rstrip("\n").splitlines()]
            want = [line.rstrip() for line in expected.rstrip("\n").splitlines()]
            assert matches(got, want), f"{where}: $ {command}\n--- shown\n" + "\n".join(want) + "\n--- printed\n" + "\n".join(got)
    finally:
        for proc in servers:
            stop(proc)
