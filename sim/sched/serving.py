"""How requests are served, as a user gives it: arrivals and vLLM's scheduler flags, validated with their limits.

One definition for the CLI flags (``--max-num-batched-tokens``: the field
name in kebab case, as ``vllm serve`` spells it) and the API body fields (the
same names in snake case). Nothing given: the sequential engine, one request
at a time, and every figure as before.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.sched.arrivals import MIN_RATE_PER_S, Arrivals, ClosedLoop, OpenLoop
from sim.sched.config import SchedulerConfig, serve_batch_defaults

MAX_CONCURRENCY = 4096
MAX_RATE_PER_S = 100_000.0
MAX_BATCHED_TOKENS = 1_048_576
MAX_NUM_SEQS = 65_536

# The fields that choose the stepped engine when given (arrival_seed alone does not).
SCHEDULER_FIELDS = tuple(f.name for f in fields(SchedulerConfig) if f.name != "max_model_len")
_DEFAULTS = SchedulerConfig()
_SMALL_TOKENS, _SMALL_SEQS = serve_batch_defaults(0)  # vllm serve on a GPU below 70 GiB


def _on(flag: bool) -> str:
    return "on" if flag else "off"


class Serving(BaseModel):
    """Arrivals (a closed loop of ``concurrency`` in flight, or an open loop at ``rate``) and the scheduler's flags."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    concurrency: int | None = Field(
        default=None, ge=1, le=MAX_CONCURRENCY,
        description="requests in flight (a closed loop: the next arrives when one finishes); 1 is the seed lab's",
    )
    rate: float | None = Field(
        default=None, ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S,
        description="requests per second arriving on their own (an open loop, Poisson), instead of --concurrency",
    )
    arrival_seed: int = Field(default=0, ge=0, le=2**31, description="seed of the open loop's arrival times")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, le=MAX_BATCHED_TOKENS,
        description=f"vLLM's token budget per step; default {_DEFAULTS.max_num_batched_tokens}, vllm serve's on an 80 GiB "
        f"GPU ({_SMALL_TOKENS} below 70 GiB)",
    )
    max_num_seqs: int | None = Field(
        default=None, ge=1, le=MAX_NUM_SEQS,
        description=f"vLLM's limit on running requests; default {_DEFAULTS.max_num_seqs}, vllm serve's on an 80 GiB GPU "
        f"({_SMALL_SEQS} below 70 GiB)",
    )
    long_prefill_token_threshold: int | None = Field(
        default=None, ge=0, le=MAX_BATCHED_TOKENS,
        description=f"vLLM's cap on a prefill chunk while other requests run or wait; "
        f"{_DEFAULTS.long_prefill_token_threshold} (vLLM's default): no cap",
    )
    enable_chunked_prefill: bool | None = Field(
        default=None,
        description=f"vLLM's chunked prefill ({_on(_DEFAULTS.enable_chunked_prefill)} by default): a long prompt over "
        "several steps",
    )
    scheduler_reserve_full_isl: bool | None = Field(
        default=None,
        description=f"vLLM's admission only when the whole prompt's blocks fit "
        f"({_on(_DEFAULTS.scheduler_reserve_full_isl)} by default)",
    )
    async_scheduling: bool | None = Field(
        default=None,
        description="vLLM's asynchronous scheduling (vllm serve turns it on): each step scheduled while the one before "
        "runs, decodes a step ahead; off by default",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Serving:
        if self.concurrency is not None and self.rate is not None:
            raise ValueError("give concurrency or rate, not both")
        self.scheduler_config()  # its own checks, each naming its field and limit
        return self

    def given(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in SCHEDULER_FIELDS if getattr(self, name) is not None}

    @property
    def stepped(self) -> bool:
        """Whether anything asks for the stepped engine (a concurrency, a rate or a scheduler flag)."""
        return self.concurrency is not None or self.rate is not None or bool(self.given())

    @property
    def overlapping(self) -> bool:
        """Whether requests may overlap: more than one in flight, or arriving on their own at a rate."""
        return self.rate is not None or (self.concurrency or 1) > 1

    def label(self) -> str:
        """In a few words, for a run's name: ``4 in flight``, ``2.5 requests/s``, then the scheduler flags given."""
        parts = [f"{self.rate:g} requests/s" if self.rate is not None else f"{self.concurrency or 1} in flight"]
        parts += [f"{name} {value:,}" if isinstance(value, int) and not isinstance(value, bool) else f"{name} {value}"
                  for name, value in self.given().items()]
        return ", ".join(parts)

    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(**self.given())

    def arrivals(self) -> Arrivals:
        if self.rate is not None:
            return OpenLoop(self.rate, self.arrival_seed)
        return ClosedLoop(self.concurrency or 1)

    def summary(self) -> dict[str, Any]:
        """The settings a run used, defaults filled in (the JSON result's ``serving``)."""
        config = self.scheduler_config()
        arrivals = self.arrivals()
        loop: dict[str, Any] = (
            {"rate": arrivals.rate_per_s, "arrival_seed": arrivals.seed}
            if isinstance(arrivals, OpenLoop) else {"concurrency": self.concurrency or 1}
        )
        return {**loop, **{f.name: getattr(config, f.name) for f in fields(SchedulerConfig)}}
