"""The runs database: migrations, what a run keeps, bounds, retention, hostile names and ids.

Every database here is in memory or under pytest's tmp_path: never the user's data directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.runs import owner, schema
from app.runs.recording import (
    StreamRecorder,
    events_from_result,
    figures,
    result_of,
    rows_from_events,
    save_simulation,
    scenario_text,
)
from app.runs.store import NewRun, RunStore, StoreError, StoreFull, check_id
from app.scenario_input import resolve
from sim.calibration import measurements
from sim.simulation.run import simulate, stream
from sim.workloads.scenario import Scenario


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


# -- schema and migrations ---------------------------------------------------------


def test_a_new_database_is_migrated_to_the_last_version_in_wal(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    RunStore(path).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(schema.MIGRATIONS)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert {"runs", "records", "events", "uploads"} <= tables(path)


def test_reopening_applies_nothing_and_keeps_the_runs(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = RunStore(path)
    run_id = store.save(NewRun("import", name="kept"), records=[{"a": 1}])
    store.close()
    again = RunStore(path)
    assert [r.id for r in again.list()] == [run_id]
    assert again.records(run_id) == [{"a": 1}]


def test_a_database_from_a_newer_kvscope_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {len(schema.MIGRATIONS) + 1}")
    with pytest.raises(StoreError, match=f"schema version {len(schema.MIGRATIONS) + 1}.*knows up to {len(schema.MIGRATIONS)}"):
        RunStore(path)


def test_a_failing_migration_leaves_the_database_at_the_version_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The next version's script creates a table, then fails: the table must not survive, and the version must stay
    # the last good one (every shipped script applied, each in its own transaction).
    shipped = len(schema.MIGRATIONS)
    broken = (*schema.MIGRATIONS, "CREATE TABLE half_done (x INTEGER);\nINSERT INTO no_such_table VALUES (1);")
    monkeypatch.setattr(schema, "MIGRATIONS", broken)
    monkeypatch.setattr(schema, "SCHEMA_VERSION", len(broken))
    path = tmp_path / "runs.db"
    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        RunStore(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == shipped
    assert "half_done" not in tables(path)


# -- what runs keep ------------------------------------------------------------------


def test_a_streamed_run_rebuilds_exactly_the_simulators_result() -> None:
    # The stream's events carry every number of the result (tiers in `run`, each request's figures in `request`
    # and `ttft`, evictions in `evict`, causes in `explain`, summaries in `pass` and `done`); the result rebuilt
    # from the kept events must be simulate()'s own, key for key, for a scenario with every tier too.
    # With the causes of misses (explain events, the default) and without.
    cases = [(resolve("seed-lab", {}), True), (resolve("seed-lab", {"cpu_gb": 0.5, "disk_gb": 1.0, "docs": 6}), True),
             (resolve("seed-lab", {}), False)]
    for scenario, explain in cases:
        store = RunStore()
        recorder = StreamRecorder(store, scenario)
        for event in stream(scenario, explain=explain):
            recorder.add(event)
        recorder.finish("done")
        run = store.get(recorder.run_id)
        assert run.info.status == "done"
        expected = simulate(scenario, explain=explain)
        assert result_of(store, run) == expected
        # Its headline, made from the `pass` events, is the one the rows of the result give.
        assert {k: run.info.summary[k] for k in ("requests", "configs", "best_speedup")} == figures(measurements.from_result(expected))
        # One batch per request per configuration (ended by its `ttft`), the first also holding the `run` events;
        # and one more: the last configuration's `pass` and `done`, sent after its last request.
        assert run.info.event_count == len(scenario.run_names) * scenario.total_requests + 1


def test_a_stream_cut_short_keeps_the_requests_it_sent() -> None:
    scenario = resolve("seed-lab", {})
    store = RunStore()
    recorder = StreamRecorder(store, scenario)
    ttfts = 0
    for event in stream(scenario):
        recorder.add(event)
        ttfts += event.kind == "ttft"
        if ttfts == 7:
            break
    recorder.finish("stopped")
    run = store.get(recorder.run_id)
    assert (run.info.status, run.info.summary["requests"]) == ("stopped", 7)
    assert len(rows_from_events(store.events(recorder.run_id))) == 7


def test_the_route_keeps_each_request_as_the_text_it_sent(tmp_path: Path) -> None:
    # The SSE route's path (app.web.routes.simulate): the worker's encoded events, sent as they are and kept by the
    # recorder, whose commits run on the commit thread. Every event sent is kept, in order, each request's events
    # one row holding exactly the texts sent (a JSON array of them), and the run is finished when the stream is.
    from app.web.routes.simulate import recorded, stream_events, unpickled
    from app.web.sse import Encoded

    scenario = resolve("seed-lab", {"docs": 4})
    store = RunStore(tmp_path / "runs.db")
    recorder = StreamRecorder(store, scenario)
    sent = every(recorded(unpickled(stream_events(scenario, True)), recorder, None))
    recorder.finish("done")
    assert all(isinstance(e, Encoded) for e in sent)  # no warning: everything was kept
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        rows = [r[0] for r in conn.execute("SELECT data FROM events WHERE run_id = ? ORDER BY n", (recorder.run_id,))]
    assert rows == ["[" + ",".join(batch) + "]" for batch in batches_of([e.text for e in sent], sent)]
    assert store.get(recorder.run_id).info.status == "done"
    assert result_of(store, store.get(recorder.run_id)) == simulate(scenario, explain=True)


def every(events: AsyncIterator[Any]) -> list[Any]:
    """An async generator's items (``recorded`` awaits its commits on the event loop), on a loop of its own."""
    async def collect() -> list[Any]:
        return [e async for e in events]
    return asyncio.run(collect())


