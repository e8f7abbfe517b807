"""A Mooncake-like trace of about 13 M block references: the bundled sample repeated with fresh ids, written to a file.

Copy ``k`` of the sample follows copy ``k - 1`` in time (its timestamps
shifted by the sample's span plus one ms) and its ids are shifted past every
id of the copies before it, so no block of one copy is reused by another:
about a day of one cluster's traffic in size, with the sample's reuse inside
each copy.
"""

from __future__ import annotations

import json
from pathlib import Path

from sim.traces.reader import DEFAULT_TRACE, bundled_trace_path

COPIES = 110  # 110 x 121,877 = 13.4 M block references, 439,230 requests


def write_big_trace(path: Path, copies: int = COPIES) -> dict[str, int]:
    """Write the scaled trace; returns its requests, block references and bytes."""
    rows = [json.loads(line) for line in bundled_trace_path(DEFAULT_TRACE).read_bytes().splitlines() if line.strip()]
    id_span = 1 + max(max(r["hash_ids"]) for r in rows)
    time_span = 1 + max(r["timestamp"] for r in rows)
    requests = refs = 0
    with path.open("w") as out:
        for k in range(copies):
            shift_ids, shift_ms = k * id_span, k * time_span
            lines = []
            for r in rows:
                ids = [h + shift_ids for h in r["hash_ids"]]
                lines.append(
                    json.dumps({"timestamp": r["timestamp"] + shift_ms, "input_length": r["input_length"],
                                "output_length": r["output_length"], "hash_ids": ids})
                )
                refs += len(ids)
            requests += len(lines)
            out.write("\n".join(lines) + "\n")
    return {"requests": requests, "block_references": refs, "bytes": path.stat().st_size}
