"""The runs database's commit thread: the proxy never waits for SQLite, one run's slow or failing writes neither
hold up nor lose another's, and a failure is logged and said on its run."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.runs import commits
from app.runs.recording import EventLog
from app.runs.store import NewRun, RunStore, RunWriter
from app.web.app import make_app
from app.web.context import Web
from live_servers import busy, emulator, run_kvscope, threaded_server

SLOW_S = 1.0  # what each write of the slow store takes, as a disk that syncs slowly would


class SlowStore(RunStore):
    """A runs database in memory whose every write transaction holds the writer for ``SLOW_S`` (``started`` is
    set when the first begins)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()

    def _write(self, work: Callable[..., Any]) -> Any:
        def slow(conn: Any) -> Any:
            self.started.set()
            time.sleep(SLOW_S)
            return work(conn)

        return super()._write(slow)


def within_margin(took_s: float, what: str) -> None:
    """Waiting for a commit on the event loop takes SLOW_S or more; a loop that never waits answers in milliseconds.
    Half of SLOW_S tells the two apart; a busy machine that lands between the two skips the test, saying so."""
    if SLOW_S / 2 <= took_s < SLOW_S and (reason := busy()):
        pytest.skip(f"{what} took {took_s:.3f} s, but {reason}")
    assert took_s < SLOW_S / 2, f"{what} took {took_s:.3f} s while a commit ran"


def slowest_health_check_while(url: str, work: Callable[[], None]) -> float:
    """The longest ``/healthz`` took, asked every 50 ms while ``work`` runs in a thread of its own."""
    thread = threading.Thread(target=work)
    thread.start()
    worst = 0.0
    while thread.is_alive():
        t0 = time.perf_counter()
        assert httpx.get(url + "/healthz", timeout=30).status_code == 200
        worst = max(worst, time.perf_counter() - t0)
        time.sleep(0.05)
    thread.join()
    return worst


def wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_slow_commit_never_holds_up_a_request_through_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {"prompt": "a b c", "max_tokens": 2, "stream": True}  # streamed: the watch measures its TTFT and keeps it
    with emulator("--speed", "50") as upstream:
        monkeypatch.setenv("KVSCOPE_UPSTREAM", f"emu={upstream}")
        store = SlowStore()
        with threaded_server(make_app(Web(runs=store))) as url:
            assert httpx.post(url + "/v1/completions", json=body, timeout=30).status_code == 200
            # The first request is being kept: its run opened, its record and events committed, SLOW_S each.
            assert store.started.wait(10)
            time.sleep(0.3)  # the first request's counters are read by now (milliseconds); its commits take seconds
            t0 = time.perf_counter()
            answer = httpx.post(url + "/v1/completions", json=body, timeout=30)
            took = time.perf_counter() - t0
            assert answer.status_code == 200
            # Committed on the event loop (before), the second request waited for the commit under way, up to
            # SLOW_S; off it, it takes what the emulator takes (milliseconds at --speed 50).
            within_margin(took, "a request through the proxy")

            # Both are kept, and a request is listed by the watch only once its record is committed.
            def listed_and_kept() -> bool:
                listed = len(httpx.get(url + "/api/watch/emu", timeout=30).json()["requests"])
                runs = store.list(kind="proxy")
                kept = runs[0].record_count if runs else 0
                assert listed <= kept, f"the watch lists {listed} requests, {kept} are committed"
                return listed == 2

            wait_for(listed_and_kept)
            # The second began while the first's commits ran, yet on fresh counters: its hits are attributed.
            requests = httpx.get(url + "/api/watch/emu", timeout=30).json()["requests"]
            assert [r["gpu_hit_tokens"] is not None for r in requests] == [True, True], requests


class Failing:
    """A run's writer whose batches of events fail (``fail``) or take ``delay_s`` each, the rest as the store's."""

    def __init__(self, writer: RunWriter, *, fail: int | None = None, delay_s: float = 0.0) -> None:
        self.writer, self.fail, self.delay_s = writer, fail, delay_s
        self.id = writer.id
        self.calls = 0

    def append_encoded_events(self, batches: list[str]) -> None:
        self.calls += 1
        time.sleep(self.delay_s)
        if self.fail is not None and self.calls == self.fail:
            raise RuntimeError("the disk returned garbage")
        self.writer.append_encoded_events(batches)

    def note_problem(self, problem: str) -> None:
        self.writer.note_problem(problem)


def batches(n: int, tag: str) -> list[list[dict[str, Any]]]:
    return [[{"type": "ttft", "run": tag, "seq": i}] for i in range(n)]


def send(log: EventLog, n: int, tag: str) -> None:
    for i in range(n):
        log.add_text("ttft", f'{{"type":"ttft","run":"{tag}","seq":{i}}}')


