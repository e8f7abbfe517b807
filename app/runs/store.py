"""``RunStore``: the runs database (SQLite, WAL), one writer connection behind a lock, readers per thread.

Every write is one transaction on the writer connection; every value reaches
SQL as a parameter. A run is either saved whole (``save``) or opened and
appended to as its requests finish (``open`` -> ``RunWriter.append``), each
append committed at once, so a crash loses at most the request in flight.

Bounds: ``max_records`` rows per run (records and event batches each) and
``max_bytes`` of live data in the file; a write past either raises
``StoreFull`` with what to do. Old runs are pruned (oldest first) only when
the user set a retention, ``keep_runs``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from app.runs import schema
from app.runs.paths import ENV_DB, ENV_KEEP, ENV_MAX_MB, MEMORY, default_path  # noqa: F401  # re-exported


DEFAULT_MAX_BYTES = 2 * 2**30
DEFAULT_MAX_RECORDS = 200_000  # per run: a 1,000-document x 100-pass live run, twice over
BUSY_TIMEOUT_MS = 10_000  # another process's write transaction is waited for this long
KINDS = ("simulate", "live", "replay", "analysis", "calibration", "watch", "proxy", "import")
STATUSES = ("running", "done", "stopped", "failed", "interrupted")
MAX_ID = 2**63 - 1
MAX_NAME_CHARS = 200
MAX_PROBLEM_CHARS = 500  # of why a run is kept only so far
MAX_LIST = 10_000


class StoreError(Exception):
    """A run could not be read or written; the message says why."""


class StoreFull(StoreError):
    """A bound (rows per run, database size) would be passed."""


class NoSuchRun(StoreError):
    def __init__(self, run_id: int) -> None:
        super().__init__(f"no run {run_id}")
        self.run_id = run_id


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def check_id(value: Any) -> int:
    """A run id as given by a user (``"12"``): a positive integer, else ``StoreError``."""
    text = str(value).strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19 or not 1 <= int(text) <= MAX_ID:
        raise StoreError(f"run id must be a positive whole number, got {str(value)[:40]!r}")
    return int(text)


_ENCODER = msgspec.json.Encoder()


def _dump(value: Any) -> str | None:
    """Compact JSON text. msgspec writes what ``json.dumps(value, separators=(",", ":"))`` writes, a tenth of the
    time (a 200-document run's result: 1 ms, not 10; make bench), except that NaN and infinities become null
    (SQLite's JSON functions, which list runs, refuse them anyway); what msgspec cannot encode (an integer past
    64 bits, an odd type) goes to the json module, which says what it is."""
    if value is None:
        return None
    try:
        return _ENCODER.encode(value).decode()
    except (msgspec.EncodeError, OverflowError, TypeError):
        return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class NewRun:
    """What a run is, given when it is saved or opened: its kind, a name, and what it ran."""

    kind: str  # one of KINDS
    name: str = ""
    scenario: dict[str, Any] | None = None  # Scenario.model_dump(mode="json")
    costs: dict[str, Any] | None = None  # the cost constants it ran with
    summary: dict[str, Any] | None = None  # what the runs list shows: small
    source: dict[str, Any] | None = None  # where its input came from


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A run as the list shows it: no result, records or events."""

    id: int
    kind: str
    name: str
    status: str
    created_at: str
    finished_at: str | None
    summary: dict[str, Any]
    record_count: int
    event_count: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "name": self.name, "status": self.status,
            "created_at": self.created_at, "finished_at": self.finished_at, "summary": self.summary,
            "records": self.record_count, "event_batches": self.event_count,
        }


@dataclass(frozen=True, slots=True)
class Run:
    """A whole run: its list entry plus scenario, costs, result and source (records and events are read apart)."""

    info: RunInfo
    scenario: dict[str, Any] | None
    costs: dict[str, Any] | None
    result: Any
    source: dict[str, Any] | None

    @property
    def id(self) -> int:
        return self.info.id

    def to_dict(self) -> dict[str, Any]:
        return {**self.info.to_dict(), "scenario": self.scenario, "costs": self.costs, "source": self.source, "result": self.result}


# Bytes of pages in use, in one statement (the pragmas as table-valued functions).
_USED_BYTES = (
    "SELECT ((SELECT page_count FROM pragma_page_count()) - (SELECT freelist_count FROM pragma_freelist_count())) "
    "* (SELECT page_size FROM pragma_page_size())"
)
_INFO_COLUMNS = "id, kind, name, status, created_at, finished_at, summary, record_count, event_count"


def _info(row: tuple[Any, ...]) -> RunInfo:
    return RunInfo(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]), row[7], row[8])