def batches_of(texts: list[str], events: list) -> list[list[str]]:
    """The texts cut after each ``ttft`` (a request's end), the last batch whatever follows the last one."""
    out: list[list[str]] = [[]]
    for text, event in zip(texts, events, strict=True):
        out[-1].append(text)
        if event.kind == "ttft":
            out.append([])
    return [b for b in out if b]


def test_a_stream_whose_store_fills_up_is_sent_whole_and_says_where_keeping_stopped() -> None:
    # At most 5 event rows per run, and the seed lab streams 2 configurations x 30 requests (61 batches): a commit
    # on the commit thread is refused, after its events were sent; the stream still sends every event and ends
    # with a warning naming the limit, and what was kept is a whole prefix of the requests (at most 5 rows).
    from app.web.routes.simulate import recorded, stream_events, unpickled

    scenario = resolve("seed-lab", {})
    store = RunStore(max_records=5)
    recorder = StreamRecorder(store, scenario)
    sent = every(recorded(unpickled(stream_events(scenario, True)), recorder, None))
    recorder.finish("done")
    assert [e.kind for e in sent[:-1]] == [e.kind for e in stream(scenario, explain=True)]
    assert sent[-1].kind == "warning" and "at most 5 events" in sent[-1].to_dict()["message"]
    kept = store.events(recorder.run_id)
    assert 0 <= len(kept) <= 5
    assert [e for batch in kept for e in batch] == [e.to_dict() for e in sent[: sum(map(len, kept))]]


def test_events_made_from_a_result_give_back_its_requests() -> None:
    result = simulate(resolve("seed-lab", {}))
    assert rows_from_events(events_from_result(result)) == measurements.from_result(result)


def test_saved_simulation_lists_with_its_headline() -> None:
    store = RunStore()
    run_id = save_simulation(store, resolve("seed-lab", {}), simulate(resolve("seed-lab", {})))
    (info,) = store.list()
    # The seed lab's pass 2 with a CPU tier: 581.2 ms computed against 49.5 ms loaded (README), 11.7x.
    assert info.id == run_id and info.kind == "simulate"
    assert info.summary["requests"] == 60
    assert info.summary["best_speedup"]["pass"] == 2 and round(info.summary["best_speedup"]["p50_speedup"], 1) == 11.7
    assert "10 docs x 5,011 tok" in info.summary["scenario"]


def test_the_json_list_is_the_list() -> None:
    # /api/runs answers SQLite's JSON; it must be RunInfo.to_dict() of list(), in the same order, at every filter.
    store = RunStore()
    for i in range(30):
        store.save(NewRun("import" if i % 3 else "simulate", name=f'run "{i}" \\ ✓', summary={"n": i, "x": [None, 1.5]}))
    for query in ({}, {"limit": 7}, {"kind": "simulate"}, {"before": 12, "limit": 5}, {"kind": "live"}):
        assert json.loads(store.list_json(**query)) == [r.to_dict() for r in store.list(**query)], query


