"""What the Fleet view shows of ``kvscope fleet --json``'s result: the per-router table, each router's TTFTs for the
chart, each replica's strip of the requests routed to it and its tiers' bars, and what the player plays (each
request's route in arrival order, and the holdings' frames: ``sim.fleet.holdings``)."""

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


def _route(row: dict[str, Any]) -> dict[str, Any]:
    """One request as the player shows it arriving: where it went, what that replica's GPU held of it, and the
    replica that held most (the JSON's fields, under shorter names)."""
    return {
        "seq": row["seq"], "pass": row["pass"], "doc": row["doc"], "replica": row["replica"], "held": row["held_tokens"],
        "best": row["best_replica"], "best_held": row["best_held_tokens"], "lost": row["lost_tokens"],
    }


def _tiers(fleet: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Each replica's own tiers, and the shared one (a store behind them all, drawn once), each with its label."""
    shared = fleet["shared_tier"].split(":")[0] if fleet["shared_tier"] else None
    tiers = [{**t, "label": tier_label(t["name"])} for t in fleet["tiers"]]
    return [t for t in tiers if t["name"] != shared], next((t for t in tiers if t["name"] == shared), None)


def build(result: dict[str, Any]) -> dict[str, Any]:
    """The view of a fleet result: its status line, one table row per router, the chart's data and the strips."""
    fleet = result["fleet"]
    bounds = fleet["bounds"]
    tiers = " + ".join(tier_label(t["name"]) for t in fleet["tiers"])
    shared = f", a shared tier {fleet['shared_tier']}" if fleet["shared_tier"] else ""
    requests = len(result["routers"][0]["requests"]) if result["routers"] else 0
    own, shared_tier = _tiers(fleet)
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
        "tiers": own,
        "shared_tier": shared_tier,
        "prompt_tokens": max((r["prompt_tokens"] for r in result["routers"][0]["requests"]), default=0) if requests else 0,
        "requests": requests,
        # The fleet routes the requests in their order (sim.fleet.clock): by seq is by arrival.
        "play": {
            e["router"]: {"requests": [_route(r) for r in sorted(e["requests"], key=lambda r: r["seq"])],
                          "frames": e.get("holdings", [])}
            for e in result["routers"]
        },
    }
