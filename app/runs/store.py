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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from app.runs import owner, schema
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


def prepared_rows(path: str | Path) -> sqlite3.Connection:
    """A new file of rows for ``RunStore.save_prepared``: tables ``records`` and ``events`` of (n, data: JSON text),
    written by whoever prepares a run (a worker process) and copied by the store. A scratch file: no journal, no
    syncs (it is thrown away if anything fails)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    for table in ("records", "events"):
        conn.execute(f"CREATE TABLE {table} (n INTEGER PRIMARY KEY, data TEXT NOT NULL)")
    return conn


def check_count(n: int, what: str, max_records: int) -> None:
    """``StoreFull`` when a run of ``n`` records (or event batches) is more than a run keeps."""
    if n > max_records:
        raise StoreFull(f"a run keeps at most {max_records:,} {what}; this one has {n:,}")


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise StoreError(f"kind must be one of {', '.join(KINDS)}, got {kind[:40]!r}")


def dump_json(value: Any) -> str | None:
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
class UploadRow:
    """A file a run was read from, as kept: its name, sha256 and size, and its content (None when not kept)."""

    name: str
    sha256: str
    size_bytes: int
    content: bytes | None


def upload_row(name: str, content: bytes, keep_bytes: int | None) -> UploadRow:
    """The row of ``content``, kept whole up to ``keep_bytes`` (None: any size)."""
    kept = content if keep_bytes is None or len(content) <= keep_bytes else None
    return UploadRow(name, hashlib.sha256(content).hexdigest(), len(content), kept)


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
        if not self.memory:  # in memory, every run is this process's own
            self.mark_interrupted()

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
        check_kind(run.kind)
        self._room(conn)
        stamp = now()
        running = status == "running"
        cur = conn.execute(
            "INSERT INTO runs (kind, name, status, created_at, finished_at, pid, owner, scenario, costs, summary, result, "
            "source, record_count, event_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run.kind, str(run.name)[:MAX_NAME_CHARS], status, stamp, None if running else stamp,
             os.getpid() if running else None, owner.this_process() if running else None, dump_json(run.scenario),
             dump_json(run.costs), dump_json(run.summary or {}), result_text, dump_json(run.source), *counts),
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
        rows = list(records)
        batches = list(events)
        self.check_count(len(rows), "records")
        self.check_count(len(batches), "event batches")
        # Everything is encoded before the transaction opens, so the writer's lock is held only for SQLite's work.
        kept = [upload_row(name, content, keep_upload_bytes) for name, content in uploads]
        return self.save_encoded(run, result_text=dump_json(result), records=[dump_json(r) for r in rows],
                                 events=[dump_json(b) for b in batches], uploads=kept)

    def save_encoded(
        self, run: NewRun, *, result_text: str | None, records: list[str | None], events: list[str | None],
        uploads: Iterable[UploadRow],
    ) -> int:
        """Save a finished run whose records and event batches are JSON texts already, in one transaction: one INSERT
        of the run (its counts included) and one executemany per table."""

        def rows(conn: sqlite3.Connection, run_id: int) -> None:
            self._append_rows(conn, run_id, "records", 0, records, encoded=True)
            self._append_rows(conn, run_id, "events", 0, events, encoded=True)

        return self._save_with(run, result_text, (len(records), len(events)), rows, uploads)

    def save_prepared(
        self, run: NewRun, *, result_text: str | None, rows_db: str | Path, uploads: Iterable[UploadRow] = (),
    ) -> int:
        """Save a finished run whose records and event batches wait in ``rows_db`` (made by ``prepared_rows``), in one
        transaction. SQLite copies them itself (INSERT ... SELECT from the attached file), without a Python object
        per row nor Python's lock held while it does: a large import costs the server's event loop nothing."""

        def rows(conn: sqlite3.Connection, run_id: int) -> None:
            for table in ("records", "events"):  # our own names: no value of a client's in this SQL
                conn.execute(f"INSERT INTO {table} (run_id, n, data) SELECT ?, n, data FROM prepared.{table} ORDER BY n",
                             (run_id,))

        with self._lock:  # ATTACH and DETACH happen outside a transaction, the lock keeps them ours
            self._writer.execute("ATTACH DATABASE ? AS prepared", (str(rows_db),))
            try:
                counts = tuple(self._writer.execute(f"SELECT count(*) FROM prepared.{t}").fetchone()[0]
                               for t in ("records", "events"))
                for n, what in zip(counts, ("records", "event batches"), strict=True):
                    self.check_count(n, what)
                return self._save_with(run, result_text, (counts[0], counts[1]), rows, uploads)
            finally:
                self._writer.execute("DETACH DATABASE prepared")

    def _save_with(
        self, run: NewRun, result_text: str | None, counts: tuple[int, int], rows: Any, uploads: Iterable[UploadRow],
    ) -> int:
        def work(conn: sqlite3.Connection) -> int:
            run_id = self._insert(conn, run, "done", result_text, counts)
            rows(conn, run_id)
            for n, upload in enumerate(uploads):
                self._keep_upload(conn, run_id, n, upload)
            self._room(conn, keep=run_id)
            return run_id

        return int(self._write(work))

    def open(self, run: NewRun) -> RunWriter:
        """Start a run whose records (and step events) arrive one at a time; finish it with ``RunWriter.finish``."""
        return RunWriter(self, int(self._write(lambda conn: self._insert(conn, run, "running"))))

    def check_count(self, n: int, what: str) -> None:
        check_count(n, what, self.max_records)

    @staticmethod
    def _append_rows(conn: sqlite3.Connection, run_id: int, table: str, start: int, rows: Iterable[Any], encoded: bool = False) -> None:
        """Rows as JSON (``encoded``: each already a JSON text)."""
        sql = {"records": "INSERT INTO records (run_id, n, data) VALUES (?, ?, ?)",
               "events": "INSERT INTO events (run_id, n, data) VALUES (?, ?, ?)"}[table]
        conn.executemany(sql, ((run_id, start + i, row if encoded else dump_json(row)) for i, row in enumerate(rows)))

    @staticmethod
    def _keep_upload(conn: sqlite3.Connection, run_id: int, n: int, upload: UploadRow) -> None:
        conn.execute(
            "INSERT INTO uploads (run_id, n, name, sha256, bytes, content) VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, n, str(upload.name)[:MAX_NAME_CHARS], upload.sha256, upload.size_bytes, upload.content),
        )

    def delete(self, run_id: int) -> bool:
        return bool(self._write(lambda conn: conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount))

    def mark_interrupted(self) -> int:
        """Runs left 'running' by a process that is gone (killed, crashed) become 'interrupted'; how many. Every
        opening of a database file does this (the server, and each CLI command that lists or shows runs)."""
        rows = self._query("SELECT id, pid, owner FROM runs WHERE status = 'running'")
        dead = [run_id for run_id, pid, name in rows if not owner.alive(pid, name)]

        def work(conn: sqlite3.Connection) -> int:
            conn.executemany(
                "UPDATE runs SET status = 'interrupted', pid = NULL, owner = NULL WHERE id = ? AND status = 'running'",
                ((i,) for i in dead),
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

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside sees the database as it was at the first: a run deleted (or appended to) meanwhile is
        still read whole, as it was. What reads a run in several queries (an export, a diff) reads it inside one, so a
        delete landing between two of them cannot fail the second (a 500) or leave a part out. On a file, one read
        transaction of this thread's reader (WAL keeps its snapshot while the writer commits); in memory, where reads
        share the writer's connection, the writer's lock held throughout (writes wait for it)."""
        if self.memory:
            with self._lock:
                yield
            return
        conn = self._read()
        if conn.in_transaction:  # already inside one
            yield
            return
        conn.execute("BEGIN")
        try:
            yield
        finally:
            conn.execute("COMMIT")

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
        for row in rows_as_they_complete:   # measurement-file rows (sim.calibration.measurements.Measurement.row())
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
        texts = rows if encoded else [dump_json(r) for r in rows]  # encoded before the writer's lock is taken

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
                "UPDATE runs SET status = ?, finished_at = ?, pid = NULL, owner = NULL, summary = coalesce(?, summary), "
                "result = coalesce(?, result) WHERE id = ?",
                (status, now(), dump_json(summary), dump_json(result), self.id),
            )

        self.store._write(work)


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:,.2f}".rstrip("0").rstrip(".")


def announce_pruning(store: RunStore) -> RunStore:
    """The store, saying on stderr which runs its retention removes, as it removes them (the CLI and the server)."""
    store.on_prune = lambda ids, why: print(f"kvscope: {store.pruned_text(ids, why)}", file=sys.stderr, flush=True)
    return store
