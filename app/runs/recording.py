"""What each kind of run keeps, built from what the feature already has: no run is simulated again to be saved.

A simulated run keeps its scenario, cost constants and result (and, when it
was streamed to the page, its step events, one batch per request, from which
its result is rebuilt); a live run its measurement rows as they arrive; a
replay its result and the trace's identity; an analysis or calibration the
parsed rows, the file's sha256 and size, and its content only up to
``UPLOAD_KEEP_BYTES``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from app.runs import commits
from app.runs.commits import Commits, kept_only_so_far
from app.runs.store import NewRun, Run, RunStore, RunWriter, StoreError
from sim.bounds import jsontext
from sim.calibration import measurements
from sim.calibration.measurements import Measurement
from sim.engine.events import Event, Measured
from sim.engine.result import comparison, pass_summaries, run_totals
from sim.sched.serving import Serving
from sim.simulation.run import scenario_summary
from sim.workloads.scenario import Scenario

UPLOAD_KEEP_BYTES = 1 * 2**20  # an upload's content is kept up to this size; above it only its sha256 and size


def scenario_fields(scenario: Scenario) -> dict[str, Any]:
    """What reopens the scenario: ``Scenario.model_validate`` of it gives it back."""
    return scenario.model_dump(mode="json")


def scenario_text(scenario: Scenario) -> str:
    """One line for the runs list: documents, GPU and offload sizes, passes."""
    parts = [f"{scenario.docs} docs x {scenario.doc_tokens:,} tok", f"GPU {scenario.gpu_tokens:,} tok"]
    if scenario.cpu_capacity_tokens:
        # cpu_tokens overrides cpu_gb (which keeps its default beside it): say the size the run used.
        cpu_in_gib = scenario.cpu_tokens is None and scenario.cpu_gb
        parts.append(f"CPU {scenario.cpu_gb} GiB" if cpu_in_gib else f"CPU {scenario.cpu_capacity_tokens:,} tok")
    if scenario.disk_capacity_tokens:
        parts.append(f"disk {scenario.disk_capacity_tokens:,} tok")
    parts += [f"{t.name} {t.tokens:,} tok" if t.tokens is not None else f"{t.name} {t.gb:g} GiB" for t in scenario.storage_tiers]
    parts.append(",".join(p.text for p in scenario.passes))
    return " · ".join(parts)


def figures(rows: Sequence[Measurement]) -> dict[str, Any]:
    """The headline figures of per-request rows: requests, configurations, the best p50 speed-up."""
    configs: dict[str, list[Measurement]] = {}
    for r in rows:
        configs.setdefault(r.config, []).append(r)
    return headline([{"name": c, "passes": pass_summaries(rs)} for c, rs in configs.items()], len(rows))


def headline(runs: list[dict[str, Any]], requests: int) -> dict[str, Any]:
    """Requests, configurations and the best p50 speed-up over the first configuration, from per-pass summaries."""
    speedups = comparison(runs, baseline=runs[0]["name"]) if runs else []
    best = max(speedups, key=lambda s: s["p50_speedup"], default=None)
    return {
        "requests": requests,
        "configs": [r["name"] for r in runs],
        "best_speedup": None if best is None else {k: best[k] for k in ("pass", "baseline", "candidate", "p50_speedup")},
    }


def summary(scenario: Scenario | None, rows: Sequence[Measurement], **extra: Any) -> dict[str, Any]:
    return {"scenario": scenario_text(scenario) if scenario else None, **figures(rows), **extra}


# -- simulated runs -------------------------------------------------------------


def save_simulation(store: RunStore, scenario: Scenario, result: dict[str, Any], *, name: str = "", source: dict[str, Any] | None = None) -> int:
    """A finished ``simulate()`` result (``/api/simulate``, ``kvscope simulate``, an imported ``--json``)."""
    return store.save(simulation_run(scenario, result, name=name, source=source), result=result)


def simulation_run(scenario: Scenario, result: dict[str, Any], *, name: str = "", source: dict[str, Any] | None = None) -> NewRun:
    """What ``save_simulation`` keeps of the run beside its result."""
    return NewRun(
        "simulate", name=name or scenario_text(scenario), scenario=scenario_fields(scenario),
        costs=result["scenario"].get("costs"), summary=summary(scenario, measurements.from_result(result)), source=source,
    )


def encoded(event: Event) -> tuple[dict[str, Any], str]:
    """An event's JSON form and its text: the one encoding its SSE message sends and its kept batch holds."""
    data = event.to_dict()
    return data, jsontext.dumps(data)


