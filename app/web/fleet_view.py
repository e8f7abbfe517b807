"""What the Fleet view shows of ``kvscope fleet --json``'s result: the per-router table, each router's TTFTs for the
chart, and each replica's strip of the requests routed to it."""

from __future__ import annotations

from typing import Any

from sim.engine.events import tier_label


def _cell(row: dict[str, Any]) -> dict[str, Any]:
    """One request on its replica's strip: its number, its prompt and what of it was not computed, and what the
    replica that held most of it could have hit (tokens lost to the choice)."""
    prompt = row["prompt_tokens"]
    hit = prompt - row["computed_tokens"]
    return {
        "seq": row["seq"], "prompt": prompt, "gpu": row["gpu_hit_tokens"], "loaded": hit - row["gpu_hit_tokens"],
        "hit": hit, "share": hit / prompt if prompt else 0.0, "ttft_ms": row["ttft_ms"],
        "best": row["best_replica"], "lost": row["lost_tokens"],
    }


def _strips(entry: dict[str, Any], replicas: int) -> list[dict[str, Any]]:
    """Each replica's requests, in the order they arrived, with its row of the result's per-replica figures."""
    cells: list[list[dict[str, Any]]] = [[] for _ in range(replicas)]
    for row in entry["requests"]:
        cells[row["replica"]].append(_cell(row))
    return [{**figures, "cells": cells[figures["replica"]]} for figures in entry["replicas"]]


def build(result: dict[str, Any]) -> dict[str, Any]:
    """The view of a fleet result: its status line, one table row per router, the chart's data and the strips."""
    fleet = result["fleet"]
    bounds = fleet["bounds"]
    tiers = " + ".join(tier_label(t["name"]) for t in fleet["tiers"])
    shared = f", a shared tier {fleet['shared_tier']}" if fleet["shared_tier"] else ""
    requests = len(result["routers"][0]["requests"]) if result["routers"] else 0
    rows = [
        {
            "router": entry["router"], "hit_ratio": s["hit_ratio"], "ttft_p50_ms": s["ttft_p50_ms"],
            "ttft_p90_ms": s["ttft_p90_ms"], "ttft_p99_ms": s["ttft_p99_ms"], "imbalance": s["load_imbalance"],
            "lost_tokens": s["lost_tokens"],
        }
        for entry in result["routers"] for s in (entry["summary"],)
    ]
    return {
        "status": f"Served {requests:,} requests through {fleet['replicas']} replicas of {tiers}{shared}, "
        f"under {len(rows)} router{'s' if len(rows) != 1 else ''}.",
        "replicas": fleet["replicas"],
        "bounds": bounds,
        "rows": rows,
        "chart": [{"router": e["router"], "ttft_ms": sorted(r["ttft_ms"] for r in e["requests"])} for e in result["routers"]],
        "lanes": [{"router": e["router"], "strips": _strips(e, fleet["replicas"])} for e in result["routers"]],
    }
