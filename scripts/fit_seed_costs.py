"""Write ``sim/data/seed_fit.json``: the cost model's default constants, fitted to the seed table, with provenance.

Run after a change to the seed table, its anchors, the fit or the engine
(``python scripts/fit_seed_costs.py``); ``tests/sim/costs/test_seed_fit.py``
fails until the file matches what the fit gives.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.calibration.calibrate import SEED_ANCHORS, fit_seed_table  # noqa: E402
from sim.costs.model import SEED_FIT  # noqa: E402


def seed_fit() -> dict[str, Any]:
    """The file's content: the constants, the fit's figures, and what it was fitted to."""
    table = resources.files("sim").joinpath("data/seed_table.csv").read_bytes()
    calibration = fit_seed_table()
    return {
        "costs": calibration.costs.model_dump(mode="json"),
        "provenance": {
            "table": "sim/data/seed_table.csv",
            "table_sha256": hashlib.sha256(table).hexdigest(),
            "scenario": "preset seed-lab, runs gpu and gpu+cpu",
            "anchors": [{"ms": a.ms, "computed": a.computed, "cpu": a.cpu, "stored": a.stored} for a in SEED_ANCHORS],
            "method": "non-negative least squares on relative errors of every cell's p50 and mean "
            "(sim.calibration.calibrate.fit); load_disk = load_cpu x DISK_TO_CPU_LOAD_RATIO",
            "r2": calibration.r2,
            "max_error": calibration.max_error,
            "cells": calibration.cells,
            "written_by": "scripts/fit_seed_costs.py",
        },
    }


def main() -> None:
    SEED_FIT.write_text(json.dumps(seed_fit(), indent=1) + "\n")
    print(f"wrote {SEED_FIT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
