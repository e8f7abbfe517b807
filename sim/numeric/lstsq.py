"""Non-negative least squares (Lawson-Hanson) for the handful of unknowns a cost model has."""

from __future__ import annotations

from collections.abc import Sequence

Matrix = Sequence[Sequence[float]]


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve the square system ``a x = b`` by Gaussian elimination with partial pivoting."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            raise ValueError("singular system: the data cannot tell these coefficients apart")
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


def _lstsq(a: Matrix, b: Sequence[float], cols: list[int]) -> list[float]:
    """Unconstrained least squares on the chosen columns (normal equations)."""
    ata = [[sum(row[i] * row[j] for row in a) for j in cols] for i in cols]
    atb = [sum(row[i] * y for row, y in zip(a, b)) for i in cols]
    return _solve(ata, atb)


def nnls(a: Matrix, b: Sequence[float], max_iter: int = 100) -> list[float]:
    """Minimise ``|a x - b|`` subject to ``x >= 0``."""
    n = len(a[0])
    x = [0.0] * n
    passive: list[int] = []
    for _ in range(max_iter):
        resid = [y - sum(row[j] * x[j] for j in range(n)) for row, y in zip(a, b)]
        grad = [sum(row[j] * r for row, r in zip(a, resid)) for j in range(n)]
        candidates = [j for j in range(n) if j not in passive and grad[j] > 1e-12]
        if not candidates:
            break
        passive.append(max(candidates, key=lambda j: grad[j]))
        while True:
            z = dict(zip(passive, _lstsq(a, b, passive)))
            if all(v > 0 for v in z.values()):
                for j in range(n):
                    x[j] = z.get(j, 0.0)
                break
            alpha = min(x[j] / (x[j] - z[j]) for j in passive if z[j] <= 0)
            for j in range(n):
                x[j] += alpha * (z.get(j, 0.0) - x[j])
            passive = [j for j in passive if x[j] > 1e-12]
    return x
