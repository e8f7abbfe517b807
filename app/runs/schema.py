"""The runs database's schema: numbered migration scripts applied in order, ``PRAGMA user_version`` the version.

Each script runs inside one transaction together with the ``user_version``
bump, so a database is always at exactly one version. To change the schema,
append a script; never edit one that has shipped, and never ALTER elsewhere.
"""

from __future__ import annotations

import sqlite3

# MIGRATIONS[i] takes a database from version i to version i + 1.
MIGRATIONS: tuple[str, ...] = (
    # 1: runs, their per-request records, their step events (one row per request), and uploads.
    """
    CREATE TABLE runs (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, so a shared link cannot point at a newer run
        kind         TEXT NOT NULL,
        name         TEXT NOT NULL DEFAULT '',
        status       TEXT NOT NULL,
        created_at   TEXT NOT NULL,                      -- ISO 8601, UTC
        finished_at  TEXT,
        pid          INTEGER,                            -- the process writing it while status is 'running'
        scenario     TEXT,                               -- JSON: Scenario.model_dump(mode="json")
        costs        TEXT,                               -- JSON: the cost constants it ran with
        summary      TEXT NOT NULL DEFAULT '{}',         -- JSON: what the list shows (small)
        result       TEXT,                               -- JSON: the whole result, as the API answered it
        source       TEXT,                               -- JSON: where its input came from (file name, sha256, ...)
        record_count INTEGER NOT NULL DEFAULT 0,
        event_count  INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX runs_by_age ON runs (created_at DESC, id DESC);
    CREATE TABLE records (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        n      INTEGER NOT NULL,
        data   TEXT NOT NULL,                            -- JSON: one measurement-file row
        PRIMARY KEY (run_id, n)
    ) WITHOUT ROWID;
    CREATE TABLE events (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        n      INTEGER NOT NULL,
        data   TEXT NOT NULL,                            -- JSON: the core events of one request, in stream order
        PRIMARY KEY (run_id, n)
    ) WITHOUT ROWID;
    CREATE TABLE uploads (
        run_id  INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        n       INTEGER NOT NULL,                        -- a run may come from several files (long_doc_qa's two)
        name    TEXT NOT NULL,
        sha256  TEXT NOT NULL,
        bytes   INTEGER NOT NULL,
        content BLOB,                                    -- NULL when the file was over the size kept
        PRIMARY KEY (run_id, n)
    ) WITHOUT ROWID;
    """,
    # 2: who owns a running run, beyond its pid (which the kernel reuses): app.runs.owner.
    """
    ALTER TABLE runs ADD COLUMN owner TEXT;                -- BOOT:PID:START while status is 'running'
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


class SchemaError(RuntimeError):
    """The database cannot be used by this kvscope (e.g. written by a newer one)."""


def version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection) -> int:
    """Apply every migration the database lacks, each in its own transaction; return the final version.

    ``conn`` must be in autocommit mode (``isolation_level=None``), so the
    scripts' own BEGIN/COMMIT are the transactions. Two processes migrating at
    once serialise on BEGIN IMMEDIATE, and the second finds the work done.
    """
    current = version(conn)
    if current > SCHEMA_VERSION:
        raise SchemaError(f"the runs database is at schema version {current}; this kvscope knows up to {SCHEMA_VERSION}")
    for target in range(current + 1, SCHEMA_VERSION + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if version(conn) >= target:  # another process got here first
                conn.execute("COMMIT")
                continue
            for statement in _statements(MIGRATIONS[target - 1]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {int(target)}")  # a PRAGMA takes no parameters; target is ours
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return version(conn)


def _statements(script: str) -> list[str]:
    """A script's statements (``sqlite3.complete_statement`` decides where each ends)."""
    out, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            out.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        out.append(buffer.strip())
    return out
