"""The ``kvscope`` command: one click group, one module per command."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from app.cli import analyze, calibrate, capacity, curve, emulate, live, policies, replay, serve, simulate, size, sweep

# Where the code runs from (site-packages, or the checkout of an editable install) and on which Python, as pip
# --version says it: bug reports need both.
INSTALLED_AT = f"{Path(__file__).resolve().parents[1]} (python {sys.version_info.major}.{sys.version_info.minor})"

COMMAND_MODULES = [simulate, analyze, size, sweep, replay, curve, policies, emulate, live, serve, calibrate, capacity]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
# The version is pyproject.toml's, read back from the installed metadata.
@click.version_option(package_name="kvscope", message=f"%(prog)s %(version)s from {INSTALLED_AT}")
def main() -> None:
    """See and predict what a GPU prefix cache and a CPU offload tier do to time-to-first-token."""


for module in COMMAND_MODULES:
    main.add_command(module.command)
