"""``kvscope runs``: list, show, diff, export, delete, import against a database under tmp_path."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from live_servers import KVSCOPE, ROOT

from sim.calibration import measurements


def kvscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KVSCOPE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.fixture()
def db(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


@pytest.fixture()
def two_runs(tmp_path: Path, db: str) -> tuple[Path, Path]:
    """The seed lab as simulate --json (imported as run 1) and, with no CPU tier, as a measurement file (run 2)."""
    sim_json = tmp_path / "sim.json"
    sim_json.write_text(kvscope("simulate", "--json").stdout)
    csv = tmp_path / "nocpu.csv"
    assert kvscope("simulate", "--no-cpu", "--out", str(csv)).returncode == 0
    assert kvscope("runs", "--db", db, "import", str(sim_json)).stdout.startswith(f"imported {sim_json} as run 1 (simulate, 60 requests)")
    assert kvscope("runs", "--db", db, "import", str(csv)).stdout.startswith(f"imported {csv} as run 2 (import, 30 requests)")
    return sim_json, csv


def test_list_shows_newest_first_with_headlines(db: str, two_runs: tuple[Path, Path]) -> None:
    out = kvscope("runs", "--db", db, "list").stdout.splitlines()
    assert out[0].split()[:4] == ["id", "kind", "when", "(UTC)"]
    assert out[2].split()[:2] == ["2", "import"] and out[3].split()[:2] == ["1", "simulate"]
    # The seed lab's pass 2: 581.2 ms without the CPU tier, 49.5 ms with it (README): 11.75x.
    assert "pass 2: gpu+cpu 11.75x p50 over gpu" in out[3]
    listed = json.loads(kvscope("runs", "--db", db, "list", "--json").stdout)
    assert [r["id"] for r in listed] == [2, 1]


def test_show_prints_the_pass_table(db: str, two_runs: tuple[Path, Path]) -> None:
    out = kvscope("runs", "--db", db, "show", "1").stdout
    assert "run 1: simulate, done" in out
    row = next(line for line in out.splitlines() if line.startswith("gpu+cpu  2 forward"))
    # n, p50, mean, GPU hit, CPU hit, computed: pass 2 loads every document's 19 chunks from CPU (10 x 4,864) and
    # computes the other 160 tokens of each 5,024-token prompt.
    assert row.split()[3:9] == ["10", "49.5", "49.5", "0", "48,640", "1,600"]


def test_diff_of_runs_with_and_without_scenario(db: str, two_runs: tuple[Path, Path]) -> None:
    out = kvscope("runs", "--db", db, "diff", "1", "2").stdout
    assert "run 2 (import) has no scenario: only their requests are compared" in out  # run 2 is the measurement file
    # Run 2 has no gpu+cpu configuration: those rows are only in run 1, so they differ; gpu rows are equal.
    gpu2 = next(line for line in out.splitlines() if line.startswith("gpu      2 forward"))
    assert gpu2.split()[8] == "1.000" and not gpu2.rstrip().endswith("*")  # mean b/a; hits "0 / 0" follow
    cpu2 = next(line for line in out.splitlines() if line.startswith("gpu+cpu  2 forward"))
    assert cpu2.rstrip().endswith("*")


def test_diff_refuses_a_watch_and_keeps_a_trace_apart_from_a_scenario(db: str, tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    from app.runs.store import NewRun, RunStore

    store = RunStore(db)
    # A kept `kvscope watch`: its records are KV event lines, so it has no request to set beside another run's.
    watch = store.save(NewRun("watch", name="KV events"), records=[{"seq": 0, "ts": 1.0, "event": {"type": "AllBlocksCleared"}}])
    store.close()
    refused = kvscope("runs", "--db", db, "diff", "1", str(watch))
    assert refused.returncode == 2 and f"run {watch} (watch) cannot be compared: it keeps KV events, not requests" in refused.stderr
    assert "Invalid value for B" in refused.stderr and refused.stdout == ""
    csv = kvscope("runs", "--db", db, "export", str(watch))  # csv, the default: a watch has no requests to write
    assert csv.returncode == 2 and "Invalid value for --format" in csv.stderr and "keeps KV events, not requests" in csv.stderr
    # A trace's requests (pass 1, order "trace", config gpu) beside the seed lab's pass 1 forward: the same
    # configuration and pass number, but not the same pass, so neither row holds the other's figures.
    trace = tmp_path / "trace.csv"
    rows = [replace(r, order="trace") for r in measurements.read(two_runs[1]) if r.pass_ == 1]
    measurements.write(trace, rows)
    assert kvscope("runs", "--db", db, "import", str(trace)).returncode == 0
    out = kvscope("runs", "--db", db, "diff", "1", str(watch + 1)).stdout
    forward = next(line for line in out.splitlines() if line.startswith("gpu      1 forward"))
    assert forward.split()[3:5] == ["581.2", "581.2"] and forward.rstrip().endswith("*")  # p50 and mean of run 1 only
    assert next(line for line in out.splitlines() if line.startswith("gpu      1 trace")).rstrip().endswith("*")
    assert "no configuration and pass in common" in out


def test_a_watch_and_a_recording_in_progress_have_headlines(db: str, two_runs: tuple[Path, Path]) -> None:
    from app.runs.store import NewRun, RunStore

    store = RunStore(db)
    lines = [{"seq": n, "ts": 1.0 + n, "event": {"type": "AllBlocksCleared"}} for n in range(3)]  # three KV events
    watch = store.save(NewRun("watch", name="KV events of tcp://h:5557", summary={"scenario": "KV events of tcp://h:5557"}), records=lines)
    proxy = store.open(NewRun("proxy", name="emu", summary={"scenario": "requests proxied to emu", "requests": 0}))
    proxy.append_many([{"config": "emu", "pass": 1, "order": "proxy", "seq": n, "doc": -1, "prompt_tokens": 100, "ttft_ms": 5.0}
                       for n in range(2)])  # two requests kept, its summary not yet written (it is, when it finishes)
    store.close()
    listed = {line.split()[0]: line for line in kvscope("runs", "--db", db, "list").stdout.splitlines()[2:]}
    assert listed[str(watch)].rstrip().endswith("3 KV events")
    assert listed[str(proxy.id)].rstrip().endswith("2 requests so far")
    # Finished without its summary's figures (as a run exported while it ran, then imported): its records still count.
    store = RunStore(db)
    done = store.save(NewRun("proxy", name="emu", summary={"scenario": "requests proxied to emu", "requests": 0}),
                      records=[{"config": "emu", "pass": 1, "order": "proxy", "seq": 0, "doc": -1, "prompt_tokens": 100, "ttft_ms": 5.0}])
    store.close()
    listed = {line.split()[0]: line for line in kvscope("runs", "--db", db, "list").stdout.splitlines()[2:]}
    assert listed[str(done)].split()[4] == "done" and listed[str(done)].split()[-2:] == ["1", "requests"]
    shown = kvscope("runs", "--db", db, "show", str(watch)).stdout
    assert f"3 KV events kept (kvscope runs export {watch} --format jsonl" in shown and "no requests" not in shown


def test_export_writes_what_analyze_reads_and_never_overwrites(db: str, tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    _, csv = two_runs
    out = tmp_path / "back.csv"
    assert kvscope("runs", "--db", db, "export", "2", "--out", str(out)).returncode == 0
    assert measurements.read(out) == measurements.read(csv)
    again = kvscope("runs", "--db", db, "export", "2", "--out", str(out))
    assert again.returncode == 2 and "never overwrites" in again.stderr
    whole = json.loads(kvscope("runs", "--db", db, "export", "1", "--format", "json").stdout)
    assert whole["format"] == "kvscope-run" and whole["kind"] == "simulate"
    # A JSON export imports back as the same kind of run with the same result.
    exported = tmp_path / "run1.json"
    exported.write_text(json.dumps(whole))
    assert kvscope("runs", "--db", db, "import", str(exported)).stdout.startswith(f"imported {exported} as run 3 (simulate")
    assert json.loads(kvscope("runs", "--db", db, "show", "3", "--json").stdout)["result"] == whole["result"]


def test_delete_and_missing_runs(db: str, two_runs: tuple[Path, Path]) -> None:
    assert kvscope("runs", "--db", db, "delete", "2").stdout == "deleted run 2\n"
    for args in (("show", "2"), ("delete", "2"), ("diff", "1", "2"), ("export", "2")):
        result = kvscope("runs", "--db", db, *args)
        assert result.returncode == 1 and f"no run 2 in {db}" in result.stderr, args


def test_hostile_ids_exit_2_before_touching_the_database(db: str, tmp_path: Path) -> None:
    one = tmp_path / "one.csv"
    one.write_text("config,pass,order,seq,doc,prompt_tokens,ttft_ms\ngpu,1,forward,0,0,10,1.5\n")
    assert kvscope("runs", "--db", db, "import", str(one)).returncode == 0
    for bad in ("1;DROP TABLE runs", "' OR 1=1 --", "-3", "0", "x", "1e3"):
        # `--` so that "-3" reaches the id check instead of reading as an option.
        for args in (("show", "--", bad), ("delete", "--", bad), ("diff", "--", "1", bad), ("export", "--", bad)):
            result = kvscope("runs", "--db", db, *args)
            assert result.returncode == 2 and "run id must be a positive whole number" in result.stderr, args
    assert len(json.loads(kvscope("runs", "--db", db, "list", "--json").stdout)) == 1


def test_a_bad_file_is_refused_by_line_and_nothing_is_kept(db: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("config,pass,order,seq,doc,prompt_tokens,ttft_ms\ngpu,0,forward,0,0,10,1.0\n")
    result = kvscope("runs", "--db", db, "import", str(bad))
    assert result.returncode == 2 and "bad.csv: line 2: column pass: passes are numbered from 1" in result.stderr
    assert kvscope("runs", "--db", db, "list").stdout.startswith("no runs kept in")


def test_a_database_of_a_newer_kvscope_exits_2_naming_it(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "future.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 999")
    result = kvscope("runs", "--db", str(path), "list")
    assert result.returncode == 2 and "--db" in result.stderr and "schema version 999" in result.stderr


def test_retention_from_the_command_line(db: str, tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    sim_json, _ = two_runs
    assert kvscope("runs", "--db", db, "--keep-runs", "2", "import", str(sim_json)).returncode == 0
    assert [r["id"] for r in json.loads(kvscope("runs", "--db", db, "list", "--json").stdout)] == [3, 2]


@pytest.mark.slow
def test_kvscope_live_keeps_each_measured_request(db: str, tmp_path: Path) -> None:
    from live_servers import emulator

    out = tmp_path / "live.csv"
    with emulator("--no-cpu-tier", "--speed", "20") as gpu:
        result = kvscope("live", "--db", db, "--target", f"gpu={gpu}", "--docs", "3", "--passes", "forward,reverse", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "kept as run 1 (kvscope runs show 1)" in result.stderr
    (run,) = json.loads(kvscope("runs", "--db", db, "list", "--json").stdout)
    # 3 documents x 2 passes against one target: 6 requests, the same rows as the --out file.
    assert (run["kind"], run["status"], run["records"]) == ("live", "done", 6)
    exported = tmp_path / "kept.csv"
    assert kvscope("runs", "--db", db, "export", "1", "--out", str(exported)).returncode == 0
    # The same rows, but the target named, not its URL: a kept run may be served to browsers, which never see URLs.
    assert [replace(m, target=None) for m in measurements.read(exported)] == [replace(m, target=None) for m in measurements.read(out)]
    assert {m.target for m in measurements.read(exported)} == {"gpu"} and {m.target for m in measurements.read(out)} == {gpu}


@pytest.mark.slow
def test_kvscope_live_no_save_measures_and_keeps_nothing(db: str, tmp_path: Path) -> None:
    """``--no-save`` means what it means on simulate, replay and watch: the answer, and no run in the database."""
    from live_servers import emulator

    out = tmp_path / "live.csv"
    with emulator("--no-cpu-tier", "--speed", "20") as gpu:
        result = kvscope("live", "--no-save", "--db", db, "--target", f"gpu={gpu}", "--docs", "3", "--passes", "forward", "--out", str(out))
    assert result.returncode == 0, result.stderr
    # 3 documents x 1 pass against one target: 3 requests measured and written to --out.
    assert len(measurements.read(out)) == 3 and "gpu" in result.stdout
    assert "kept as run" not in result.stderr and "not kept" not in result.stderr
    assert not Path(db).exists()  # no database was even opened


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["directory", "memory"])
def test_kvscope_live_measures_whatever_its_database_does(kind: str, tmp_path: Path) -> None:
    """A measurement cannot be repeated: a runs database that cannot be opened (here a directory) gets the warning
    simulate gives and the run goes ahead; ':memory:' keeps nothing past the process, so nothing is said, as simulate
    says nothing."""
    from live_servers import emulator

    db = str(tmp_path) if kind == "directory" else ":memory:"
    out = tmp_path / "live.csv"
    with emulator("--no-cpu-tier", "--speed", "20") as gpu:
        result = kvscope("live", "--db", db, "--target", f"gpu={gpu}", "--docs", "3", "--passes", "forward", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert len(measurements.read(out)) == 3 and "gpu" in result.stdout
    assert "kept as run" not in result.stderr
    if kind == "directory":
        assert "warning: this run was not kept: --db: " in result.stderr, result.stderr
    else:
        assert "not kept" not in result.stderr, result.stderr


@pytest.mark.slow
def test_kvscope_live_with_a_db_under_a_file_measures_and_warns(tmp_path: Path) -> None:
    """A runs database that cannot be opened costs live what it costs simulate: a warning, never the measuring of a
    real server (unrepeatable), its --out file or its exit code."""
    from live_servers import emulator

    (tmp_path / "plain").write_text("a file, not a folder\n")
    bad = tmp_path / "plain" / "runs.db"  # its folder is a file: sqlite cannot create it
    out = tmp_path / "live.csv"
    with emulator("--no-cpu-tier", "--speed", "20") as gpu:
        result = kvscope("live", "--db", str(bad), "--target", f"gpu={gpu}", "--docs", "3", "--passes", "forward", "--out", str(out))
    assert result.returncode == 0, result.stderr
    # 3 documents x 1 pass against one target: 3 requests measured and written to --out.
    assert len(measurements.read(out)) == 3 and "gpu" in result.stdout
    assert "warning: this run was not kept: " in result.stderr and "kept as run" not in result.stderr


@pytest.mark.slow
def test_kvscope_live_with_a_full_db_warns_in_the_shared_words(tmp_path: Path) -> None:
    """A database that opens but refuses the run (already past --db-max-mb 1) says so in the line simulate uses."""
    from live_servers import emulator

    from app.runs.store import NewRun, RunStore

    db = tmp_path / "runs.db"
    store = RunStore(db)
    store.save(NewRun("import", name="big"), result=["x" * 1000] * 2000)  # about 2 MB of result: past 1 MiB
    store.close()
    out = tmp_path / "live.csv"
    with emulator("--no-cpu-tier", "--speed", "20") as gpu:
        result = kvscope(
            "live", "--db", str(db), "--db-max-mb", "1", "--target", f"gpu={gpu}", "--docs", "3", "--passes", "forward",
            "--out", str(out),
        )
    assert result.returncode == 0, result.stderr
    assert len(measurements.read(out)) == 3
    lines = [line for line in result.stderr.splitlines() if "not kept" in line]
    assert lines and all(line.startswith("warning: this run was not kept: ") for line in lines), result.stderr
    assert "kept as run" not in result.stderr


def test_show_and_diff_give_each_tier_behind_the_cpu_its_own_column(db: str) -> None:
    # Six seed documents (5,024-token prompts, 19 full chunks = 4,864 tokens each), read forward twice. The GPU
    # (12,000 tokens: 749 usable blocks, 2.4 prompts) and the CPU (10,000 tokens: two documents' chunks) are LRU
    # on a cycle of six: pass 2 hits neither. Run 1's nvme (100,000 tokens) holds all six documents, so pass 2
    # loads each from it: 6 x 4,864 = 29,184 tokens, and computes the other 160 of each prompt (960). Run 2's
    # nvme (5,000 tokens) holds one document, the last stored: a cycle again, nothing hit.
    base = ("simulate", "--db", db, "--docs", "6", "--cpu-tokens", "10000", "--gpu-tokens", "12000", "--passes", "forward,forward")
    assert kvscope(*base, "--storage-tier", "nvme:100000t").returncode == 0
    assert kvscope(*base, "--storage-tier", "nvme:5000t").returncode == 0
    show = kvscope("runs", "--db", db, "show", "1").stdout.splitlines()
    header = next(line for line in show if line.startswith("config"))
    assert header.endswith("GPU hit tok  CPU hit tok  nvme hit tok  computed tok")
    row = next(line for line in show if line.startswith("gpu+cpu+nvme  2 forward"))
    assert row.split()[-4:] == ["0", "0", "29,184", "960"]
    out = kvscope("runs", "--db", db, "diff", "1", "2").stdout.splitlines()
    assert "nvme hit tok 1 / 2" in next(line for line in out if line.startswith("config"))
    row = next(line for line in out if line.startswith("gpu+cpu+nvme  2 forward"))
    assert "29,184 / 0" in row and row.rstrip().endswith("*")
    diffed = json.loads(kvscope("runs", "--db", db, "diff", "1", "2", "--json").stdout)
    assert diffed["tiers"] == ["cpu", "nvme"]
    cell = next(p for p in diffed["passes"] if p["config"] == "gpu+cpu+nvme" and p["pass"] == 2)
    assert cell["tier_hits"]["nvme"] == {"a": 29_184, "b": 0, "change": 0.0}


def test_listing_or_showing_marks_the_runs_of_a_killed_process_interrupted(db: str) -> None:
    # A process (kvscope live, say) opens a run and is killed with it unfinished: SIGKILL runs no `finally`, so the
    # row says 'running' and nobody will ever finish it. No server opens this database; the CLI's own opening of
    # it must find the owner gone and say 'interrupted' (for list and for show alike).
    import signal
    import sys

    left = subprocess.run(
        [sys.executable, "-c",
         "import os, signal, sys\n"
         "from app.runs.store import NewRun, RunStore\n"
         "print(RunStore(sys.argv[1]).open(NewRun('live')).id, flush=True)\n"
         "os.kill(os.getpid(), signal.SIGKILL)\n", db],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert left.returncode == -signal.SIGKILL, left.stderr
    run_id = int(left.stdout)
    shown = kvscope("runs", "--db", db, "show", str(run_id), "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["status"] == "interrupted", shown.stdout[:300]
    listed = json.loads(kvscope("runs", "--db", db, "list", "--json").stdout)
    assert [(r["id"], r["status"]) for r in listed] == [(run_id, "interrupted")]
