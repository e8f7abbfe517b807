"""Reading vLLM's ``/metrics``: the Prometheus text format, and the cache counters under their current and older names.

vLLM v1 counts prefix-cache work in tokens: ``prefix_cache_queries`` grows by
a request's prompt tokens and ``prefix_cache_hits`` by the tokens found on the
GPU; with a KV connector (LMCache), ``external_prefix_cache_queries`` grows by
the tokens the GPU did not have and ``external_prefix_cache_hits`` by those
the connector supplied. vLLM 0.9-0.10 called the GPU pair
``gpu_prefix_cache_queries`` / ``_hits``. A metric is summed over its series
(one per engine).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")

# Counter names, newest first; each is tried with and without the ``_total`` suffix.
GPU_QUERIES = ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries")
GPU_HITS = ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits")
EXTERNAL_QUERIES = ("vllm:external_prefix_cache_queries",)
EXTERNAL_HITS = ("vllm:external_prefix_cache_hits",)
CACHE_CONFIG = "vllm:cache_config_info"


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def _unescape(match: re.Match[str]) -> str:
    return "\n" if match.group(1) == "n" else match.group(1)


def parse(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition; comments and malformed lines are skipped."""
    samples: list[Sample] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            continue
        name, labels, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        pairs = {k: _ESCAPE.sub(_unescape, v) for k, v in _LABEL.findall(labels or "")}
        samples.append(Sample(name, pairs, value))
    return samples


def total(samples: list[Sample], names: tuple[str, ...]) -> float | None:
    """The sum over series of the first of ``names`` present (``_total`` or not); None if none is."""
    for base in names:
        for name in (base + "_total", base):
            values = [s.value for s in samples if s.name == name]
            if values:
                return sum(v for v in values if math.isfinite(v))
    return None


def info_labels(samples: list[Sample], name: str = CACHE_CONFIG) -> dict[str, str] | None:
    """The labels of an info metric (a gauge set to 1), from its first series."""
    return next((s.labels for s in samples if s.name == name), None)


@dataclass(frozen=True, slots=True)
class Offload:
    """KV offloading as ``vllm:cache_config_info`` reports it (vLLM's ``CacheConfig.metrics_info``: every field).

    vllm/config/cache.py: ``kv_offloading_size`` (GiB; None: no offloading) and
    ``kv_offloading_backend`` (``native`` or ``lmcache``); vllm/config/vllm.py
    ``_post_init_kv_transfer_config`` turns them into the KV connector. A
    connector given directly with ``--kv-transfer-config`` is not among these
    labels, so "no size" means "not configured through the cache config", not
    "no CPU tier": ``configured`` is None when the labels do not say.
    """

    backend: str | None
    size_gb: float | None

    @property
    def configured(self) -> bool | None:
        return True if self.size_gb is not None else None

    @classmethod
    def read(cls, labels: dict[str, str] | None) -> Offload:
        if not labels:
            return cls(None, None)
        size = labels.get("kv_offloading_size")
        try:
            size_gb = float(size) if size not in (None, "", "None") else None
        except ValueError:
            size_gb = None
        if size_gb is not None and not (math.isfinite(size_gb) and size_gb > 0):
            size_gb = None
        return cls(labels.get("kv_offloading_backend") if size_gb is not None else None, size_gb)

    def describe(self) -> str | None:
        """E.g. ``lmcache, 1.5 GiB``; None when the labels say nothing."""
        if self.size_gb is None:
            return None
        return f"{self.backend or 'native'}, {self.size_gb:g} GiB"


@dataclass(frozen=True, slots=True)
class CacheCounters:
    """One reading of the cache counters, in tokens; None for a counter the server does not expose."""

    gpu_queries: float | None
    gpu_hits: float | None
    external_queries: float | None
    external_hits: float | None

    @classmethod
    def read(cls, samples: list[Sample]) -> CacheCounters:
        return cls(
            total(samples, GPU_QUERIES), total(samples, GPU_HITS),
            total(samples, EXTERNAL_QUERIES), total(samples, EXTERNAL_HITS),
        )

    def delta(self, before: CacheCounters) -> CacheCounters:
        def minus(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a - b

        return CacheCounters(
            minus(self.gpu_queries, before.gpu_queries), minus(self.gpu_hits, before.gpu_hits),
            minus(self.external_queries, before.external_queries), minus(self.external_hits, before.external_hits),
        )
