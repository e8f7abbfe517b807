"""Sweep thresholds against a brute-force scan of every capacity."""

from __future__ import annotations

import pytest

from sim.analysis.sweep import SAME_ORDER, cpu_thresholds, gpu_threshold, pass2_hits
from sim.workloads.scenario import Scenario

# Small enough to scan every capacity: 6 documents of 90 tokens + 6-token questions.
SMALL = Scenario(docs=6, doc_tokens=90, question_tokens=6, gpu_tokens=512, cpu_gb=None, cpu_tokens=512, block_size=8, chunk_size=32)


@pytest.mark.parametrize("granularity", ["block", "doc"])
def test_gpu_threshold_equals_a_scan(granularity: str) -> None:
    base = SMALL.model_copy(update={"passes": SAME_ORDER, "granularity": granularity, "cpu_tokens": None})
    unit = base.block_size if granularity == "block" else base.doc_tokens
    first_hit = None
    for units in range(base.min_gpu_tokens // unit, 200):
        if pass2_hits(base.model_copy(update={"gpu_tokens": units * unit}), "gpu", "gpu_hit_tokens") > 0:
            first_hit = units * unit
            break
    assert first_hit is not None
    assert gpu_threshold(SMALL, granularity) == first_hit


def test_cpu_thresholds_equal_a_scan() -> None:
    base = SMALL.model_copy(update={"passes": SAME_ORDER})
    hits = {
        c: pass2_hits(base.model_copy(update={"cpu_tokens": c * 32}), "gpu+cpu", "cpu_hit_tokens")
        for c in range(1, 40)
    }
    best = max(hits.values())
    assert best > 0
    any_hit = min(c for c, h in hits.items() if h > 0) * 32
    all_served = min(c for c, h in hits.items() if h == best) * 32
    assert cpu_thresholds(SMALL) == (any_hit, all_served)
    # A prompt of 96 tokens has 3 full 32-token chunks: all six documents need 18 chunks.
    assert all_served == 6 * 3 * 32
