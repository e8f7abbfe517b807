"""The cost model's default constants are data (``sim/data/seed_fit.json``): the seed-table fit, with its provenance.

The file is written by ``scripts/fit_seed_costs.py``; these tests re-run the fit
and check that the file says what the fit gives, and that reading the
defaults needs neither the calibration nor the engine.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from importlib import resources

from live_servers import ROOT

from scripts.fit_seed_costs import seed_fit
from sim.costs.model import SEED_FIT, CostModel, default_costs


def test_the_file_holds_what_the_fit_gives() -> None:
    recorded = json.loads(SEED_FIT.read_text())
    fresh = seed_fit()
    # The constants to the last bit: JSON keeps a float's repr, so a re-run fit compares exactly.
    assert recorded["costs"] == fresh["costs"]
    assert recorded["provenance"] == fresh["provenance"]
    assert default_costs() == CostModel(**fresh["costs"])


def test_the_provenance_names_the_shipped_table_and_a_close_fit() -> None:
    provenance = json.loads(SEED_FIT.read_text())["provenance"]
    table = resources.files("sim").joinpath("data/seed_table.csv").read_bytes()
    assert provenance["table_sha256"] == hashlib.sha256(table).hexdigest()
    # 6 cells (2 configurations x 3 passes), each with a p50 and a mean error.
    assert len(provenance["cells"]) == 6
    assert provenance["r2"] > 0.999
    # The brief's anchors: 4,864 computed tokens ~560 ms; loading them from CPU 8-9 ms.
    assert {(a["ms"], a["computed"], a["cpu"]) for a in provenance["anchors"]} == {(560.0, 4864, 0), (8.5, 0, 4864)}


def test_the_defaults_load_without_calibration_or_the_engine() -> None:
    probe = "import json, sys; from sim.costs.model import default_costs; default_costs(); print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    loaded = {m for m in json.loads(out) if m.startswith("sim.")}
    assert not {m for m in loaded if m.startswith(("sim.calibration", "sim.engine", "sim.simulation"))}, loaded