def test_a_failing_run_is_logged_and_marked_and_the_others_keep_every_row(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = RunStore(tmp_path / "runs.db")
    a, b = store.open(NewRun("simulate", name="a")), store.open(NewRun("simulate", name="b"))
    bad = EventLog(Failing(a, fail=1), "ttft", 0.0, in_background=True)  # type: ignore[arg-type]
    good = EventLog(b, "ttft", 0.0, in_background=True)
    with caplog.at_level(logging.WARNING):
        for i in range(5):  # interleaved, as two streams' requests are
            bad.add_text("ttft", f'{{"type":"ttft","run":"a","seq":{i}}}')
            good.add_text("ttft", f'{{"type":"ttft","run":"b","seq":{i}}}')
        bad.wait()
        good.wait()
    assert store.events(b.id) == batches(5, "b")
    # Before: the failed job's exception stayed in a future nobody read (only the last is waited for): a's first
    # batch was lost without a word, its later ones kept after the hole, and `problem` said nothing.
    assert bad.problem == "RuntimeError: the disk returned garbage"
    assert f"run {a.id} is kept only up to here" in caplog.text and "the disk returned garbage" in caplog.text
    assert store.get(a.id).info.summary["kept"] == bad.problem  # said on the run at once, before it finishes
    kept_a = store.events(a.id)
    assert kept_a == batches(len(kept_a), "a")  # a prefix of a's batches, never one with a hole before it
    store.close()
    # Where users see runs: the list (CLI and page) and `runs show`.
    said = f"kept only so far: {bad.problem}"
    assert said in run_kvscope(["runs", "--db", str(tmp_path / "runs.db"), "list"]).stdout
    assert said in run_kvscope(["runs", "--db", str(tmp_path / "runs.db"), "show", str(a.id)]).stdout
    with threaded_server(make_app(Web(runs=RunStore(tmp_path / "runs.db")))) as url:
        page = httpx.get(url + "/ui/runs", timeout=30).text
    assert f'<span data-role="kept-problem">{said}</span>' in page


def test_a_slow_run_floods_the_thread_and_another_run_still_waits_for_one_of_its_jobs(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    a, b = store.open(NewRun("simulate", name="a")), store.open(NewRun("simulate", name="b"))
    delay = 0.3
    slow = EventLog(Failing(a, delay_s=delay), "ttft", 0.0, in_background=True)  # type: ignore[arg-type]
    quick = EventLog(b, "ttft", 0.0, in_background=True)
    send(slow, 20, "a")  # 20 requests handed at once, faster than a's commits go
    t0 = time.perf_counter()
    send(quick, 1, "b")
    quick.wait()
    waited = time.perf_counter() - t0
    # Before: one job per batch, first come first served: b's waited behind all 20 of a's (20 x 0.3 = 6 s). Now a
    # run has at most one job queued, taking all it has waiting: b waits for at most a's first job and its own.
    assert waited < 6 * delay, f"b's one batch waited {waited:.2f} s behind a's"
    slow.wait()
    assert store.events(a.id) == batches(20, "a") and store.events(b.id) == batches(1, "b")
    store.close()


def test_a_kept_streams_end_awaits_its_commits_without_holding_up_the_server() -> None:
    store = SlowStore()
    with threaded_server(make_app(Web(runs=store))) as url:

        def stream() -> None:
            body = {"docs": 2, "passes": "forward"}
            with httpx.stream("POST", url + "/api/simulate/stream", json=body, timeout=60) as r:
                r.read()

        worst = slowest_health_check_while(url, stream)  # the stream's commits and close take SLOW_S each
        # Before: the stream's end waited for its last commits and its close on the event loop, and /healthz (and
        # every proxied request) waited with it, up to SLOW_S and more.
        within_margin(worst, "/healthz")
        (run,) = store.list(kind="simulate")
        assert (run.status, run.summary["requests"]) == ("done", 4)  # 2 documents x 1 pass x 2 configurations


def test_a_commit_is_made_though_the_task_awaiting_it_is_cancelled(tmp_path: Path) -> None:
    """A stream's client that leaves cancels the task awaiting its run's commit: the commit is made all the same,
    and the run's later work too."""
    store = RunStore(tmp_path / "runs.db")
    a = store.open(NewRun("simulate", name="a"))
    log = EventLog(a, "ttft", 0.0, in_background=True)
    gate = threading.Event()
    commits.THREAD.submit(gate.wait, 30)  # the thread is busy: a's job waits, not started
    send(log, 1, "a")

    async def leave() -> None:
        waiting = asyncio.ensure_future(asyncio.wrap_future(log.commits.done()))
        await asyncio.sleep(0.01)
        waiting.cancel()
        await asyncio.sleep(0.01)

    asyncio.run(leave())
    gate.set()
    log.add_text("ttft", '{"type":"ttft","run":"a","seq":1}')
    log.wait()  # before: the job itself was cancelled, never ran, and left the run's queue stuck (CancelledError)
    assert store.events(a.id) == batches(2, "a")
    store.close()


def test_a_kept_live_run_never_holds_up_the_server_and_keeps_every_answered_request() -> None:
    from app.live.targets import Target

    store = SlowStore()
    with emulator("--no-cpu-tier", "--speed", "50") as gpu:
        web = Web(runs=store, live_targets=(Target("gpu", gpu),))
        with threaded_server(make_app(web)) as url:
            created = httpx.post(url + "/api/live/runs", json={"targets": ["gpu"], "docs": 2, "passes": "forward,forward"},
                                 timeout=60)
            assert created.status_code == 201, created.text
            run_id = created.json()["run_id"]
            answered: list[str] = []

            def stream() -> None:
                with httpx.stream("GET", url + created.json()["events"], timeout=60) as r:
                    answered.extend(line for line in r.iter_lines() if line.startswith("event: measured"))

            worst = slowest_health_check_while(url, stream)  # each request's record and events: SLOW_S each
            # Before: each record was committed on the event loop, which /healthz (and every other target's request
            # being timed, and every proxied request) waited for, SLOW_S at a time.
            within_margin(worst, "/healthz")
            assert len(answered) == 4  # 2 documents x 2 passes, one target
            run = store.get(run_id)
            # Each request's record was committed before its `measured` event was sent, and the run closed before
            # the stream's end.
            assert (run.info.status, run.info.record_count) == ("done", 4)
