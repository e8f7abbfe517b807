"""``kvscope curve [TRACE]``: a plain-LRU hit-ratio curve over every capacity, in one pass over the block stream."""

from __future__ import annotations

from typing import Any

import click

from app.cli.save_run import keeps_nothing
from app.cli.scenario_flags import build_scenario, scenario_options, within_budget
from app.cli.trace_options import format_option, load
from sim.analysis.curve import MAX_CURVE_POINTS, lru_curve, scenario_stream, trace_stream
from sim.bounds import jsontext
from sim.bounds.budget import block_stream_cost
from sim.traces.reader import TraceFormat


@click.command("curve")
@keeps_nothing
@click.argument("trace", required=False)
@click.option("--points", type=click.IntRange(1, MAX_CURVE_POINTS), default=100, show_default=True,
              help="capacities, spread evenly up to the number of distinct blocks")
@format_option()
@scenario_options
@click.option("--json", "as_json", is_flag=True, help='print [{"capacity_blocks": C, "hit_ratio": H}, ...]')
def command(trace: str | None, points: int, fmt: TraceFormat | None, as_json: bool, **flags: Any) -> None:
    """Hit ratio of a plain LRU of C blocks, for every C, fed TRACE's blocks in order (each request's hash_ids
    as listed; --block-size is the trace's, default its format's) or, without TRACE, the blocks of a scenario's requests
    (--preset and the scenario flags). A model of reuse, not of the vLLM pool: see the README."""
    if trace is not None:
        source = load(trace, flags["block_size"], fmt)
        stream, label = trace_stream(source), f"{source.name} ({source.block_tokens}-token blocks)"
        within_budget(block_stream_cost(len(stream), points), "a smaller trace", where=trace)
    else:
        if fmt is not None:
            raise click.UsageError("--format: names a trace's format; give a TRACE")
        scenario = build_scenario(**flags)
        within_budget(block_stream_cost(scenario.total_blocks, points), "fewer --points or a smaller scenario")
        stream, label = scenario_stream(scenario), f"scenario ({scenario.block_size}-token blocks)"
    curve = lru_curve(stream, points)
    if as_json:
        click.echo(jsontext.dumps(curve["points"], indent=1))
        return
    from app.cli.table import format_table  # the table's module (and the tier names it reads) only for a table

    click.echo(
        f"{label}: {curve['references']:,} block references, {curve['distinct_blocks']:,} distinct; "
        f"an LRU holding them all hits {curve['max_hit_ratio']:.4f}"
    )
    click.echo(
        format_table(
            ["capacity blocks", "hit ratio", "hit blocks"],
            [[p["capacity_blocks"], f"{p['hit_ratio']:.4f}", p["hit_blocks"]] for p in curve["points"]],
            [True, True, True],
        )
    )
