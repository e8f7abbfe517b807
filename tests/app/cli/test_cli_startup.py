"""CLI start-up: ``kvscope --help`` imports no command, and simulating imports no web stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest
from live_servers import ROOT

from app.cli import COMMANDS, main

WEB_STACK = ("fastapi", "uvicorn", "httpx", "starlette")

# Runs the CLI in a fresh interpreter and prints the modules it imported, so that nothing the test process
# already imported hides an import.
_PROBE = """
import json, sys
from app.cli import main
try:
    main({args!r}, standalone_mode=False)
finally:
    print("MODULES" + json.dumps(sorted(sys.modules)))
"""


def _modules_after(args: list[str], tmp_path: object) -> tuple[str, set[str]]:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(args=args)], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    text, _, modules = out.rpartition("MODULES")
    return text, set(json.loads(modules))


def test_help_lists_every_command_with_its_short_help_and_imports_none(tmp_path: object) -> None:
    text, modules = _modules_after(["--help"], tmp_path)
    flat = " ".join(text.split())  # the listing wraps long lines
    for name, short in COMMANDS.items():
        assert f" {name} {short}" in flat
        assert f"app.cli.{name}" not in modules
    assert not [m for m in modules if m.split(".")[0] in WEB_STACK + ("pydantic", "sim")]


def test_simulate_imports_no_web_stack(tmp_path: object) -> None:
    text, modules = _modules_after(["simulate"], tmp_path)
    assert "pass" in text  # the seed-style table was printed
    assert "app.cli.simulate" in modules and "app.cli.serve" not in modules
    assert not [m for m in modules if m.split(".")[0] in WEB_STACK]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_command_loads_under_its_name(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert command is not None and command.name == name
    assert command.short_help == COMMANDS[name]


def test_an_unknown_command_is_a_usage_error() -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["simulat"])
    assert result.exit_code == 2 and "No such command 'simulat'" in result.output