def test_deleting_a_run_deletes_its_records_events_and_uploads(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = RunStore(path)
    run_id = store.save(NewRun("import"), records=[{"a": 1}], events=[[{"type": "run"}]], uploads=[("f.csv", b"x")])
    assert store.delete(run_id) and not store.delete(run_id)
    with sqlite3.connect(path) as conn:
        assert [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("runs", "records", "events", "uploads")] == [0, 0, 0, 0]


def test_an_upload_over_the_size_kept_keeps_its_hash_and_size_only() -> None:
    import hashlib

    store = RunStore()
    small, big = b"a" * 10, b"b" * 11
    run_id = store.save(NewRun("analysis"), uploads=[("small.csv", small), ("big.csv", big)], keep_upload_bytes=10)
    assert store.uploads(run_id) == [
        {"name": "small.csv", "sha256": hashlib.sha256(small).hexdigest(), "bytes": 10, "content_kept": True},
        {"name": "big.csv", "sha256": hashlib.sha256(big).hexdigest(), "bytes": 11, "content_kept": False},
    ]
    assert store.upload_content(run_id, 0) == small and store.upload_content(run_id, 1) is None


def test_a_finished_writer_takes_nothing_more() -> None:
    writer = RunStore().open(NewRun("proxy"))
    writer.append({"seq": 0})
    writer.finish()
    with pytest.raises(StoreError, match="finished"):
        writer.append({"seq": 1})


def test_a_run_left_running_by_a_dead_process_is_marked_interrupted(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    mine = store.open(NewRun("live"))
    gone = store.open(NewRun("live"))
    # As a kvscope before owners were recorded left it (a pid, no owner), with a pid no process has: above Linux's
    # pid_max (2**22).
    store._write(lambda conn: conn.execute("UPDATE runs SET pid = ?, owner = NULL WHERE id = ?", (2**22 + 7, gone.id)))
    assert store.mark_interrupted() == 1
    assert store.get(gone.id).info.status == "interrupted"
    assert store.get(mine.id).info.status == "running"


# -- bounds and retention --------------------------------------------------------------


def test_rows_past_the_per_run_limit_are_refused_with_the_limit() -> None:
    store = RunStore(max_records=3)
    writer = store.open(NewRun("live"))
    for seq in range(3):
        writer.append({"seq": seq})
    with pytest.raises(StoreFull, match="at most 3 records"):
        writer.append({"seq": 3})
    assert store.get(writer.id).info.record_count == 3 and len(store.records(writer.id)) == 3
    with pytest.raises(StoreFull, match="at most 3 records; this one has 4"):
        store.save(NewRun("import"), records=[{}] * 4)


def test_a_full_database_refuses_with_what_to_do_and_keeps_what_it_had(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db", max_bytes=256 * 1024)
    payload = {"blob": "x" * 20_000}
    kept = []
    with pytest.raises(StoreFull, match=r"limit is 0.25 MiB.*kvscope runs delete ID.*KVSCOPE_KEEP_RUNS") as caught:
        for _ in range(100):
            kept.append(store.save(NewRun("import"), records=[payload]))
    assert "holds" in str(caught.value)
    # Every run that was saved is whole; the refused one left nothing.
    assert sorted(r.id for r in store.list()) == kept
    assert all(store.records(i) == [payload] for i in kept)
    assert store.integrity() == "ok"


def test_with_a_retention_the_oldest_runs_go_first() -> None:
    store = RunStore(keep_runs=2)
    ids = [store.save(NewRun("import", name=f"run {i}")) for i in range(4)]
    assert [r.id for r in store.list()] == [ids[3], ids[2]]


def test_a_full_database_with_a_retention_prunes_oldest_first(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db", max_bytes=256 * 1024, keep_runs=1000)
    ids = [store.save(NewRun("import"), records=[{"blob": "x" * 20_000}]) for _ in range(40)]
    left = [r.id for r in store.list(limit=1000)]
    # Room was made by deleting the oldest: what is left is the newest ids, without a gap.
    assert left == ids[-len(left):][::-1] and len(left) < len(ids)


def test_without_a_retention_nothing_is_pruned() -> None:
    store = RunStore()
    ids = [store.save(NewRun("import")) for _ in range(5)]
    assert sorted(r.id for r in store.list()) == ids


# -- hostile input -----------------------------------------------------------------------

HOSTILE_NAMES = [
    "'; DROP TABLE runs; --",
    'x" OR 1=1 --',
    "<script>alert(1)</script>",
    "run\x00with a nul",
    "名前 🚀 \u202e",
    "a" * 1000,
]


def test_hostile_names_are_kept_as_text_and_harm_nothing(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    ids = [store.save(NewRun("import", name=name, summary={"scenario": name}), records=[{"name": name}]) for name in HOSTILE_NAMES]
    by_id = {r.id: r for r in store.list()}
    for run_id, name in zip(ids, HOSTILE_NAMES):
        assert by_id[run_id].name == name[:200]  # names are cut at 200 characters
        assert store.records(run_id) == [{"name": name}]
    assert store.count() == len(HOSTILE_NAMES) and store.integrity() == "ok"


@pytest.mark.parametrize("raw", ["1 OR 1=1", "1; DROP TABLE runs", "-1", "0", "1e3", "0x10", " ", "", "１", "9" * 20, "2.5"])
def test_ids_that_are_not_positive_whole_numbers_are_refused(raw: str) -> None:
    with pytest.raises(StoreError, match="positive whole number"):
        check_id(raw)


def test_good_ids_read_as_numbers() -> None:
    assert [check_id(v) for v in ("1", " 42 ", 7, str(2**63 - 1))] == [1, 42, 7, 2**63 - 1]


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(StoreError, match="kind must be one of"):
        RunStore().save(NewRun("simulate'); DROP TABLE runs; --"))


def test_the_runs_list_line_says_the_tier_sizes_the_run_used_and_every_tier_behind_the_cpu() -> None:
    # --cpu-tokens 10000 overrides the default cpu_gb of 1.5 (Scenario.cpu_capacity_tokens reads cpu_tokens
    # first), so the line must say 10,000 tokens, not 1.5 GiB; and each storage tier is a tier of the run
    # (gpu+cpu+disk+nvme), so the line names it with its size as the disk's is named.
    scenario = Scenario(docs=2, cpu_tokens=10_000, disk_tokens=20_000, storage_tiers=["nvme:30000t:fifo"], passes="forward")
    assert scenario.cpu_gb == 1.5 and scenario.cpu_capacity_tokens == 10_000
    assert scenario_text(scenario) == "2 docs x 5,011 tok · GPU 21,520 tok · CPU 10,000 tok · disk 20,000 tok · nvme 30,000 tok · forward"
    # Sized in GiB, the CPU tier is said in GiB (LMCache's max_local_cpu_size), a storage tier too.
    in_gib = Scenario(docs=2, storage_tiers=["s3:8"], passes="forward")
    assert scenario_text(in_gib) == "2 docs x 5,011 tok · GPU 21,520 tok · CPU 1.5 GiB · s3 8 GiB · forward"


def test_a_run_whose_pid_another_process_now_has_is_marked_interrupted(tmp_path: Path) -> None:
    # The kernel reuses pids: a run's owner died and a live process (here, this one) got its number. The pid alone
    # would say "alive" for ever; the owner's recorded start time (ticks since boot, /proc/PID/stat field 22) is not
    # this process's, so the run is an orphan. Start time 0 is the boot instant itself, when no user process starts.
    store = RunStore(tmp_path / "runs.db")
    reused = store.open(NewRun("live"))
    mine = store.open(NewRun("live"))
    boot, pid, start = owner.this_process().split(":")  # type: ignore[union-attr]
    assert pid == str(os.getpid()) and start != "0"
    store._write(lambda conn: conn.execute("UPDATE runs SET owner = ? WHERE id = ?", (f"{boot}:{pid}:0", reused.id)))
    store.close()
    reopened = RunStore(tmp_path / "runs.db")  # opening the file is what marks them
    assert reopened.get(reused.id).info.status == "interrupted"
    assert reopened.get(mine.id).info.status == "running"  # this process's own, still at work
    # ... and one recorded on an earlier boot (another boot id) is gone too, whatever its pid and start time.
    later = reopened.open(NewRun("live"))
    reopened._write(lambda conn: conn.execute("UPDATE runs SET owner = ? WHERE id = ?", (f"x{boot}:{pid}:{start}", later.id)))
    assert reopened.mark_interrupted() == 1 and reopened.get(later.id).info.status == "interrupted"
