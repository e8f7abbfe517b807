"""``kvscope simulate|replay|analyze|calibrate`` keep their run: the same answer on stdout, ``kept as run N`` on
stderr, and ``kvscope runs show N`` gives the answer back; a database that refuses the run costs only a warning."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from live_servers import KVSCOPE, ROOT

from app.runs.store import NewRun, RunStore
from sim.calibration import measurements


def kvscope(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KVSCOPE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


def shown(db: str, run_id: int) -> dict:
    return json.loads(kvscope("runs", "--db", db, "show", str(run_id), "--json").stdout)


@pytest.fixture()
def db(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


def test_simulate_keeps_its_result_and_prints_the_same_json(db: str) -> None:
    unsaved = kvscope("simulate", "--json", "--no-save", "--db", db)
    saved = kvscope("simulate", "--json", "--db", db)
    assert saved.returncode == unsaved.returncode == 0
    # Byte for byte: keeping the run adds a line to stderr, nothing to stdout.
    assert saved.stdout == unsaved.stdout
    assert unsaved.stderr == "" and saved.stderr == "kept as run 1 (kvscope runs show 1)\n"  # --no-save kept nothing
    run = shown(db, 1)
    assert (run["kind"], run["status"]) == ("simulate", "done")
    assert run["result"] == json.loads(saved.stdout)
    # The scenario is kept field by field: the seed lab's 10 documents and its three passes.
    assert run["scenario"]["docs"] == 10 and run["summary"]["requests"] == 60


def test_simulate_table_output_is_kept_too_and_kvscope_db_is_the_default(tmp_path: Path) -> None:
    env = {**os.environ, "KVSCOPE_DB": str(tmp_path / "env.db")}
    table = kvscope("simulate", "--no-cpu", env=env)
    assert table.returncode == 0 and table.stderr == "kept as run 1 (kvscope runs show 1)\n"
    assert table.stdout == kvscope("simulate", "--no-cpu", "--no-save", env=env).stdout
    # Without a CPU tier only the gpu configuration runs: 10 documents x 3 passes.
    run = shown(str(tmp_path / "env.db"), 1)
    assert [r["name"] for r in run["result"]["runs"]] == ["gpu"] and run["summary"]["requests"] == 30


def test_replay_keeps_the_json_it_prints(db: str) -> None:
    args = ("replay", "mooncake-synthetic", "--gpu-blocks", "400", "--cpu-blocks", "2000", "--json")
    saved = kvscope(*args, "--db", db)
    assert saved.returncode == 0 and saved.stderr == "kept as run 1 (kvscope runs show 1)\n"
    assert saved.stdout == kvscope(*args, "--no-save").stdout
    run = shown(db, 1)
    printed = json.loads(saved.stdout)
    assert run["kind"] == "replay" and run["result"] == printed
    # The trace is named by its sha256 (the bundled file's), and its tiers' sizes are the flags'.
    assert run["source"]["trace"]["sha256"] == printed["trace"]["sha256"]
    assert [t["capacity_blocks"] for t in run["result"]["tiers"]] == [400, 2000]


def test_replay_of_a_trace_file_keeps_the_file(db: str, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    # Two requests sharing their first block (hash id 1): a 2-block GPU holds each prompt.
    trace.write_text('{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]}\n'
                     '{"timestamp": 5, "input_length": 1000, "output_length": 1, "hash_ids": [1, 3]}\n')
    saved = kvscope("replay", str(trace), "--gpu-blocks", "2", "--db", db)
    assert saved.returncode == 0, saved.stderr
    assert saved.stderr.endswith("kept as run 1 (kvscope runs show 1)\n")
    run = shown(db, 1)
    assert run["uploads"] == [{"name": "t.jsonl", "sha256": hashlib.sha256(trace.read_bytes()).hexdigest(),
                               "bytes": trace.stat().st_size, "content_kept": True}]
    assert len(run["result"]["requests"]) == 2


def test_analyze_keeps_the_rows_it_read(db: str, tmp_path: Path) -> None:
    csv = tmp_path / "seed.csv"
    assert kvscope("simulate", "--out", str(csv), "--no-save").returncode == 0
    saved = kvscope("analyze", str(csv), "--json", "--db", db)
    assert saved.returncode == 0 and saved.stderr == "kept as run 1 (kvscope runs show 1)\n"
    assert saved.stdout == kvscope("analyze", str(csv), "--json", "--no-save").stdout
    back = tmp_path / "back.csv"
    assert kvscope("runs", "--db", db, "export", "1", "--out", str(back)).returncode == 0
    assert measurements.read(back) == measurements.read(csv)  # every row as analyze read it
    run = shown(db, 1)
    assert run["kind"] == "analysis"
    assert run["uploads"][0]["sha256"] == hashlib.sha256(csv.read_bytes()).hexdigest()


def test_calibrate_keeps_the_profile_and_the_rows(db: str, tmp_path: Path) -> None:
    csv = tmp_path / "seed.csv"
    assert kvscope("simulate", "--out", str(csv), "--no-save").returncode == 0
    saved = kvscope("calibrate", str(csv), "--json", "--db", db)
    assert saved.returncode == 0 and saved.stderr.endswith("kept as run 1 (kvscope runs show 1)\n")
    run = shown(db, 1)
    profile = json.loads(saved.stdout)
    assert run["kind"] == "calibration" and run["result"] == profile and run["costs"] == profile["costs"]
    assert run["records"] == 60  # the seed lab's 60 requests, each a row of the file
    assert (tmp_path / "seed.costs.json").exists()
    # runs show says the constants it fitted, as the profile holds them (to 6 significant digits).
    fitted = next(line for line in kvscope("runs", "--db", db, "show", "1").stdout.splitlines() if "fitted costs:" in line)
    assert f"overhead_ms {profile['costs']['overhead_ms']:.6g}" in fitted
    assert f"prefill_ms_per_token {profile['costs']['prefill_ms_per_token']:.6g}" in fitted


@pytest.mark.parametrize("problem", ["not a database", "a folder", "full"])
def test_a_database_that_refuses_the_run_warns_and_changes_nothing_else(problem: str, tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    env = dict(os.environ)
    if problem == "not a database":
        path.write_text("these are not SQLite pages\n" * 100)
    elif problem == "a folder":
        path.mkdir()
    else:
        # A database already past the 1 MiB the environment allows, with no retention: the next run does not fit.
        store = RunStore(path)
        store.save(NewRun("import", name="big"), result=["x" * 1000] * 2000)
        store.close()
        env["KVSCOPE_DB_MAX_MB"] = "1"
    env["KVSCOPE_DB"] = str(path)
    expected = kvscope("simulate", "--json", "--no-save", env=env).stdout
    result = kvscope("simulate", "--json", env=env)
    assert result.returncode == 0 and result.stdout == expected
    assert result.stderr.startswith("warning: this run was not kept: ") and "kept as run" not in result.stderr
    if problem == "full":
        assert "its limit is 1 MiB" in result.stderr


def test_a_command_that_fails_keeps_nothing_and_keeps_its_exit_code(db: str, tmp_path: Path) -> None:
    result = kvscope("simulate", "--docs", "0", "--db", db)
    assert result.returncode == 2 and "kept as run" not in result.stderr
    assert not Path(db).exists()


def test_no_save_loads_no_store(tmp_path: Path) -> None:
    """``--no-save`` (and the saving commands' options) import neither sqlite3 nor the store: start-up stays short."""
    probe = (
        "import json, sys\nfrom app.cli import main\n"
        "try:\n    main(['simulate', '--no-save'], standalone_mode=False)\n"
        "finally:\n    print('MODULES' + json.dumps(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    modules = set(json.loads(out.rpartition("MODULES")[2]))
    assert "app.cli.simulate" in modules
    assert not {"sqlite3", "app.runs.store", "app.runs.recording"} & modules


def test_a_retention_prunes_the_oldest_command_line_runs(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    env = {**os.environ, "KVSCOPE_DB": db, "KVSCOPE_KEEP_RUNS": "2"}
    for n in (1, 2):
        assert kvscope("simulate", "--docs", "2", env=env).stderr == f"kept as run {n} (kvscope runs show {n})\n"
    # Keep the newest 2: run 1, the oldest, went when run 3 came, and the command says so.
    assert kvscope("simulate", "--docs", "2", env=env).stderr == (
        f"kvscope: removed run 1 from {db}: the retention keeps the newest 2 runs (--keep-runs, KVSCOPE_KEEP_RUNS)\n"
        "kept as run 3 (kvscope runs show 3)\n"
    )
    assert [r["id"] for r in json.loads(kvscope("runs", "--db", db, "list", "--json").stdout)] == [3, 2]
