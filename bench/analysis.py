"""Analysis and planning speed: capacity curves of the seed lab, calibration of a measurement file, policy what-ifs."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.core import _best_of
from sim.analysis.capacity import cpu_curve, gpu_curve
from sim.analysis.whatif import compare
from sim.calibration import measurements
from sim.calibration.calibrate import calibrate_file, seed_scenario
from sim.costs.model import default_costs
from sim.simulation.run import simulate


def run() -> dict[str, Any]:
    default_costs()  # the one-off seed fit is not part of any figure
    seed = seed_scenario()
    gpu_points = sum(len(c["points"]) for c in gpu_curve(seed, 200)["curves"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "seed.csv"
        measurements.write(path, measurements.from_result(simulate(seed)))
        calibrate_s = _best_of(3, lambda: calibrate_file(path, seed))
    return {
        "gpu_curve_200_points_seed_lab_s": round(_best_of(3, lambda: gpu_curve(seed, 200)), 3),
        "gpu_curve_simulations": gpu_points,  # block and document granularity, marks included
        "cpu_curve_50_points_seed_lab_s": round(_best_of(3, lambda: cpu_curve(seed, 50)), 3),
        "calibrate_seed_lab_file_s": round(calibrate_s, 3),
        "policies_seed_lab_s": round(_best_of(3, lambda: compare(seed)), 3),
    }
