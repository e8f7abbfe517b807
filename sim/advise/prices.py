"""Prices and the deployment they apply to: $ per GPU-hour and per GiB-hour of DRAM and NVMe, given by the user (none built in)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.bounds import jsontext, textfile

# GPU memory in GiB by type: hardware facts (the vendors' data sheets), not prices.
GPU_MEMORY_GIB: dict[str, float] = {
    "h100-80gb": 80.0, "h200": 141.0, "a100-80gb": 80.0, "a100-40gb": 40.0, "l40s": 48.0, "l4": 24.0, "a10g": 24.0,
    "rtx-4090": 24.0, "b200": 180.0,
}


class Prices(BaseModel):
    """What an hour of each resource costs, in dollars; every field the user's, never a default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_hour: float = Field(ge=0, le=10_000, description="$ per GPU-hour")
    dram_gib_hour: float = Field(ge=0, le=1_000, description="$ per GiB-hour of CPU DRAM")
    nvme_gib_hour: float = Field(default=0.0, ge=0, le=1_000, description="$ per GiB-hour of NVMe")


class Deployment(BaseModel):
    """Where the model runs: GPU type and count, tensor parallelism, the share of GPU memory vLLM may use."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_type: str = Field(default="h100-80gb", description=f"one of {', '.join(GPU_MEMORY_GIB)}")
    gpus: int = Field(default=1, ge=1, le=1024, description="GPUs serving one replica")
    tp: int = Field(default=1, ge=1, le=1024, description="tensor-parallel size")
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1, description="vLLM's --gpu-memory-utilization")
    weights_gib: float = Field(default=0.0, ge=0, le=100_000, description="model weights (all ranks), taken from the KV room")

    @property
    def gpu_memory_gib(self) -> float:
        try:
            return GPU_MEMORY_GIB[self.gpu_type]
        except KeyError:
            raise ValueError(f"gpu_type: unknown GPU {self.gpu_type!r}; known: {', '.join(GPU_MEMORY_GIB)}") from None

    @property
    def kv_room_gib(self) -> float:
        """GPU memory left for KV across the replica's GPUs."""
        return self.gpus * self.gpu_memory_gib * self.gpu_memory_utilization - self.weights_gib

    def gpu_gib_hour(self, prices: Prices) -> float:
        """A GiB of GPU memory for an hour: the GPU's price over its memory."""
        return prices.gpu_hour / self.gpu_memory_gib


def load_prices(path: str | Path) -> Prices:
    """A prices file: ``{"gpu_hour": 2.5, "dram_gib_hour": 0.005, "nvme_gib_hour": 0.0002}``; errors name the field."""
    try:
        data = jsontext.loads(textfile.read_text(Path(path)))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read a JSON prices file ({exc})") from None
    try:
        return Prices.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "prices"
        raise ValueError(f"{path}: {field}: {first['msg']}") from None
