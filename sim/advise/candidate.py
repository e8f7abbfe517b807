"""What the advisor searches and judges: a candidate configuration, its simulated outcome, the target it must meet."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from sim.calibration.measurements import MAX_TTFT_MS
from sim.workloads.scenario import Scenario

TIERS = ("gpu", "cpu", "disk")
MAX_CANDIDATES = 5_000


def field_choices(name: str) -> tuple[str, ...]:
    """The values the scenario accepts for a Literal field (empty when the engine has no such field)."""
    info = Scenario.model_fields.get(name)
    return tuple(get_args(info.annotation)) if info is not None else ()


@dataclass(frozen=True, slots=True)
class Target:
    """What must hold: TTFT p50 and/or p90 in ms (over one pass or all), and/or a floor on the hit ratio."""

    p50_ms: float | None = None
    p90_ms: float | None = None
    pass_: int | None = None
    hit_ratio: float | None = None

    def __post_init__(self) -> None:
        if self.p50_ms is None and self.p90_ms is None and self.hit_ratio is None:
            raise ValueError("target: give p50_ms, p90_ms or hit_ratio")
        for name in ("p50_ms", "p90_ms"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= MAX_TTFT_MS:
                raise ValueError(f"{name} must be above 0 and at most {MAX_TTFT_MS:,}, got {value}")
        if self.hit_ratio is not None and not 0 <= self.hit_ratio <= 1:
            raise ValueError(f"hit_ratio must be from 0 to 1, got {self.hit_ratio}")

    @property
    def figure(self) -> str:
        """The TTFT figure the target bounds, by which the Pareto front is drawn: p90 when a p90 is given (a candidate
        meeting both bounds is then also under its p90 line), else p50; p90 for a hit-ratio-only target."""
        return "p50_ms" if self.p90_ms is None and self.p50_ms is not None else "p90_ms"

    def misses(self, outcome: Outcome) -> list[str]:
        """Why ``outcome`` fails, one phrase per unmet bound (empty: it meets)."""
        out = []
        if self.p50_ms is not None and outcome.p50_ms > self.p50_ms:
            out.append(f"p50 {outcome.p50_ms:,.1f} ms > {self.p50_ms:g} ms")
        if self.p90_ms is not None and outcome.p90_ms > self.p90_ms:
            out.append(f"p90 {outcome.p90_ms:,.1f} ms > {self.p90_ms:g} ms")
        if self.hit_ratio is not None and outcome.hit_ratio < self.hit_ratio:
            out.append(f"hit ratio {outcome.hit_ratio:.3f} < {self.hit_ratio:g}")
        return out

    def shortfall(self, outcome: Outcome) -> float:
        """How far off the target, relative (0 when met): orders the closest misses."""
        gaps = [0.0]
        if self.p50_ms is not None:
            gaps.append(outcome.p50_ms / self.p50_ms - 1)
        if self.p90_ms is not None:
            gaps.append(outcome.p90_ms / self.p90_ms - 1)
        if self.hit_ratio is not None:
            gaps.append(self.hit_ratio - outcome.hit_ratio)
        return max(gaps)


@dataclass(frozen=True, slots=True, order=True)
class Candidate:
    """One configuration: tier sizes in tokens (None: no such tier), the offload policy and backend, the replicas."""

    gpu_tokens: int
    cpu_tokens: int | None = None
    disk_tokens: int | None = None
    cpu_policy: str = "lru"
    cpu_backend: str | None = None
    replicas: int = 1  # a fleet of so many replicas, each with these tiers

    def sizes(self) -> dict[str, int | None]:
        return {"gpu": self.gpu_tokens, "cpu": self.cpu_tokens, "disk": self.disk_tokens}


@dataclass(frozen=True, slots=True)
class Outcome:
    """A candidate's simulated figures."""

    p50_ms: float
    p90_ms: float
    hit_ratio: float
    tier_hit_ratio: dict[str, float]
    router: str | None = None  # a fleet's: the router whose figures these are
