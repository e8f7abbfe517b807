"""One request's misses in words: a sentence per cause, naming the requests that evicted its tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.engine.events import GPU
from sim.explain.causes import DESCRIPTIONS, EVICTED

UNIT = {GPU: "block"}  # every other tier stores chunks


def label(rec: dict[str, Any]) -> str:
    """``doc 0, pass 2`` for a scenario's request; ``request 17`` for a trace's (no documents)."""
    return f"doc {rec['doc']}, pass {rec['pass']}" if rec["doc"] >= 0 else f"request {rec['seq']}"


def _and(items: Sequence[str], most: int = 6) -> str:
    items = list(items)
    if len(items) > most:
        items = items[:most] + [f"{len(items) - most:,} more"]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def evictors(by: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]]) -> str:
    """``in pass 1 by the requests for docs 4 and 5`` (or ``by requests 12 and 40`` in a trace)."""
    rows = [records[b["seq"]] for b in by]
    if all(r["doc"] >= 0 for r in rows):
        passes = sorted({r["pass"] for r in rows})
        docs = list(dict.fromkeys(str(r["doc"]) for r in rows))
        which = "pass" if len(passes) == 1 else "passes"
        noun = "the request for doc" if len(docs) == 1 else "the requests for docs"
        return f"in {which} {_and([str(p) for p in passes])} by {noun} {_and(docs)}"
    seqs = [str(r["seq"]) for r in rows]
    return f"by request{'s' if len(seqs) > 1 else ''} {_and(seqs)}"


def capacity(entry: dict[str, Any]) -> str:
    tier, unit = entry["tier"], UNIT.get(entry["tier"], "chunk")
    name = tier.upper()
    first, needed = entry.get("first_hit_tokens"), entry.get("needed_tokens")
    if not entry["reachable"]["first"]:
        return f"no {name} size would have kept them: an earlier {unit} was never cached"
    if needed is not None and first == needed:
        return f"a {name} of {needed:,} tokens would have kept all of them"
    first_one = f"the first {unit}" if entry["start"] == 0 else "the first of them"
    if needed is not None:
        return f"a {name} of {first:,} tokens would have kept {first_one}, {needed:,} all of them"
    if first is not None:
        return f"a {name} of {first:,} tokens would have kept {first_one}; no size all of them"
    return f"the {name} size that would have kept them was not searched"


def sentences(rec: dict[str, Any], records: Sequence[dict[str, Any]], name: str, offload: bool) -> list[str]:
    """A sentence per cause of the map ``name`` (``gpu_miss`` or ``computed``) of record ``rec``.

    ``offload``: the run has offload tiers, whose verdict ``computed`` is; otherwise it is the GPU's.
    """
    out = []
    gpu_map = name == "gpu_miss" or not offload
    entries = [e for e in rec.get("evicted_misses") or () if (e["tier"] == GPU) == gpu_map]
    for cause, tokens in (rec.get(name) or {}).items():
        if cause == EVICTED:
            for e in entries:
                out.append(
                    f"{label(rec)}: {e['tokens']:,} tokens evicted from {e['tier'].upper()} "
                    f"{evictors(e['by'], records)}; {capacity(e)}"
                )
            continue
        out.append(f"{label(rec)}: {tokens:,} tokens {cause}: {DESCRIPTIONS[cause]}")
    return out
