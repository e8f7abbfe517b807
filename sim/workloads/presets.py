"""Named starting points for a scenario; flags and API fields override any of their fields."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # The measured experiment: ten 5,011-token documents, a 21,520-token GPU
    # cache (Qwen2.5-1.5B), a 1.5 GB CPU tier; forward, forward again, reverse.
    "seed-lab": {
        "docs": 10,
        "doc_tokens": 5011,
        "question_tokens": 13,
        "gpu_tokens": 21_520,
        "cpu_gb": 1.5,
        "block_size": 16,
        "chunk_size": 256,
        "passes": "forward,forward,reverse",
        "granularity": "block",
        "model": "qwen2.5-1.5b",
    },
    # The lab's first exercise: whole documents move in and out of the cache.
    "seed-lab-doc": {
        "docs": 10,
        "doc_tokens": 5011,
        "question_tokens": 13,
        "gpu_tokens": 21_520,
        "cpu_gb": 1.5,
        "passes": "forward,forward,reverse",
        "granularity": "doc",
        "model": "qwen2.5-1.5b",
    },
    # The seed, with a CPU tier too small for the ten documents (about 0.9 GiB).
    "cpu-too-small": {
        "docs": 10,
        "doc_tokens": 5011,
        "question_tokens": 13,
        "gpu_tokens": 21_520,
        "cpu_gb": 0.9,
        "passes": "forward,forward,reverse",
        "model": "qwen2.5-1.5b",
    },
    # Random re-reads with a small disk tier behind the CPU tier.
    "three-tiers": {
        "docs": 20,
        "doc_tokens": 5011,
        "question_tokens": 13,
        "gpu_tokens": 21_520,
        "cpu_gb": 1.0,
        "disk_gb": 4.0,
        "passes": "forward,random@1,random@2",
        "model": "qwen2.5-1.5b",
    },
}

DESCRIPTIONS: dict[str, str] = {
    "seed-lab": "The measured lab: 10 docs x 5,011 tokens, GPU 21,520 tokens, CPU 1.5 GB.",
    "seed-lab-doc": "The same, moving whole documents (the lab's first exercise).",
    "cpu-too-small": "The lab with a 0.9 GB CPU tier: smaller than the documents' KV.",
    "three-tiers": "20 docs read forward then randomly, GPU + 1 GB CPU + 4 GB disk.",
}


class UnknownPreset(ValueError):
    pass


def preset_fields(name: str) -> dict[str, Any]:
    try:
        return dict(PRESETS[name])
    except KeyError:
        raise UnknownPreset(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None