class EventLog:
    """A stream's events, kept as they are sent: one batch per request (ended by an event of kind ``ends_with``),
    each event encoded once for the client and the database alike, and held only as that text until its batch is
    committed. Batches are committed at most ``every_s`` apart (0: each request as it ends), on the calling thread,
    or, ``in_background``, on the commit thread (``app.runs.commits``), which ``wait`` waits for. A store that fails
    or fills up never stops the stream: ``problem`` says why the run is kept only so far (logged, and said on the
    run at once)."""

    def __init__(self, writer: RunWriter | None, ends_with: str, every_s: float, *, in_background: bool = False) -> None:
        self.writer = writer
        self.ends_with = ends_with
        self.every_s = every_s
        self.in_background = in_background
        self.texts: list[str] = []  # the open batch's events
        self.pending: list[list[str]] = []  # ended batches not yet committed
        self.flushed_at = time.monotonic()
        self.commits: Commits[list[str]] = Commits(self._commit, self._failed)
        self.problem: str | None = None

    def add(self, event: Event) -> tuple[dict[str, Any], str]:
        """Keep the event; its JSON form and text, for the stream to send as they are."""
        data, text = encoded(event)
        self.add_text(event.kind, text)
        return data, text

    def add_text(self, kind: str, text: str) -> None:
        """Keep an event already encoded (``encoded``) by whoever sends it."""
        self.texts.append(text)
        if kind == self.ends_with:
            self.end_request()

    def end_request(self) -> None:
        if not self.texts:
            return
        self.pending.append(self.texts)
        self.texts = []
        if not self.every_s or time.monotonic() - self.flushed_at >= self.every_s:
            self.flush()

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        self.flushed_at = time.monotonic()
        if self.writer is None or self.problem is not None or not pending:
            return
        if self.in_background:
            self.commits.hand(pending)
        else:
            try:
                self._commit(pending)
            except Exception as exc:  # noqa: BLE001 - logged and said on the run; the stream goes on
                self._failed(exc)

    def _commit(self, batches: list[list[str]]) -> None:
        if self.writer is None or self.problem is not None:
            return
        self.writer.append_encoded_events(["[" + ",".join(texts) + "]" for texts in batches])

    def _failed(self, exc: Exception) -> None:
        if self.problem is None:  # the first failure says why; later batches are not tried
            self.problem = kept_only_so_far(self.writer, exc)

    def wait(self) -> None:
        """Until every batch handed to the commit thread is committed (or has failed, and ``problem`` says why)."""
        self.commits.done().result()  # the thread runs a run's jobs in order: the last one done, all are


