"""The seed-table fit cached in a file under the user's cache directory, keyed by a hash of everything it depends on.

The default cost model is a least-squares fit that simulates the seed lab
(``sim.calibrate.fit_seed_table``): tens of ms of work and imports on every
start of the CLI. Its inputs are the seed table and the simulator's own code
(the fit's scenario, anchors and engine all live in ``sim/``), so the file is
named by the SHA-256 of those files' bytes and holds that digest too; a file
whose digest or constants do not check out is ignored and rewritten. Where the
cache directory cannot be written, the fit is computed every time.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from sim.costs import CostModel

SIM_DIR = Path(__file__).resolve().parent
FORMAT = 1  # bump when the file's layout changes


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/kvscope`` (``~/.cache/kvscope`` by default), as the XDG base directory spec has it."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kvscope"


def inputs_digest() -> str:
    """SHA-256 over the seed table and every module of ``sim`` (path and bytes, in path order)."""
    digest = hashlib.sha256(f"kvscope seed fit {FORMAT}\n".encode())
    files = sorted(SIM_DIR.rglob("*.py")) + [SIM_DIR / "data" / "seed_table.csv"]
    for path in files:
        data = path.read_bytes()
        digest.update(f"{path.relative_to(SIM_DIR).as_posix()} {len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


def cache_path(digest: str) -> Path:
    return cache_dir() / f"seed-fit-{digest[:16]}.json"


def read_cached(path: Path, digest: str) -> CostModel | None:
    """The cached constants if the file is there, whole, and made from these very inputs; None otherwise."""
    try:
        data = json.loads(path.read_text())
        if data.get("inputs_sha256") != digest:
            return None
        return CostModel(**data["costs"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def write_cached(path: Path, digest: str, costs: CostModel) -> bool:
    """Write atomically (a temporary file renamed into place); False when the directory is not writable."""
    body = json.dumps({"inputs_sha256": digest, "costs": costs.model_dump()}, indent=1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".seed-fit-", suffix=".tmp")
        with os.fdopen(fd, "w") as out:
            out.write(body)
        os.replace(tmp, path)
    except OSError:
        return False
    return True


def seed_costs() -> CostModel:
    """The seed-table fit: from the cache when it matches its inputs, else computed (and cached when possible)."""
    digest = inputs_digest()
    path = cache_path(digest)
    cached = read_cached(path, digest)
    if cached is not None:
        return cached
    from sim.calibrate import fit_seed_table

    costs = fit_seed_table().costs
    write_cached(path, digest, costs)
    return costs


