"""Plain-text tables for the terminal: the seed-style table of a simulation result."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[bool] | None = None) -> str:
    cells = [[str(h) for h in headers]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    right = right or [i > 1 for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if right[i] else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def render_table(result: dict[str, Any]) -> str:
    """configuration x pass: p50, mean, hit tokens per tier, computed, and the speed-up over ``gpu``."""
    speedups = {(c["candidate"], c["pass"]): c for c in result["comparison"]}
    rows = []
    for run in result["runs"]:
        for p in run["passes"]:
            s = speedups.get((run["name"], p["pass"]))
            rows.append(
                [
                    run["name"], f"{p['pass']} {p['order']}", p["p50_ms"], p["mean_ms"], p["gpu_hit_tokens"],
                    p["cpu_hit_tokens"] + p.get("disk_hit_tokens", 0), p["computed_tokens"],
                    f"{s['p50_speedup']:.1f}x / {s['mean_speedup']:.1f}x" if s else "",
                ]
            )
    headers = ["config", "pass", "p50 ms", "mean ms", "GPU hit tok", "CPU hit tok", "computed tok", "speed-up p50/mean"]
    return format_table(headers, rows, [False, False, True, True, True, True, True, True])