class StreamRecorder:
    """Keeps a simulation's step stream as it is sent, one batch of events per request (ended by its ``ttft``),
    committed at most ``FLUSH_EVERY_S`` apart (a paced stream commits every request; one at full speed a few
    times), on the commit thread, so that keeping costs the event loop only a list append per event; a crash
    loses at most those last moments of a simulation, which can be run again."""

    FLUSH_EVERY_S = 0.05

    def __init__(self, store: RunStore, scenario: Scenario, *, kind: str = "simulate", serving: Serving | None = None) -> None:
        self.scenario = scenario
        # Served under load (the stepped engine's stream): said in its name, its settings kept as given to play it again.
        name = scenario_text(scenario) + (f" · {serving.label()}" if serving is not None else "")
        source = {"serving": serving.model_dump(mode="json", exclude_none=True)} if serving is not None else None
        self.writer: RunWriter | None = store.open(NewRun(
            kind, name=name, scenario=scenario_fields(scenario),
            costs=scenario_summary(scenario)["costs"], summary=summary(scenario, []), source=source,
        ))
        self.log = EventLog(self.writer, "ttft", self.FLUSH_EVERY_S, in_background=True)
        self.requests = 0
        self.passes: dict[str, list[dict[str, Any]]] = {}  # run -> its `pass` events' summaries

    @property
    def run_id(self) -> int | None:
        return None if self.writer is None else self.writer.id

    @property
    def problem(self) -> str | None:
        return self.log.problem

    def add(self, event: Event) -> tuple[dict[str, Any], str]:
        """Keep the event; its JSON form and text, for the stream to send as they are."""
        data, text = encoded(event)
        self.add_text(event.kind, text)
        return data, text

    def add_text(self, kind: str, text: str) -> None:
        """Keep an event already encoded (``encoded``, in the worker that simulated it), as the stream sends it."""
        self.log.add_text(kind, text)
        if kind == "ttft":
            self.requests += 1
        elif kind == "pass":  # a few per run: read back for the headline
            data = json.loads(text)
            self.passes.setdefault(data["run"], []).append(data["summary"])

    def settled(self) -> Future[None]:
        """Hand what is held to the commit thread: a future done once it is committed (``problem`` is then final),
        for the event loop to await (``asyncio.wrap_future``), never to wait for."""
        self.log.end_request()
        self.log.flush()
        return self.log.commits.done()

    def settle(self) -> None:
        """``settled``, waited for (off the event loop)."""
        self.settled().result()

    def finish_later(self, status: str) -> Future[None]:
        """The run's status and headline (from its `pass` events), committed on the commit thread after all it
        holds: a future done then, so that a stream awaits it before its end and a client that saw the end reads
        the run as finished. Its result is rebuilt from the events when read (``result_of``), not here, so that
        keeping a stream costs it as little as possible."""
        self.settled()
        if self.writer is None:
            return self.log.commits.done()
        return commits.submit(self._finish, status)

    def finish(self, status: str) -> None:
        """``finish_later``, waited for (off the event loop)."""
        self.finish_later(status).result()

    def _finish(self, status: str) -> None:
        assert self.writer is not None
        runs = [{"name": name, "passes": passes} for name, passes in self.passes.items()]
        kept = summary(self.scenario, [], kept=self.problem) | headline(runs, self.requests)
        try:
            self.writer.finish(status=status, summary=kept)
        except StoreError as exc:
            self.log.problem = kept_only_so_far(None, exc)


