"""``kvscope fleet --sweep``: every combination of replica counts, routers and per-replica tier sizes, one row each."""

from __future__ import annotations

from typing import Any

import click
from pydantic import ValidationError

from app.cli.executors import executor, progress
from app.cli.scenario_flags import within_budget
from app.cli.table import format_table
from sim.bounds import jsontext

SIZE_FLAGS = {"gpu_tokens": "--gpu-sizes", "cpu_tokens": "--cpu-sizes"}
HEAD = ["replicas", "router", "GPU tokens", "CPU tokens", "hit ratio", "TTFT p50 ms", "p90 ms", "p99 ms", "imbalance"]


def numbers(text: str, flag: str) -> list[int]:
    """``1,2,4`` as ints, each once."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        try:
            out.append(int(part))
        except ValueError:
            raise click.BadParameter(f"a comma-separated list of whole numbers, got {part!r}", param_hint=flag) from None
    if len(set(out)) != len(out):
        raise click.BadParameter(f"each value once, got {text}", param_hint=flag)
    return out


def sizes(text: str | None, flag: str, bytes_per_token: int | None) -> list[int | None]:
    """A tier's sizes per replica, in tokens: each in GiB (``8``), or tokens (``50000t``); 0 for none."""
    if text is None:
        return [None]
    from sim.blocks.kv import tokens_in

    out: list[int | None] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            value = float(part[:-1]) if part.endswith("t") else float(part)
        except ValueError:
            raise click.BadParameter(f"sizes in GiB (8) or tokens (50000t), comma-separated; got {part!r}", param_hint=flag) from None
        if value < 0 or value != value or value == float("inf"):
            raise click.BadParameter(f"sizes are 0 or more, got {part!r}", param_hint=flag)
        if part.endswith("t") or value == 0:
            out.append(int(value))
        elif bytes_per_token is None:
            raise click.BadParameter(f"give {part!r} in tokens ({part}t...): a trace names no model to size GiB", param_hint=flag)
        else:
            out.append(tokens_in(value, bytes_per_token))
    if len(set(out)) != len(out):
        raise click.BadParameter(f"each size once, got {text}", param_hint=flag)
    return out


def run(workload: Any, configs: list[Any], workers: int | None, ray_address: str | None, as_json: bool, where: str) -> None:
    """Check the sweep fits the budget, run it (side by side), print a row per configuration."""
    from sim.fleet.replicas import FleetError
    from sim.fleet.sweep import run_row, sweep_cost
    from sim.numeric.fanout import fan_out

    try:
        cost = sweep_cost(workload, configs)
    except FleetError as exc:
        raise click.BadParameter(str(exc), param_hint={"shared_tier": "--shared-tier"}.get(exc.field, "--replicas")) from None
    except ValidationError as exc:  # a size the scenario refuses, named by the sweep's flag
        err = exc.errors()[0]
        flag = SIZE_FLAGS.get(str(err["loc"][0]) if err["loc"] else "", "--replicas")
        raise click.BadParameter(err["msg"].removeprefix("Value error, "), param_hint=flag) from None
    within_budget(cost, "fewer configurations or a smaller workload", where=where)
    try:
        with executor(workers, ray_address) as pool:
            rows = fan_out(run_row, [(workload, c) for c in configs], pool, progress("fleet", "configurations"))
    except ValueError as exc:  # what the engines refuse (a request larger than a replica's pool, ...)
        raise click.UsageError(str(exc)) from None
    if as_json:
        click.echo(jsontext.dumps({"configurations": rows}, indent=1))
        return
    click.echo(format_table(HEAD, [
        [r["replicas"], r["router"], r["gpu_tokens"], r["cpu_tokens"] or "-", f"{r['hit_ratio']:.4f}", r["ttft_p50_ms"],
         r["ttft_p90_ms"], r["ttft_p99_ms"], f"{r['load_imbalance']:.2f}"] for r in rows
    ], [True, False] + [True] * 7))
