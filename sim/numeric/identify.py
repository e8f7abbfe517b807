"""Identifiability of a linear least-squares fit: which constants the measurements determine, and how well.

A fit of ``k`` constants to requests that come in fewer than ``k`` shapes
(distinct rows of features) has infinitely many exact solutions; the solver
returns one, with R^2 = 1, and nothing in it says the constants are
arbitrary. This module looks at the design itself: its rank and condition
number (after scaling each column to unit length, so tokens and a constant 1
compare), the directions in which the constants can move without changing
any prediction (the null space), and each constant's standard error from the
residuals (the usual linear approximation, ignoring the non-negativity
bounds). A constant touched by the null space is not determined: the data
fix only a combination of it and the constants it is confounded with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Eigenvalues below this fraction of the largest count as zero (the scaled design's columns have length 1).
RANK_TOLERANCE = 1e-10
# A null-space vector component this small leaves its constant alone.
COMPONENT_TOLERANCE = 1e-6

# What kind of measurement separates each constant from the others.
WHAT_DETERMINES = {
    "overhead_ms": "requests whose prompts differ in length (another document length), so a fixed cost is told apart from a per-token one",
    "prefill_ms_per_token": "requests that compute different numbers of tokens (prompts of other lengths, or partial prefix hits)",
    "load_cpu_ms_per_token": "requests that load different amounts from the CPU tier (documents of other lengths, or a CPU tier too small for all of them)",
    "store_ms_per_token": "the same prompts without a CPU tier (vLLM alone: a gpu run), which compute without storing",
    "load_disk_ms_per_token": "requests that load different amounts from the disk tier",
}


@dataclass(frozen=True)
class Identifiability:
    """What the design says about each fitted constant."""

    names: tuple[str, ...]
    rank: int
    shapes: int  # distinct request shapes (rows of features)
    condition: float  # of the column-scaled design; inf when rank-deficient
    std_errors: dict[str, float | None]  # None: not determined
    confounded: dict[str, tuple[str, ...]] = field(default_factory=dict)  # undetermined constant -> its partners

    @property
    def undetermined(self) -> tuple[str, ...]:
        return tuple(self.confounded)

    @property
    def full_rank(self) -> bool:
        return self.rank == len(self.names)

    def warnings(self) -> list[str]:
        """One line per undetermined constant: what it is confounded with and what would determine it."""
        out = []
        for name, partners in self.confounded.items():
            with_ = f" with {', '.join(partners)}" if partners else ""
            out.append(
                f"{name} is not determined by these measurements (confounded{with_}: {self.shapes} request shape"
                f"{'s' if self.shapes != 1 else ''} for {len(self.names)} constants, rank {self.rank}); "
                f"its value is one of many that fit equally well. It would be determined by {WHAT_DETERMINES.get(name, 'more varied requests')}."
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "constants": list(self.names),
            "rank": self.rank,
            "request_shapes": self.shapes,
            "condition": None if math.isinf(self.condition) else round(self.condition, 3),
            "std_errors": {k: None if v is None else float(f"{v:.6g}") for k, v in self.std_errors.items()},
            "undetermined": {k: list(v) for k, v in self.confounded.items()},
            "warnings": self.warnings(),
        }


def _jacobi(a: list[list[float]], sweeps: int = 100) -> tuple[list[float], list[list[float]]]:
    """Eigenvalues and eigenvectors (columns of the second result) of a small symmetric matrix."""
    n = len(a)
    m = [row[:] for row in a]
    v = [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]
    for _ in range(sweeps):
        off = sum(m[i][j] ** 2 for i in range(n) for j in range(n) if i != j)
        if off < 1e-30:
            break
        for p in range(n):
            for q in range(p + 1, n):
                if abs(m[p][q]) < 1e-300:
                    continue
                theta = (m[q][q] - m[p][p]) / (2 * m[p][q])
                t = math.copysign(1.0, theta) / (abs(theta) + math.sqrt(theta * theta + 1))
                c = 1 / math.sqrt(t * t + 1)
                s = t * c
                for k in range(n):
                    mkp, mkq = m[k][p], m[k][q]
                    m[k][p], m[k][q] = c * mkp - s * mkq, s * mkp + c * mkq
                for k in range(n):
                    mpk, mqk = m[p][k], m[q][k]
                    m[p][k], m[q][k] = c * mpk - s * mqk, s * mpk + c * mqk
                for k in range(n):
                    vkp, vkq = v[k][p], v[k][q]
                    v[k][p], v[k][q] = c * vkp - s * vkq, s * vkp + c * vkq
    return [m[i][i] for i in range(n)], v


def analyse(
    rows: Sequence[Sequence[float]], targets: Sequence[float], coef: Sequence[float], names: Sequence[str],
    shapes: int | None = None,
) -> Identifiability:
    """The design ``rows`` (one per measurement, weighted as fitted), its ``targets`` and the fitted ``coef``;
    ``shapes`` is the number of distinct unweighted rows (default: of ``rows``)."""
    p = len(names)
    norms = [math.sqrt(sum(r[j] ** 2 for r in rows)) for j in range(p)]
    if any(n == 0 for n in norms):
        raise ValueError("a constant whose column is all zero is not in the data; leave it out before analysing")
    scaled = [[r[j] / norms[j] for j in range(p)] for r in rows]
    gram = [[sum(r[i] * r[j] for r in scaled) for j in range(p)] for i in range(p)]
    values, vectors = _jacobi(gram)
    top = max(values)
    kept = [k for k in range(p) if values[k] > RANK_TOLERANCE * top]
    null = [k for k in range(p) if k not in kept]
    rank = len(kept)
    condition = math.sqrt(top / min(values[k] for k in kept)) if rank == p else math.inf

    confounded: dict[str, tuple[str, ...]] = {}
    for j in range(p):
        if any(abs(vectors[j][k]) > COMPONENT_TOLERANCE for k in null):
            partners = {
                names[i] for k in null if abs(vectors[j][k]) > COMPONENT_TOLERANCE
                for i in range(p) if i != j and abs(vectors[i][k]) > COMPONENT_TOLERANCE
            }
            confounded[names[j]] = tuple(n for n in names if n in partners)

    residuals = [y - sum(c * x for c, x in zip(coef, r)) for r, y in zip(rows, targets)]
    dof = max(1, len(rows) - rank)
    s2 = sum(e * e for e in residuals) / dof
    std_errors: dict[str, float | None] = {}
    for j in range(p):
        if names[j] in confounded:
            std_errors[names[j]] = None
            continue
        var_scaled = s2 * sum(vectors[j][k] ** 2 / values[k] for k in kept)
        std_errors[names[j]] = math.sqrt(var_scaled) / norms[j]
    if shapes is None:
        shapes = len({tuple(round(x, 12) for x in r) for r in rows})
    return Identifiability(tuple(names), rank, shapes, condition, std_errors, confounded)