def _flat(batches: Iterable[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    for batch in batches:
        yield from batch


def _requests_from_events(batches: Iterable[list[dict[str, Any]]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(run, request record as ``simulate()`` gives it) for each ``ttft``, with its ``request`` and ``evict`` events."""
    requests: dict[tuple[str, int], dict[str, Any]] = {}
    evicted: dict[tuple[str, int], list[dict[str, Any]]] = {}
    explained: dict[tuple[str, int], dict[str, Any]] = {}
    for e in _flat(batches):
        kind, key = e["type"], (e["run"], e.get("seq"))
        if kind == "request":
            requests[key] = e
        elif kind == "evict":
            evicted.setdefault(key, []).append({k: e[k] for k in ("tier", "doc", "tokens", "start", "end", "part")})
        elif kind == "explain":
            explained[key] = e
        elif kind == "ttft":
            r = requests.get(key, {})
            record = {
                "seq": e["seq"], "pass": e["pass"], "order": r.get("order", ""), "doc": e["doc"],
                "prompt_tokens": r.get("prompt_tokens", 0), "gpu_hit_tokens": e["gpu_hit_tokens"],
                "cpu_hit_tokens": e["cpu_hit_tokens"], "disk_hit_tokens": e["disk_hit_tokens"],
                # Per offload tier; events kept before tiers were a list carry the CPU's and the disk's alone.
                "tier_hits": e.get("tier_hits")
                or {t: e[f"{t}_hit_tokens"] for t in ("cpu", "disk") if e[f"{t}_hit_tokens"]},
                "computed_tokens": e["computed_tokens"], "stored_tokens": e.get("stored_tokens", 0),
                "ttft_ms": e["ttft_ms"], "source": e["source"], "evicted": evicted.get(key, []),
            }
            if (x := explained.get(key)) is not None:  # the causes of its misses (sim.explain), as simulate() adds them
                record.update(
                    gpu_miss=x["gpu_miss"], computed=x["computed"], evicted_misses=x["evicted"],
                    infinite_hit_tokens=x["infinite_hit_tokens"],
                )
            yield e["run"], record


def rows_from_events(batches: Iterable[list[dict[str, Any]]]) -> list[Measurement]:
    """The per-request rows a stream carried (a stream cut short has only its finished requests)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for run, record in _requests_from_events(batches):
        runs.setdefault(run, []).append(record)
    return measurements.from_result({"runs": [{"name": n, "requests": rs} for n, rs in runs.items()]})


def result_from_events(scenario: Scenario, batches: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """``simulate()``'s JSON shape from a stream's events, without simulating anything: tiers from ``run``, requests
    from ``request``, ``evict``, ``explain`` and ``ttft``, passes and totals as its ``pass`` and ``done`` events
    sent them (for a stream cut short, the passes it finished, and totals of the requests it sent)."""
    runs: dict[str, dict[str, Any]] = {}
    sent_totals: dict[str, dict[str, Any]] = {}
    for e in _flat(batches):
        if e["type"] == "run":
            runs[e["run"]] = {"name": e["run"], "tiers": e["tiers"], "requests": [], "passes": []}
        elif e["type"] == "pass" and e["run"] in runs:
            runs[e["run"]]["passes"].append(e["summary"])
        elif e["type"] == "done":
            sent_totals[e["run"]] = e["totals"]
    for run, record in _requests_from_events(batches):
        runs[run]["requests"].append(record)
    for name, run in runs.items():
        run["totals"] = sent_totals.get(name) or run_totals(measurements.from_result({"runs": [run]}))
    out = list(runs.values())
    return {"scenario": scenario_summary(scenario), "runs": out, "comparison": comparison(out)}


# -- measured and uploaded runs ---------------------------------------------------


class LiveRecorder:
    """Keeps a live run's measurements as each request is answered (``sink``, given to ``LiveRun``), and its stream's
    events, a batch per answered request, all committed on the commit thread (``app.runs.commits``): ``sink``'s
    future, which live mode awaits before it sends the request's ``measured`` event and the target's next request,
    is done once the record is committed, so the event loop, and the other targets' requests being timed on it,
    never wait for SQLite, and a crash loses at most the requests in flight. ``finish_later`` records how the run
    ended and its figures. A store that fails or fills up never stops the measuring: ``problem`` says why the run
    is kept only so far (logged, and said on the run at once)."""

    def __init__(self, store: RunStore | None, scenario: Scenario, targets: list[str], options: dict[str, Any]) -> None:
        self.scenario = scenario
        self.rows: list[Measurement] = []
        self.problem: str | None = None
        self.writer: RunWriter | None = None
        try:  # no store (``kvscope live --no-save``): measured and streamed, never kept
            self.writer = None if store is None else store.open(NewRun(
                "live", name=" vs ".join(targets) + " · " + scenario_text(scenario), scenario=scenario_fields(scenario),
                costs=scenario_summary(scenario)["costs"], summary=summary(scenario, [], targets=targets),
                source={"targets": targets, **options},
            ))
        except StoreError as exc:
            self.problem = str(exc)
        self.records: Commits[dict[str, Any]] = Commits(self._append, self._failed)
        # The stream's events too (the page replays a kept live run from them), a batch per answered request.
        self.log = EventLog(self.writer, "measured", 0.0, in_background=True)
        self.closing = False  # finish_later was called: a request still answering as the run stops is not kept

    @property
    def run_id(self) -> int | None:
        return None if self.writer is None else self.writer.id

    def add(self, event: Event) -> tuple[dict[str, Any], str]:
        """Keep one of the run's stream events (when it is streamed: the page's live runs)."""
        return encoded(event) if self.closing else self.log.add(event)

    def sink(self, row: Measurement) -> Future[None] | None:
        """Keep the measurement; a future done once it is committed (None when the run is not kept)."""
        if self.closing:
            return None
        # The target's name, never its URL: the server answers kept runs to browsers, which never see URLs.
        row = replace(row, target=row.config)
        self.rows.append(row)
        if self.writer is None or self.problem is not None:
            return None
        return self.records.hand([row.row()])

    def _append(self, rows: list[dict[str, Any]]) -> None:
        if self.writer is not None and self.problem is None:
            self.writer.append_many(rows)  # those answered while the last commit ran: one transaction

    def _failed(self, exc: Exception) -> None:
        if self.problem is None:
            self.problem = kept_only_so_far(self.writer, exc)

    def finish_later(self, status: str) -> Future[None]:
        """Close the run on the commit thread, after all it was handed: a future done then."""
        self.closing = True
        self.log.end_request()
        self.log.flush()
        return commits.submit(self._finish, status)

    def finish(self, status: str) -> None:
        """``finish_later``, waited for (off the event loop)."""
        self.finish_later(status).result()

    def _finish(self, status: str) -> None:
        if self.writer is None:
            return
        try:
            self.writer.finish(status=status, summary=summary(self.scenario, self.rows, kept=self.problem or self.log.problem))
        except StoreError as exc:
            self.problem = kept_only_so_far(None, exc)


class ProxyRecorder:
    """Keeps what a watched upstream's proxy sees, as a ``proxy`` run opened on its first event: each proxied
    request's measurement as a record, and the watch's events (KV stores and evictions, occupancy, the twin's
    predictions, measured TTFTs, divergences) in batches, one ended by each measured request (or every
    ``MAX_BATCH`` events while none is), each committed as it ends. ``add`` is called from the event loop and the
    KV events' thread alike and never waits for SQLite: every write is the commit thread's (``app.runs.commits``);
    ``kept`` is a future done once all added so far is committed, which the watch awaits before it lists a request,
    so a crash loses at most the requests in flight. A store that fails or fills up never stops the proxy:
    ``problem`` says why the run is kept only so far (logged, and said on the run at once)."""

    MAX_BATCH = 500

    def __init__(self, store: RunStore, upstream: str, source: dict[str, Any]) -> None:
        self.store = store
        self.upstream = upstream
        self.source = source
        self.writer: RunWriter | None = None
        self.log: EventLog | None = None
        self.rows: list[Measurement] = []
        self.problem: str | None = None
        self.commits: Commits[tuple[Event, str]] = Commits(self._keep, self._failed)

    @property
    def run_id(self) -> int | None:
        return None if self.writer is None else self.writer.id

    def add(self, event: Event) -> None:
        """Hand the event to the commit thread (encoded here: it is sent as it is kept)."""
        self.commits.hand([(event, encoded(event)[1])])

    def kept(self) -> Future[None]:
        return self.commits.done()

    # -- on the commit thread ----------------------------------------------------------

    def _open(self) -> EventLog | None:
        if self.log is None and self.problem is None:
            try:
                self.writer = self.store.open(NewRun(
                    "proxy", name=f"{self.upstream} · proxied requests", summary=_proxy_summary(self.upstream, []),
                    source={"upstream": self.upstream, **self.source},
                ))
            except StoreError as exc:
                self.problem = kept_only_so_far(None, exc)
                return None
            self.log = EventLog(self.writer, Measured.kind, 0.0)
        return self.log

    def _keep(self, items: list[tuple[Event, str]]) -> None:
        log = self._open()
        if log is None or self.writer is None or self.problem is not None:  # kept up to its first failure
            return
        for event, text in items:
            if isinstance(event, Measured):
                row = Measurement(event.run, event.pass_, event.order, event.seq, event.doc, event.prompt_tokens,
                                  event.ttft_ms, event.gpu_hit_tokens, event.cpu_hit_tokens, event.computed_tokens,
                                  "live", event.run, event.model, event.started_at)
                self.rows.append(row)
                if self.problem is None and log.problem is None:
                    self.writer.append(row.row())
            log.add_text(event.kind, text)
            if len(log.texts) >= self.MAX_BATCH:
                log.end_request()

    def _failed(self, exc: Exception) -> None:
        if self.problem is None:
            self.problem = kept_only_so_far(self.writer, exc)

    def finish(self, status: str = "done") -> None:
        """Commit what is left and close the run (waits for the commit thread: call it off the event loop)."""
        commits.submit(self._finish, status).result()  # after every job handed before it

    def _finish(self, status: str) -> None:
        if self.log is None or self.writer is None:
            return
        self.log.end_request()
        self.log.flush()
        kept = self.problem or self.log.problem
        try:
            self.writer.finish(status=status, summary=_proxy_summary(self.upstream, self.rows, kept))
        except StoreError as exc:
            self.problem = kept_only_so_far(None, exc)


def _proxy_summary(upstream: str, rows: list[Measurement], kept: str | None = None) -> dict[str, Any]:
    return {"scenario": f"requests proxied to {upstream}", **figures(rows), "kept": kept}


class WatchLines:
    """Where ``kvscope watch`` keeps its KV events: the recording's lines (``sim.kvevents.recording.Recorder``
    writes them here as to a ``--record`` file) as a ``watch`` run's records, committed at most ``every_s`` apart
    (a crash loses at most that much of the stream) and at ``finish``. A store that fails or fills up never stops
    the watching: ``problem`` says why the run is kept only so far."""

    def __init__(self, store: RunStore, endpoint: str, every_s: float = 1.0) -> None:
        self.endpoint = endpoint
        self.every_s = every_s
        self.lines: list[str] = []
        self.kept = 0
        self.problem: str | None = None
        self.flushed_at = time.monotonic()
        self.writer: RunWriter = store.open(NewRun(
            "watch", name=f"KV events of {endpoint}", summary=self._summary(), source={"kv_events": endpoint},
        ))

    @property
    def run_id(self) -> int:
        return self.writer.id

    def _summary(self) -> dict[str, Any]:
        return {"scenario": f"KV events of {self.endpoint}", "requests": 0, "configs": [], "best_speedup": None,
                "events": self.kept, "kept": self.problem}

    def write(self, text: str) -> int:
        self.lines.extend(line for line in text.split("\n") if line)
        return len(text)

    def flush(self) -> None:
        """The Recorder's end of a batch: commit what came since the last commit, if ``every_s`` has passed."""
        if time.monotonic() - self.flushed_at >= self.every_s:
            self.commit()

    def commit(self) -> None:
        lines, self.lines = self.lines, []
        self.flushed_at = time.monotonic()
        if not lines or self.problem is not None:
            return
        try:
            self.writer.append_encoded(lines)
            self.kept += len(lines)
        except StoreError as exc:
            self.problem = str(exc)

    def finish(self, status: str = "done") -> None:
        self.commit()
        try:
            self.writer.finish(status=status, summary=self._summary())
        except StoreError as exc:
            self.problem = self.problem or str(exc)


def upload_source(files: list[tuple[str, bytes]]) -> dict[str, Any]:
    """Which files a run was read from, and whether their content is kept (it is up to ``UPLOAD_KEEP_BYTES``)."""
    big = [name for name, content in files if len(content) > UPLOAD_KEEP_BYTES]
    note = None
    if big:
        note = f"{', '.join(big)}: over {UPLOAD_KEEP_BYTES // 2**20} MiB, so only the sha256, size and parsed rows are kept"
    return {"files": [name for name, _ in files], "content_kept": not big, "note": note}


def save_rows(
    store: RunStore, kind: str, files: list[tuple[str, bytes]], rows: list[Measurement], *,
    result: Any = None, costs: dict[str, Any] | None = None, scenario: Scenario | None = None,
    failures: list[dict[str, Any]] | None = None,
) -> int:
    """An analysis, calibration or import of measurement files: the parsed rows, each file's identity, and the
    failed requests left out of the rows (long_doc_qa's, ``sim.calibration.readers``): their count in the summary, each in the source."""
    run = rows_run(kind, files, rows, costs=costs, scenario=scenario, failures=failures)
    return store.save(run, result=result, records=[r.row() for r in rows], uploads=files, keep_upload_bytes=UPLOAD_KEEP_BYTES)


def rows_run(
    kind: str, files: list[tuple[str, bytes]], rows: Sequence[Measurement], *, costs: dict[str, Any] | None = None,
    scenario: Scenario | None = None, failures: list[dict[str, Any]] | None = None,
) -> NewRun:
    """What ``save_rows`` keeps of the run beside its rows (of which the per-pass figures read config, pass, order,
    TTFT and hits)."""
    extra = {"failed": len(failures)} if failures else {}
    source = {**upload_source(files), **({"failures": failures} if failures else {})}
    return NewRun(
        kind, name=" + ".join(name for name, _ in files), scenario=scenario_fields(scenario) if scenario else None,
        costs=costs, summary=summary(scenario, rows, **extra), source=source,
    )


def save_replay(store: RunStore, result: dict[str, Any], files: list[tuple[str, bytes]]) -> int:
    """A trace replay: its result (tiers, per-request records, timeline) and the trace's identity (its sha256 is in
    the result's ``trace``); an uploaded trace is kept as an upload is."""
    trace = result.get("trace", {})
    figures = {"requests": len(result.get("requests", [])), "configs": [result.get("run")], "best_speedup": None,
               "hit_ratios": {t["name"]: t.get("hit_ratio") for t in result.get("tiers", []) if "name" in t}}
    run = NewRun(
        "replay", name=str(trace.get("name", "trace")), summary={"scenario": _replay_text(result), **figures},
        source={"trace": trace, **(upload_source(files) if files else {})},
    )
    return store.save(run, result=result, uploads=files, keep_upload_bytes=UPLOAD_KEEP_BYTES)


def _replay_text(result: dict[str, Any]) -> str:
    trace = result.get("trace", {})
    tiers = " · ".join(f"{t.get('name')} {t.get('capacity_blocks', 0):,} blocks" for t in result.get("tiers", []))
    return f"trace {trace.get('name', '')}: {trace.get('requests', 0):,} requests · {tiers}"


def keep(work: Any) -> tuple[int | None, str | None]:
    """(run id, None), or (None, why not): a feature's answer never fails because its run could not be kept."""
    try:
        return int(work()), None
    except StoreError as exc:
        return None, str(exc)


RUN_HEADER = "X-Kvscope-Run"  # the kept run's id, on every answer that kept one
RUN_ERROR_HEADER = "X-Kvscope-Run-Error"  # why the answer's run was not kept


def run_headers(run_id: int | None, error: str | None = None) -> dict[str, str]:
    """The headers naming the kept run (answers keep the shape the CLI's --json prints, so the id is not in them)."""
    if run_id is not None:
        return {RUN_HEADER: str(run_id)}
    return {RUN_ERROR_HEADER: (error or "not kept").encode("ascii", "backslashreplace").decode()[:500]}


def result_of(store: RunStore, run: Run) -> Any:
    """A run's result: as kept, or, for a streamed simulation (kept as events), rebuilt from its events."""
    if run.result is not None or run.info.kind != "simulate" or not run.scenario or not run.info.event_count:
        return run.result
    try:
        scenario = Scenario.model_validate(run.scenario)
    except ValueError:
        return None
    return result_from_events(scenario, store.events(run.id))


def rows_of(store: RunStore, run_id: int) -> list[Measurement]:
    """Every request of a run as measurement-file rows, whatever its kind (a ``watch`` run has none: its records
    are KV events)."""
    if store.get(run_id).info.kind == "watch":
        return []
    stored = store.records(run_id)
    if stored:
        return [Measurement.parse(r, i) for i, r in enumerate(stored, start=1)]
    run = store.get(run_id)
    result = run.result
    if isinstance(result, dict) and isinstance(result.get("runs"), list):
        # As ``kvscope simulate --out`` writes them, model included.
        return measurements.from_result(result, model=(result.get("scenario") or {}).get("model"))
    if isinstance(result, dict) and isinstance(result.get("requests"), list):  # a trace replay
        config = str(result.get("run", "replay"))
        return [
            Measurement(config, 1, "trace", r["seq"], r.get("doc", -1), r["prompt_tokens"], r["ttft_ms"],
                        r.get("gpu_hit_tokens"), r.get("cpu_hit_tokens"), r.get("computed_tokens"), "sim")
            for r in result["requests"]
        ]
    if run.info.event_count:
        return rows_from_events(store.events(run_id))
    return []


def events_from_result(result: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """For a simulated run kept without its step events (``/api/simulate``, an import): the events its stored
    result determines (``run``, then per request ``request`` and ``ttft``, ``pass``, ``done``), one batch per
    request. Lookups, loads, stores, evictions and occupancy are not in a result, so lanes stay empty."""
    batches: list[list[dict[str, Any]]] = [[
        {"type": "run", "run": run["name"], "tiers": run["tiers"], "requests": len(run["requests"])} for run in result["runs"]
    ]]
    passes = {run["name"]: {p["pass"]: p for p in run["passes"]} for run in result["runs"]}
    longest = max((len(run["requests"]) for run in result["runs"]), default=0)
    for i in range(longest):
        for run in result["runs"]:
            if i >= len(run["requests"]):
                continue
            r, name = run["requests"][i], run["name"]
            batch = [
                {"type": "request", "run": name, "seq": r["seq"], "pass": r["pass"], "order": r["order"], "doc": r["doc"],
                 "prompt_tokens": r["prompt_tokens"]},
                {"type": "ttft", "run": name, "seq": r["seq"], "pass": r["pass"], "doc": r["doc"], "ttft_ms": r["ttft_ms"],
                 "source": r.get("source", "computed"), **{k: r.get(k, 0) for k in (
                     "gpu_hit_tokens", "cpu_hit_tokens", "disk_hit_tokens", "computed_tokens", "stored_tokens")},
                 "tier_hits": r.get("tier_hits", {})},
            ]
            last = i + 1 == len(run["requests"]) or run["requests"][i + 1]["pass"] != r["pass"]
            if last:
                batch.append({"type": "pass", "run": name, "summary": passes[name][r["pass"]]})
            if i + 1 == len(run["requests"]):
                batch.append({"type": "done", "run": name, "requests": len(run["requests"]), "totals": run.get("totals", {})})
            batches.append(batch)
    return batches
