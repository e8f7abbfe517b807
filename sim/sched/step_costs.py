"""What one engine step costs: a fixed cost, plus its prefill tokens, decodes, context read, loads and stores."""

from __future__ import annotations

from dataclasses import dataclass

from sim.costs.model import CostModel
from sim.engine.loop import cost_ms
from sim.tiers.offload import OffloadTier


@dataclass(frozen=True, slots=True)
class StepCosts:
    """``dt = fixed + prefill x tokens + loads per tier + store x stored + decode x sequences + context x tokens read``.

    ``tokens`` holds the per-step part as a ``CostModel`` whose ``overhead_ms``
    is the fixed cost of a step: the same arithmetic (``sim.engine.loop.cost_ms``)
    as a request's TTFT today, so one request alone in one step costs exactly
    its TTFT. ``from_request_costs`` takes today's fit as it is: a request
    that is one step long keeps its TTFT. The seed table has no decode and
    no concurrency, so it cannot determine the decode constants: they default
    to 0 (a decode-only step costs the fixed cost).
    """

    tokens: CostModel
    decode_ms_per_seq: float = 0.0
    context_ms_per_token: float = 0.0

    def __post_init__(self) -> None:
        for name in ("decode_ms_per_seq", "context_ms_per_token"):
            value = getattr(self, name)
            if not 0 <= value <= 100:
                raise ValueError(f"{name} must be between 0 and 100 ms, got {value}")

    @classmethod
    def from_request_costs(cls, costs: CostModel) -> StepCosts:
        return cls(costs)

    @classmethod
    def clock(cls, fixed_ms: float = 1.0) -> StepCosts:
        """Every step costs ``fixed_ms`` whatever it holds: a clock a test can reason about."""
        zero = CostModel(
            overhead_ms=fixed_ms, prefill_ms_per_token=0, load_cpu_ms_per_token=0, load_disk_ms_per_token=0,
            store_ms_per_token=0, source="clock",
        )
        return cls(zero)

    def step_ms(
        self, specs: list[OffloadTier], prefill_tokens: int, loaded: list[int], stored_tokens: int, decodes: int,
        context_tokens: int, forward: bool = True,
    ) -> float:
        """The step's duration; without a ``forward`` pass (nothing scheduled, transfers only) no fixed cost."""
        dt = cost_ms(self.tokens, specs, prefill_tokens, loaded, stored_tokens)
        if not forward:
            return dt - self.tokens.overhead_ms
        # Added only when non-zero, so that the prefill part stays bit for bit a request's TTFT.
        if decodes and self.decode_ms_per_seq:
            dt += self.decode_ms_per_seq * decodes
        if context_tokens and self.context_ms_per_token:
            dt += self.context_ms_per_token * context_tokens
        return dt
