"""Cost profiles in the app: the one a server runs with (``KVSCOPE_COSTS`` names a profile file), and how one is saved.

``kvscope serve --costs FILE`` checks the file and sets the variable; every
scenario the page and the API simulate then uses its constants unless the
request brings its own ``costs``.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

from sim.bounds import jsontext
from sim.calibration.calibrate import load_profile
from sim.costs.model import CostModel

ENV_VAR = "KVSCOPE_COSTS"


@cache
def served_costs() -> CostModel | None:
    """This process's profile (read once), or None for the default fit to the seed table."""
    path = os.environ.get(ENV_VAR)
    return load_profile(Path(path)) if path else None


def configure(path: Path | None) -> None:
    """Check the profile a server will run with (``path``, else ``KVSCOPE_COSTS``) and name it in ``KVSCOPE_COSTS``.

    Raises ``ValueError`` naming the file for a profile that cannot be read.
    """
    if path is not None:
        load_profile(path)
        os.environ[ENV_VAR] = str(path.resolve())
    elif os.environ.get(ENV_VAR):
        load_profile(Path(os.environ[ENV_VAR]))
    served_costs.cache_clear()


def profile_text(profile: dict[str, Any]) -> str:
    """A cost profile (``Calibration.profile()``) as ``kvscope calibrate`` saves it and the page offers it."""
    return jsontext.dumps(profile, indent=1) + "\n"


def profile_name(measurements_name: str) -> str:
    """Where a measurement file's profile goes by default: ``run.csv`` -> ``run.costs.json``."""
    return measurements_name.split(".")[0] + ".costs.json"
