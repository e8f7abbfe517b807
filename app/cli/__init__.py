"""The ``kvscope`` command: one click group, one module per command."""

from __future__ import annotations

import click

from app.cli import analyze, calibrate, capacity, curve, emulate, live, policies, replay, serve, simulate, size, sweep

COMMAND_MODULES = [simulate, analyze, size, sweep, replay, curve, policies, emulate, live, serve, calibrate, capacity]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="kvscope")
def main() -> None:
    """See and predict what a GPU prefix cache and a CPU offload tier do to time-to-first-token."""


for module in COMMAND_MODULES:
    main.add_command(module.command)
