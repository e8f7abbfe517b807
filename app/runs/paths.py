"""Where the runs database is: its path and the environment that chooses it (no sqlite3 here: the CLI reads these
to word its options without loading the store)."""

from __future__ import annotations

import os
from pathlib import Path

ENV_DB = "KVSCOPE_DB"
ENV_MAX_MB = "KVSCOPE_DB_MAX_MB"
ENV_KEEP = "KVSCOPE_KEEP_RUNS"
MEMORY = ":memory:"  # keep nothing beyond the process


def default_path() -> str:
    """``KVSCOPE_DB`` if set, else ``runs.db`` under the user's data directory (XDG)."""
    if os.environ.get(ENV_DB):
        return os.environ[ENV_DB]
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "kvscope" / "runs.db")
