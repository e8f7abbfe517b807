"""CLI start-up: ``kvscope --help``, ``kvscope simulate`` (the seed lab; with ``--no-save``, and keeping its run in
a fresh database) and ``kvscope curve`` of the bundled trace, whole process, wall time, beside ``python -c pass``."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._timing import byte_compiled, command_runs, figure

REPEATS = 9
KVSCOPE = str(Path(sys.executable).with_name("kvscope"))


def run() -> dict[str, Any]:
    setup = byte_compiled()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "KVSCOPE_DB": str(Path(tmp) / "runs.db")}  # never the user's runs database
        anchor = command_runs([sys.executable, "-c", "pass"], REPEATS, env)
        command_runs([KVSCOPE, "simulate"], 1, env)  # first use creates the database; not timed
        help_s = command_runs([KVSCOPE, "--help"], REPEATS, env)
        simulate_s = command_runs([KVSCOPE, "simulate", "--no-save"], REPEATS, env)
        saved_s = command_runs([KVSCOPE, "simulate"], REPEATS, env)
        curve_s = command_runs([KVSCOPE, "curve", "mooncake-synthetic", "--json"], REPEATS, env)
    return {
        **setup,
        "kvscope_help": figure(help_s, anchor, "python -c pass", target_s=0.150),
        "kvscope_simulate_seed_lab": figure(simulate_s, anchor, "python -c pass", target_s=0.300),
        "kvscope_simulate_seed_lab_saved": figure(saved_s, anchor, "python -c pass", target_s=0.300),
        "kvscope_curve_bundled_trace": figure(curve_s, anchor, "python -c pass", target_s=0.250),
    }
