"""The ``kvscope`` command: one click group, one module per command, each imported only when it is needed.

Imports: app.budgets, app.costs_profile, app.emulator, app.live, app.proxy, app.runs, app.scenario_input,
app.web (each command its own), and sim.advise, sim.analysis, sim.blocks, sim.bounds, sim.calibration,
sim.costs, sim.engine, sim.explain, sim.fleet, sim.kvevents, sim.numeric, sim.sched, sim.simulation, sim.tiers, sim.traces,
sim.workloads.
Exports: ``main`` (the group; ``entry.run`` is the executable), ``COMMANDS``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

# Where the code runs from (site-packages, or the checkout of an editable install) and on which Python, as pip
# --version says it: bug reports need both.
INSTALLED_AT = f"{Path(__file__).resolve().parents[1]} (python {sys.version_info.major}.{sys.version_info.minor})"

# Command name -> the one-line help ``kvscope --help`` lists; the module of the same name (app/cli/NAME.py)
# defines ``command`` and is imported only when that command runs or its own help is shown, so that
# ``kvscope --help`` and ``kvscope simulate`` do not pay for the web server, the live client or the emulator.
COMMANDS: dict[str, str] = {
    "simulate": "Simulate the scenario with the GPU alone and with a CPU tier.",
    "analyze": "Summarise a per-request measurement file (CSV or JSONL).",
    "size": "Size a CPU tier from a model's KV bytes per token.",
    "sweep": "Find the smallest capacities that serve pass 2 from cache.",
    "replay": "Replay a Mooncake or Bailian trace through the GPU and a CPU tier.",
    "curve": "Hit ratio of a plain LRU at every capacity, in one pass.",
    "policies": "What if the GPU evicted by FIFO, MRU or Belady's offline optimum?",
    "emulate": "Serve a vLLM-like emulator of the tiers (live mode without a GPU).",
    "live": "Send the scenario's requests to each target and measure TTFT.",
    "serve": "Serve the dashboard and the API.",
    "calibrate": "Fit the cost model's constants to a measurement file.",
    "capacity": "Simulate the scenario at many capacities of one tier.",
    "watch": "Follow a vLLM server's KV events: what each tier holds, live.",
    "explain": "Why tokens missed, and the capacity that would have hit.",
    "runs": "The kept runs: list, show, diff, export, delete, import.",
    "advise": "Find the cheapest tier sizes whose simulated TTFT meets a target.",
    "fleet": "Compare routers over N replicas, each with its own GPU and tiers.",
}


class _Commands(dict[str, click.Command]):
    """``Group.commands`` that imports a listed command's module the first time the command is looked up."""

    def __missing__(self, name: str) -> click.Command:
        if name not in COMMANDS:
            raise KeyError(name)
        command: click.Command = importlib.import_module(f"app.cli.{name}").command
        command.short_help = COMMANDS[name]
        self[name] = command
        return command


# The parser's own errors (an unknown or missing option, an argument too many): the usage shows the way out.
_SHOW_USAGE = (click.MissingParameter, click.NoSuchOption, click.BadOptionUsage, click.BadArgumentUsage)


class _Refused(click.ClickException):
    """A usage error shown as its one ``Error:`` line, with usage's exit status."""

    exit_code = 2


class LazyGroup(click.Group):
    """A group whose commands are imported by name on first use; listing them imports nothing."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.commands = _Commands()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        try:
            return self.commands[cmd_name]
        except KeyError:
            return None

    def invoke(self, ctx: click.Context) -> object:
        # A value or file the user gave is refused in one line naming it (the file, its line, the limit): click
        # would print the command's usage above it, which says nothing about what was wrong. A missing option
        # keeps the usage, which shows what to add.
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            if isinstance(exc, _SHOW_USAGE) or not (type(exc) is click.UsageError or isinstance(exc, click.BadParameter)):
                raise
            raise _Refused(exc.format_message()) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
# The version is pyproject.toml's, read back from the installed metadata.
@click.version_option(package_name="kvscope", message=f"%(prog)s %(version)s from {INSTALLED_AT}")
def main() -> None:
    """See and predict what a GPU prefix cache and a CPU offload tier do to time-to-first-token."""
