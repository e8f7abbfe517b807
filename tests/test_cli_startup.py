"""CLI start-up: ``kvscope --help`` imports no command, and simulating imports no web stack; the seed fit is cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest

from app.cli import COMMANDS, main
from live_servers import ROOT
from sim import fit_cache
from sim.costs import CostModel

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


# -- the seed fit's cache ------------------------------------------------------------------------------


@pytest.fixture
def cache_home(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def _fit() -> CostModel:
    from sim.calibrate import fit_seed_table

    return fit_seed_table().costs


def test_first_use_writes_the_fit_and_later_uses_read_it(cache_home: object, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _fit()
    assert fit_cache.seed_costs() == expected
    path = fit_cache.cache_path(fit_cache.inputs_digest())
    assert path.parent == fit_cache.cache_dir() and path.is_file()
    assert json.loads(path.read_text())["inputs_sha256"] == fit_cache.inputs_digest()

    # With the file in place the fit is not run again: make running it fail.
    def no_fit() -> None:
        raise AssertionError("the fit ran although the cache holds it")

    monkeypatch.setattr("sim.calibrate.fit_seed_table", no_fit)
    assert fit_cache.seed_costs() == expected


def test_a_file_made_from_other_inputs_is_not_trusted(cache_home: object) -> None:
    digest = fit_cache.inputs_digest()
    path = fit_cache.cache_path(digest)
    wrong = _fit().model_copy(update={"overhead_ms": 999.0})
    # Same file name, but the digest inside names other inputs (a changed seed table, say).
    fit_cache.write_cached(path, "0" * 64, wrong)
    assert fit_cache.read_cached(path, digest) is None
    assert fit_cache.seed_costs() == _fit()
    assert fit_cache.read_cached(path, digest) == _fit()  # rewritten


@pytest.mark.parametrize("body", ["", "{not json", '{"inputs_sha256": "DIGEST", "costs": {"overhead_ms": -1}}'])
def test_a_damaged_file_is_recomputed(cache_home: object, body: str) -> None:
    digest = fit_cache.inputs_digest()
    path = fit_cache.cache_path(digest)
    path.parent.mkdir(parents=True)
    path.write_text(body.replace("DIGEST", digest))
    assert fit_cache.read_cached(path, digest) is None
    assert fit_cache.seed_costs() == _fit()


def test_an_unwritable_cache_falls_back_to_computing(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"  # type: ignore[operator]
    blocker.write_text("a file where the cache directory should go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert fit_cache.seed_costs() == _fit()
    assert not fit_cache.cache_dir().exists()


def test_the_digest_changes_with_the_seed_table(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    # A copy of sim/ whose seed table has one more byte: a different input, so a different digest.
    import shutil

    copy = tmp_path / "sim"  # type: ignore[operator]
    shutil.copytree(fit_cache.SIM_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = fit_cache.inputs_digest()
    monkeypatch.setattr(fit_cache, "SIM_DIR", copy)
    assert fit_cache.inputs_digest() == before
    with (copy / "data" / "seed_table.csv").open("a") as f:
        f.write("\n")
    assert fit_cache.inputs_digest() != before
