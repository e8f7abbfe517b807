"""The TTFT cost model: what a request's prefix hits, loads, compute and stores cost in ms.

``ttft = overhead + prefill * computed + load_cpu * cpu_tokens + load_disk * disk_tokens
+ store * stored_tokens``. The default constants are not typed in: they are the
least-squares fit (``sim.calibration.calibrate``) of this model to the seed table shipped
in ``sim/data/seed_table.csv``, computed on first use and cached in a file.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.numeric.stats import RESOLUTION_MS

# Coefficient names in the order the fit's feature vector uses.
COEFFICIENTS = ("overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "load_disk_ms_per_token", "store_ms_per_token")

# Local NVMe reads KV roughly 5x slower than pinned CPU memory over PCIe; the
# seed table has no disk tier to fit this from, so it is an assumption.
DISK_TO_CPU_LOAD_RATIO = 5.0


class CostModel(BaseModel):
    """Per-request cost constants, in ms and ms per token."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    overhead_ms: float = Field(ge=0, le=60_000, description="fixed cost of every request")
    prefill_ms_per_token: float = Field(ge=0, le=100, description="computing one prompt token")
    load_cpu_ms_per_token: float = Field(ge=0, le=100, description="loading one token of KV from CPU")
    load_disk_ms_per_token: float = Field(ge=0, le=100, description="loading one token of KV from disk")
    store_ms_per_token: float = Field(ge=0, le=100, description="writing one computed token through to CPU")
    source: str = Field(default="custom", description="where the constants came from")

    @model_validator(mode="after")
    def _every_request_costs_something(self) -> CostModel:
        # At least one token is always computed (vLLM recomputes the last), so the cheapest request costs at least
        # overhead + prefill. Below the resolution figures are reported at it would read 0.0 ms in a summary and a
        # speed-up over it would be infinite (not JSON); at or above it, every TTFT and every speed-up is finite.
        if self.overhead_ms + self.prefill_ms_per_token < RESOLUTION_MS:
            raise ValueError(
                f"overhead_ms + prefill_ms_per_token must be at least {RESOLUTION_MS} ms (the resolution TTFTs are "
                "reported at), so that every TTFT is above 0"
            )
        return self

    def ttft_ms(self, computed: int, cpu_tokens: int = 0, disk_tokens: int = 0, stored: int = 0) -> float:
        return (
            self.overhead_ms
            + self.prefill_ms_per_token * computed
            + self.load_cpu_ms_per_token * cpu_tokens
            + self.load_disk_ms_per_token * disk_tokens
            + self.store_ms_per_token * stored
        )

    def scaled(self, factor: float) -> CostModel:
        """The same model with every cost multiplied by ``factor`` (for a faster emulator)."""
        return self.model_copy(update={name: getattr(self, name) * factor for name in COEFFICIENTS})


# The default constants: the least-squares fit of this model to the seed table, written with its provenance by
# scripts/fit_seed_costs.py (tests/sim/costs/test_seed_fit.py re-runs the fit and compares).
SEED_FIT = Path(__file__).resolve().parents[1] / "data" / "seed_fit.json"


@cache
def default_costs() -> CostModel:
    """The fit of the cost model to the seed table, as ``sim/data/seed_fit.json`` records it."""
    return CostModel(**json.loads(SEED_FIT.read_text())["costs"])
