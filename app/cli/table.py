"""Plain-text tables for the terminal: the seed-style table of a simulation result."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.engine.events import tier_label
from sim.numeric.figures import ms_text, times_text


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[bool] | None = None) -> str:
    cells = [[str(h) for h in headers]] + [[cell_text(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    right = right or [i > 1 for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if right[i] else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cell_text(value: Any) -> str:
    if isinstance(value, float):
        return ms_text(value)
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def render_table(result: dict[str, Any]) -> str:
    """configuration x pass: p50, mean, hit tokens per tier (one column per offload tier), computed, speed-up over ``gpu``."""
    speedups = {(c["candidate"], c["pass"]): c for c in result["comparison"]}
    offload = offload_tiers(result)
    rows = []
    for run in result["runs"]:
        for p in run["passes"]:
            s = speedups.get((run["name"], p["pass"]))
            hits = p.get("tier_hits") or {"cpu": p["cpu_hit_tokens"]}
            rows.append(
                [
                    run["name"], f"{p['pass']} {p['order']}", p["p50_ms"], p["mean_ms"], p["gpu_hit_tokens"],
                    *(hits.get(name, 0) for name in offload), p["computed_tokens"],
                    f"{times_text(s['p50_speedup'])} / {times_text(s['mean_speedup'])}" if s else "",
                ]
            )
    headers = [
        "config", "pass", "p50 ms", "mean ms", "GPU hit tok", *(f"{tier_label(n)} hit tok" for n in offload),
        "computed tok", "speed-up p50/mean",
    ]
    return format_table(headers, rows, [False, False] + [True] * (len(headers) - 2))


def offload_tiers(result: dict[str, Any]) -> list[str]:
    """Every offload tier of the result's runs, in lookup order (``cpu`` even when no run has one)."""
    names = ["cpu"]
    for run in result["runs"]:
        for tier in run.get("tiers", [])[1:]:
            if tier["name"] not in names:
                names.append(tier["name"])
    return names

