"""The emulator's settings, validated with explicit bounds: the tiers it emulates, its model, scheduler and speed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sim.blocks.kv import DEFAULT_MODEL, model_shape, tokens_in
from sim.costs.model import CostModel
from sim.sched.config import SchedulerConfig
from sim.workloads.scenario import MAX_GB, MAX_GPU_TOKENS

MAX_SPEED = 1000.0
MAX_NUM_SEQS = 65_536
_SCHEDULER = SchedulerConfig()  # vllm serve's defaults on an 80 GiB GPU (sim.sched.config)


class EmulatorConfig(BaseModel):
    """What ``kvscope emulate`` serves. Capacities are vLLM's and LMCache's units (tokens, GiB)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_tokens: int = Field(default=21_520, ge=32, le=MAX_GPU_TOKENS, description="GPU KV cache size in tokens, as vLLM logs it")
    cpu_gb: float | None = Field(default=1.5, gt=0, le=MAX_GB, description="CPU tier (LMCache max_local_cpu_size), GiB; None: no CPU tier")
    model: str = Field(default=DEFAULT_MODEL, description="served model name; its KV bytes per token size the CPU tier")
    speed: float = Field(default=1.0, gt=0, le=MAX_SPEED, description="delays are the cost model's divided by this")
    block_size: int = Field(default=16, ge=1, le=4096, description="GPU block size in tokens")
    chunk_size: int = Field(default=256, ge=1, le=65_536, description="CPU chunk size in tokens")
    max_model_len: int | None = Field(default=None, ge=2, le=MAX_GPU_TOKENS, description="longest prompt + completion; default: what the GPU holds")
    served_model_name: tuple[str, ...] | None = Field(
        default=None, description="names clients may ask for (vLLM's --served-model-name); the first is reported; default: model"
    )
    max_num_batched_tokens: int = Field(
        default=_SCHEDULER.max_num_batched_tokens, ge=1, le=MAX_GPU_TOKENS,
        description="tokens a scheduler step may compute (vLLM's --max-num-batched-tokens)",
    )
    max_num_seqs: int = Field(
        default=_SCHEDULER.max_num_seqs, ge=1, le=MAX_NUM_SEQS, description="requests running at once (vLLM's --max-num-seqs)"
    )
    prompt_tokens_details: bool = Field(default=False, description="report usage.prompt_tokens_details.cached_tokens")
    costs: CostModel | None = Field(default=None, description="cost constants; default: the fit to the seed table")

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        return model_shape(value).name

    @model_validator(mode="after")
    def _consistent(self) -> EmulatorConfig:
        if self.chunk_size % self.block_size:
            raise ValueError(f"chunk_size ({self.chunk_size}) must be a multiple of block_size ({self.block_size})")
        if self.num_gpu_blocks < 2:
            raise ValueError(f"gpu_tokens ({self.gpu_tokens}) must hold at least 2 blocks of {self.block_size} tokens")
        if self.max_model_len is not None and self.max_model_len > self.usable_gpu_tokens:
            # vLLM refuses to start when one sequence cannot fit in the KV cache.
            raise ValueError(
                f"max_model_len ({self.max_model_len}) is larger than the GPU KV cache can hold "
                f"({self.usable_gpu_tokens} tokens)"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            # vllm/config/scheduler.py verify: the budget must give every running request a token.
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least max_num_seqs ({self.max_num_seqs})"
            )
        if self.cpu_tokens == 0:
            raise ValueError(f"cpu_gb ({self.cpu_gb}) holds no token of {self.model}'s KV")
        return self

    @field_validator("served_model_name")
    @classmethod
    def _names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and (not value or any(not name.strip() for name in value)):
            raise ValueError("served model names must be non-empty")
        return value

    @property
    def served_names(self) -> tuple[str, ...]:
        return self.served_model_name or (self.model,)

    @property
    def num_gpu_blocks(self) -> int:
        """Blocks as vLLM's ``cache_config_info`` reports them (the null block included)."""
        return self.gpu_tokens // self.block_size

    @property
    def usable_gpu_tokens(self) -> int:
        return (self.num_gpu_blocks - 1) * self.block_size

    @property
    def context_tokens(self) -> int:
        return self.max_model_len or self.usable_gpu_tokens

    @property
    def cpu_tokens(self) -> int | None:
        if self.cpu_gb is None:
            return None
        return tokens_in(self.cpu_gb, model_shape(self.model).bytes_per_token)
