"""``kvscope policies``: hits per pass of the same workload under every eviction policy of the GPU and the CPU tier."""

from __future__ import annotations

from typing import Any

import click

from app.cli.save_run import keeps_nothing
from app.cli.scenario_flags import build_scenario, scenario_options, within_budget
from app.cli.table import format_table
from sim.analysis.whatif import compare
from sim.bounds import jsontext
from sim.workloads.estimate import policies_cost


@click.command("policies")
@keeps_nothing
@scenario_options
@click.option("--json", "as_json", is_flag=True, help="print every policy's pass summaries as JSON")
def command(as_json: bool, **flags: Any) -> None:
    """What if the GPU evicted by FIFO, MRU or Belady's offline optimum instead of LRU, and the CPU tier by each
    policy its backend offers (lmcache and brief: six, LRU to ARC; vllm-native: LRU and ARC): GPU hits per
    pass of the GPU tier alone, and CPU hits per pass with the CPU tier (* = the scenario's)."""
    scenario = build_scenario(**flags)
    within_budget(policies_cost(scenario))
    result = compare(scenario)
    if as_json:
        click.echo(jsontext.dumps(result, indent=1))
        return
    rows = []
    for tier in ("gpu", "cpu"):
        for entry in result[tier]:
            name = entry["policy"] + (" *" if entry["current"] else "")
            for p in entry["passes"]:
                rows.append(
                    [
                        f"{tier} ({entry['run']})", name, f"{p['pass']} {p['order']}", p["gpu_hit_tokens"],
                        p["cpu_hit_tokens"], p["p50_ms"], p["mean_ms"],
                    ]
                )
    headers = ["tier (run)", "policy", "pass", "GPU hit tok", "CPU hit tok", "p50 ms", "mean ms"]
    click.echo(format_table(headers, rows, [False, False, False, True, True, True, True]))
    if not result["cpu"]:
        click.echo("\n(no CPU tier in this scenario: give --cpu-gb or --cpu-tokens to compare CPU policies)")
