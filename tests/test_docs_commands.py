"""Every command the docs show with its output, run: each ``console`` block of README.md and of docs/*.md is a
list of ``$ COMMAND`` lines, each followed by the output it prints (stdout and stderr as a terminal shows them).
Each block runs in a fresh folder with a runs database of its own, so "kept as run 1" means the block's first run.
A line ``...`` in the output stands for any lines; a time of day (``2026-11-30 21:28:12``) for any time.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from live_servers import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```console\n(.*?)^```$", re.M | re.S)


def blocks() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            line = text[: m.start()].count("\n") + 1
            out.append((f"{doc.relative_to(ROOT)}:{line}", m.group(1)))
    return out


def steps(block: str) -> list[tuple[str, str]]:
    """(command, expected output) in the block's order."""
    out: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"output before any command: {line!r}"
            out[-1][1].append(line)
    return [(cmd, "\n".join(lines)) for cmd, lines in out]


TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def matches(got: list[str], want: list[str]) -> bool:
    """``want``'s lines against ``got``'s, ``...`` matching any run of lines (none included)."""
    if not want:
        return not got
    if want[0] == "...":
        return any(matches(got[i:], want[1:]) for i in range(len(got) + 1))
    return bool(got) and TIME.sub("T", got[0]) == TIME.sub("T", want[0]) and matches(got[1:], want[1:])


def test_the_docs_show_commands_to_check() -> None:
    assert len(blocks()) >= 6  # README's recipes and the command-line page's tables at least


@pytest.mark.parametrize(("where", "block"), blocks(), ids=[w for w, _ in blocks()])
def test_a_shown_command_prints_what_is_shown(where: str, block: str, tmp_path: Path) -> None:
    env = {**os.environ, "KVSCOPE_DB": str(tmp_path / "runs.db"), "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
           "COLUMNS": "200", "NO_COLOR": "1"}
    for command, expected in steps(block):
        done = subprocess.run(["bash", "-c", f"{{ {command}\n}} 2>&1"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        got = [line.rstrip() for line in done.stdout.rstrip("\n").splitlines()]
        want = [line.rstrip() for line in expected.rstrip("\n").splitlines()]
        assert matches(got, want), f"{where}: $ {command}\n--- shown\n" + "\n".join(want) + "\n--- printed\n" + "\n".join(got)
