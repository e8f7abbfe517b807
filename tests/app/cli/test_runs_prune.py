"""Keeping fewer runs: ``--no-save`` on every command, ``kvscope runs prune --keep N | --older-than AGE``, and a
retention (``KVSCOPE_KEEP_RUNS``) that says which runs it removes, against databases under tmp_path."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from live_servers import KVSCOPE, ROOT

SMALL = ("--docs", "2", "--passes", "forward")  # 4 requests: quick, and still kept as a run


def kvscope(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KVSCOPE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def ids(db: Path) -> list[int]:
    out = kvscope("runs", "--db", str(db), "list").stdout.splitlines()[2:]
    return [int(line.split()[0]) for line in out]


@pytest.mark.parametrize("command", ["explain", "capacity"])
def test_commands_that_keep_nothing_take_no_save_too(command: str, tmp_path: Path) -> None:
    """One command line for every command: explain and capacity refused --no-save ("No such option")."""
    done = kvscope(command, *SMALL, "--no-save", env={"KVSCOPE_DB": str(tmp_path / "runs.db")})
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "runs.db").exists()  # and, as before, they keep nothing


def test_prune_keeps_the_newest_or_drops_the_old(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    for _ in range(3):
        assert kvscope("simulate", *SMALL, "--db", str(db)).returncode == 0
    assert ids(db) == [3, 2, 1]
    done = kvscope("runs", "--db", str(db), "prune", "--keep", "1")
    assert done.returncode == 0, done.stderr
    # The two oldest go, named; the newest stays.
    assert done.stdout.startswith(f"removed runs 1, 2 from {db}: --keep 1"), done.stdout
    assert ids(db) == [3]
    # Run 3 was made seconds ago: an age of a day removes nothing, and says so.
    done = kvscope("runs", "--db", str(db), "prune", "--older-than", "1d")
    assert done.stdout.strip() == f"no run to delete in {db}"
    assert ids(db) == [3]
    # Neither or both, or an age without its unit: exit 2, naming what to give.
    assert "give --keep N or --older-than AGE" in kvscope("runs", "--db", str(db), "prune").stderr
    bad = kvscope("runs", "--db", str(db), "prune", "--older-than", "30")
    assert bad.returncode == 2 and "--older-than" in bad.stderr and "e.g. 30d" in bad.stderr


def test_a_retention_says_which_runs_it_removes(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    keep = {"KVSCOPE_KEEP_RUNS": "2"}
    for _ in range(2):
        assert kvscope("simulate", *SMALL, "--db", str(db), env=keep).returncode == 0
    # The third run is kept and the retention of 2 removes run 1: said on stderr, with how to change it.
    done = kvscope("simulate", *SMALL, "--db", str(db), env=keep)
    assert done.returncode == 0
    assert f"removed run 1 from {db}: the retention keeps the newest 2 runs (--keep-runs, KVSCOPE_KEEP_RUNS)" in done.stderr
    assert "kept as run 3" in done.stderr
    assert ids(db) == [3, 2]