class RunStore:
    """The runs database at ``path`` (``:memory:`` keeps nothing), created and migrated when opened."""

    def __init__(
        self,
        path: str | Path = MEMORY,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_records: int = DEFAULT_MAX_RECORDS,
        keep_runs: int | None = None,
    ) -> None:
        self.path = str(path)
        self.max_bytes = max_bytes
        self.max_records = max_records
        self.keep_runs = keep_runs
        # Told the ids a retention removed, once their write is committed: a store never drops runs unsaid.
        self.on_prune: Callable[[list[int], str], None] | None = None
        self._pruned: list[int] = []
        self.memory = self.path == MEMORY
        if not self.memory:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._writer = self._connect()
        if not self.memory:
            mode = self._writer.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: could not switch to WAL (journal mode {mode})")
        try:
            schema.migrate(self._writer)
        except schema.SchemaError as exc:
            raise StoreError(f"{self.path}: {exc}") from None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []

    @classmethod
    def from_env(cls, path: str | None = None) -> RunStore:
        """The store ``kvscope serve`` and the CLI use: ``path`` (``--db``) or ``KVSCOPE_DB``, ``KVSCOPE_DB_MAX_MB``,
        ``KVSCOPE_KEEP_RUNS``."""
        max_mb = os.environ.get(ENV_MAX_MB)
        keep = os.environ.get(ENV_KEEP)
        return cls(
            path or default_path(),
            max_bytes=int(max_mb) * 2**20 if max_mb else DEFAULT_MAX_BYTES,
            keep_runs=int(keep) if keep else None,
        )

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS:d}")
            # In WAL, NORMAL syncs at checkpoints: a committed run survives the process dying (kill -9),
            # though not a power cut; FULL would add an fsync per request for that.
            conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the runs database ({exc})") from None
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
            self._writer.close()

    # -- writing ------------------------------------------------------------

    def _write(self, work: Any) -> Any:
        """Run ``work(conn)`` in one IMMEDIATE transaction on the writer connection; the lock keeps it alone."""
        with self._lock:
            conn = self._writer
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: cannot write ({exc})") from None
            try:
                out = work(conn)
                conn.execute("COMMIT")
            except BaseException as exc:
                self._pruned = []
                conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    if "full" in str(exc):
                        raise StoreFull(f"{self.path}: the disk is full ({exc}); nothing of this write was kept") from None
                    raise StoreError(f"{self.path}: {exc}") from None
                raise
            pruned, self._pruned = self._pruned, []
        if pruned and self.on_prune is not None:
            self.on_prune(pruned, self.retention_text())
        return out

    def pruned_text(self, ids: list[int], why: str) -> str:
        """``removed runs 1, 2 from runs.db: ...``, what a retention's removal tells the user."""
        listed = ", ".join(str(i) for i in ids[:20]) + (f" and {len(ids) - 20:,} more" if len(ids) > 20 else "")
        return f"removed run{'s' if len(ids) > 1 else ''} {listed} from {self.path}: {why}"

    def retention_text(self) -> str:
        """The retention in force, in the words of the option and variable that set it."""
        return f"the retention keeps the newest {self.keep_runs:,} runs (--keep-runs, {ENV_KEEP})"

    def _delete(self, conn: sqlite3.Connection, ids: list[int]) -> None:
        """Remove runs the retention chose (their records and events go with them), noting their ids."""
        conn.executemany("DELETE FROM runs WHERE id = ?", [(i,) for i in ids])
        self._pruned += ids

    def prune(self, *, keep: int | None = None, older_than: timedelta | None = None) -> list[int]:
        """Delete every finished run but the newest ``keep``, or every one created more than ``older_than`` ago;
        the ids removed, oldest first. A run still being written is never removed."""
        if (keep is None) == (older_than is None):
            raise ValueError("prune: give keep or older_than, one of them")

        def work(conn: sqlite3.Connection) -> list[int]:
            if keep is not None:
                rows = conn.execute("SELECT id FROM runs WHERE status != 'running' ORDER BY created_at DESC, id DESC "
                                    "LIMIT -1 OFFSET ?", (keep,)).fetchall()
            else:
                assert older_than is not None
                cutoff = (datetime.now(UTC) - older_than).isoformat(timespec="milliseconds")  # as now() writes created_at
                rows = conn.execute("SELECT id FROM runs WHERE status != 'running' AND created_at < ?", (cutoff,)).fetchall()
            ids = sorted(int(r[0]) for r in rows)
            conn.executemany("DELETE FROM runs WHERE id = ?", [(i,) for i in ids])
            return ids

        return list(self._write(work))

    def used_bytes(self, conn: sqlite3.Connection | None = None) -> int:
        """Bytes of pages in use (free pages left by deleted runs are reused, so they do not count)."""
        with self._lock:
            return int((conn or self._writer).execute(_USED_BYTES).fetchone()[0])

    def _room(self, conn: sqlite3.Connection, keep: int | None = None) -> None:
        """Raise ``StoreFull`` if the database is at its size; with a retention, first prune oldest runs."""
        while self.used_bytes(conn) >= self.max_bytes:
            if self.keep_runs is None or not self._prune_one(conn, keep):
                raise StoreFull(
                    f"the runs database {self.path} holds {_mib(self.used_bytes(conn))} MiB, its limit is "
                    f"{_mib(self.max_bytes)} MiB (--db-max-mb, {ENV_MAX_MB}): delete runs (kvscope runs delete ID) or set a "
                    f"retention (--keep-runs N or {ENV_KEEP}=N keeps the newest N)"
                )

    def _prune_one(self, conn: sqlite3.Connection, keep: int | None) -> bool:
        row = conn.execute(
            "SELECT id FROM runs WHERE status != 'running' AND id IS NOT ? ORDER BY created_at, id LIMIT 1", (keep,)
        ).fetchone()
        if row is None:
            return False
        self._delete(conn, [int(row[0])])
        return True

    def _retain(self, conn: sqlite3.Connection, keep: int) -> None:
        if self.keep_runs is None:
            return
        rows = conn.execute(
            "SELECT id FROM runs WHERE status != 'running' AND id != ? ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?",
            (keep, max(self.keep_runs - 1, 0)),
        ).fetchall()
        self._delete(conn, sorted(int(r[0]) for r in rows))

    def _insert(
        self, conn: sqlite3.Connection, run: NewRun, status: str, result_text: str | None = None, counts: tuple[int, int] = (0, 0)
    ) -> int:
        """The run's row; ``result_text`` is its result already as JSON."""
        if run.kind not in KINDS:
            raise StoreError(f"kind must be one of {', '.join(KINDS)}, got {run.kind[:40]!r}")
        self._room(conn)
        stamp = now()
        running = status == "running"
        cur = conn.execute(
            "INSERT INTO runs (kind, name, status, created_at, finished_at, pid, scenario, costs, summary, result, source, "
            "record_count, event_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run.kind, str(run.name)[:MAX_NAME_CHARS], status, stamp, None if running else stamp, os.getpid() if running else None,
             _dump(run.scenario), _dump(run.costs), _dump(run.summary or {}), result_text, _dump(run.source), *counts),
        )
        run_id = int(cur.lastrowid or 0)
        self._retain(conn, run_id)
        return run_id

    def save(
        self,
        run: NewRun,
        *,
        result: Any = None,
        records: Iterable[dict[str, Any]] = (),
        events: Iterable[list[dict[str, Any]]] = (),
        uploads: Iterable[tuple[str, bytes]] = (),
        keep_upload_bytes: int | None = None,
    ) -> int:
        """Save a finished run in one transaction and return its id.

        ``uploads`` are the (file name, content) it was read from: their sha256 and size are always kept, their
        content only up to ``keep_upload_bytes`` each (``source`` should say so).
        """
        files = list(uploads)
        rows = list(records)
        batches = list(events)
        self._check_count(len(rows), "records")
        self._check_count(len(batches), "event batches")

        # Everything is encoded before the transaction opens, so the writer's lock is held only for SQLite's work:
        # one INSERT of the run (its counts included) and one executemany per table.
        result_text = _dump(result)
        row_texts = [_dump(r) for r in rows]
        batch_texts = [_dump(b) for b in batches]

        def work(conn: sqlite3.Connection) -> int:
            run_id = self._insert(conn, run, "done", result_text, (len(rows), len(batches)))
            if row_texts:
                self._append_rows(conn, run_id, "records", 0, row_texts, encoded=True)
            if batch_texts:
                self._append_rows(conn, run_id, "events", 0, batch_texts, encoded=True)
            for n, (file_name, content) in enumerate(files):
                self._keep_upload(conn, run_id, n, file_name, content, keep_upload_bytes)
            self._room(conn, keep=run_id)
            return run_id

        return int(self._write(work))

    def open(self, run: NewRun) -> RunWriter:
        """Start a run whose records (and step events) arrive one at a time; finish it with ``RunWriter.finish``."""
        return RunWriter(self, int(self._write(lambda conn: self._insert(conn, run, "running"))))

    def _check_count(self, n: int, what: str) -> None:
        if n > self.max_records:
            raise StoreFull(f"a run keeps at most {self.max_records:,} {what}; this one has {n:,}")

    @staticmethod
    def _append_rows(conn: sqlite3.Connection, run_id: int, table: str, start: int, rows: list[Any], encoded: bool = False) -> None:
        """Rows as JSON (``encoded``: each already a JSON text)."""
        sql = {"records": "INSERT INTO records (run_id, n, data) VALUES (?, ?, ?)",
               "events": "INSERT INTO events (run_id, n, data) VALUES (?, ?, ?)"}[table]
        conn.executemany(sql, ((run_id, start + i, row if encoded else _dump(row)) for i, row in enumerate(rows)))

    @staticmethod
    def _keep_upload(conn: sqlite3.Connection, run_id: int, n: int, name: str, content: bytes, keep_bytes: int | None) -> None:
        kept = content if keep_bytes is None or len(content) <= keep_bytes else None
        conn.execute(
            "INSERT INTO uploads (run_id, n, name, sha256, bytes, content) VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, n, str(name)[:MAX_NAME_CHARS], hashlib.sha256(content).hexdigest(), len(content), kept),
        )

    def delete(self, run_id: int) -> bool:
        return bool(self._write(lambda conn: conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount))

    def mark_interrupted(self) -> int:
        """Runs left 'running' by a process that is gone (killed, crashed) become 'interrupted'; how many."""
        rows = self._query("SELECT id, pid FROM runs WHERE status = 'running'")
        dead = [run_id for run_id, pid in rows if pid is None or not _alive(pid)]

        def work(conn: sqlite3.Connection) -> int:
            conn.executemany(
                "UPDATE runs SET status = 'interrupted', pid = NULL WHERE id = ? AND status = 'running'", ((i,) for i in dead)
            )
            return len(dead)

        return int(self._write(work)) if dead else 0

    # -- reading ------------------------------------------------------------

    def _read(self) -> sqlite3.Connection:
        """This thread's reader (WAL: readers never wait for the writer); in memory, the one connection."""
        if self.memory:
            return self._writer
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only=ON")
            self._local.conn = conn
            with self._lock:
                self._readers.append(conn)
        return conn

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.memory:
            with self._lock:
                return self._writer.execute(sql, params).fetchall()
        return self._read().execute(sql, params).fetchall()

    def list(self, *, limit: int = 100, kind: str | None = None, before: int | None = None) -> list[RunInfo]:
        """The newest runs first (``before``: only runs with a smaller id, for the next page)."""
        limit = max(1, min(int(limit), MAX_LIST))
        rows = self._query(
            f"SELECT {_INFO_COLUMNS} FROM runs WHERE (? IS NULL OR kind = ?) AND (? IS NULL OR id < ?) "
            "ORDER BY created_at DESC, id DESC LIMIT ?",
            (kind, kind, before, before, limit),
        )
        return [_info(r) for r in rows]

    def list_json(self, *, limit: int = 100, kind: str | None = None, before: int | None = None) -> str:
        """``list``'s runs as the JSON array ``/api/runs`` answers (``RunInfo.to_dict`` each), made by SQLite itself:
        10,000 runs without a Python object each."""
        limit = max(1, min(int(limit), MAX_LIST))
        rows = self._query(
            "SELECT coalesce(json_group_array(json_object("
            "'id', id, 'kind', kind, 'name', name, 'status', status, 'created_at', created_at, "
            "'finished_at', finished_at, 'summary', json(summary), 'records', record_count, 'event_batches', event_count"
            ")), '[]') FROM (SELECT * FROM runs WHERE (? IS NULL OR kind = ?) AND (? IS NULL OR id < ?) "
            "ORDER BY created_at DESC, id DESC LIMIT ?)",
            (kind, kind, before, before, limit),
        )
        return str(rows[0][0])

    def count(self) -> int:
        return int(self._query("SELECT count(*) FROM runs")[0][0])

    def get(self, run_id: int) -> Run:
        rows = self._query(f"SELECT {_INFO_COLUMNS}, scenario, costs, result, source FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise NoSuchRun(run_id)
        row = rows[0]
        load = lambda text: None if text is None else json.loads(text)  # noqa: E731
        return Run(_info(row[:9]), load(row[9]), load(row[10]), load(row[11]), load(row[12]))

    def records(self, run_id: int) -> list[dict[str, Any]]:
        return [json.loads(r[0]) for r in self._query("SELECT data FROM records WHERE run_id = ? ORDER BY n", (run_id,))]

    def events(self, run_id: int) -> list[list[dict[str, Any]]]:
        """The run's step events, one list per request (as the stream sent them)."""
        return [json.loads(r[0]) for r in self._query("SELECT data FROM events WHERE run_id = ? ORDER BY n", (run_id,))]

    def uploads(self, run_id: int) -> list[dict[str, Any]]:
        """The files a run was read from: name, sha256, size, and whether their content was kept."""
        rows = self._query("SELECT name, sha256, bytes, content IS NOT NULL FROM uploads WHERE run_id = ? ORDER BY n", (run_id,))
        return [{"name": name, "sha256": digest, "bytes": size, "content_kept": bool(kept)} for name, digest, size, kept in rows]

    def upload_content(self, run_id: int, n: int = 0) -> bytes | None:
        rows = self._query("SELECT content FROM uploads WHERE run_id = ? AND n = ?", (run_id, n))
        return rows[0][0] if rows else None

    def integrity(self) -> str:
        return str(self._query("PRAGMA integrity_check")[0][0])


class RunWriter:
    """A run being recorded: ``append`` each request's record (and ``append_events`` its step events) as it
    finishes, each in its own transaction; ``finish`` once. Safe to call from any thread.

    For recorders (live runs, and watch or proxy recordings)::

        writer = store.open(NewRun("proxy", name="gpu", source={"target": "gpu"}))
        for row in rows_as_they_complete:   # measurement-file rows (sim.measurements.Measurement.row())
            writer.append(row)              # committed before it returns
        writer.finish(summary=..., status="done")
    """

    def __init__(self, store: RunStore, run_id: int) -> None:
        self.store = store
        self.id = run_id
        self.records = 0
        self.event_batches = 0
        self.finished = False
        self.full: str | None = None  # why appends stopped being kept, if they did

    def append(self, record: dict[str, Any]) -> None:
        self._append("records", [record])

    def append_many(self, records: list[dict[str, Any]]) -> None:
        self._append("records", records)

    def append_encoded(self, records: list[str]) -> None:
        """Records already as JSON text, one each (a KV event recording's lines)."""
        self._append("records", records, encoded=True)

    def append_events(self, batch: list[dict[str, Any]]) -> None:
        """One request's events (``Event.to_dict()``), in the order the stream sent them."""
        self._append("events", [batch])

    def append_encoded_events(self, batches: list[str]) -> None:
        """Requests' event lists already as JSON text (a stream encodes each event once, to send it and keep it)."""
        self._append("events", batches, encoded=True)

    def _append(self, table: str, rows: list[Any], encoded: bool = False) -> None:
        if self.finished:
            raise StoreError(f"run {self.id} is finished; nothing more can be appended")
        start = self.records if table == "records" else self.event_batches
        if start + len(rows) > self.store.max_records:
            self.full = f"run {self.id} keeps at most {self.store.max_records:,} {table}; later ones are not kept"
            raise StoreFull(self.full)
        column = "record_count" if table == "records" else "event_count"
        texts = rows if encoded else [_dump(r) for r in rows]  # encoded before the writer's lock is taken

        def work(conn: sqlite3.Connection) -> None:
            self.store._room(conn, keep=self.id)
            self.store._append_rows(conn, self.id, table, start, texts, encoded=True)
            conn.execute(f"UPDATE runs SET {column} = ? WHERE id = ?", (start + len(rows), self.id))  # column is ours

        try:
            self.store._write(work)
        except StoreFull as exc:
            self.full = str(exc)
            raise
        if table == "records":
            self.records += len(rows)
        else:
            self.event_batches += len(rows)

    def note_problem(self, problem: str) -> None:
        """Say in the run's summary (``kept``), now rather than when it finishes, why it is kept only so far."""
        self.store._write(lambda conn: conn.execute(
            "UPDATE runs SET summary = json_set(summary, '$.kept', ?) WHERE id = ?", (problem[:MAX_PROBLEM_CHARS], self.id)
        ))

    def finish(self, *, status: str = "done", summary: dict[str, Any] | None = None, result: Any = None) -> None:
        if self.finished:
            return
        if status not in STATUSES:
            raise StoreError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        self.finished = True

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, pid = NULL, summary = coalesce(?, summary), "
                "result = coalesce(?, result) WHERE id = ?",
                (status, now(), _dump(summary), _dump(result), self.id),
            )

        self.store._write(work)


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:,.2f}".rstrip("0").rstrip(".")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def announce_pruning(store: RunStore) -> RunStore:
    """The store, saying on stderr which runs its retention removes, as it removes them (the CLI and the server)."""
    store.on_prune = lambda ids, why: print(f"kvscope: {store.pruned_text(ids, why)}", file=sys.stderr, flush=True)
    return store
