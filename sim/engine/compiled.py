"""When to run the compiled loops (``sim.engine.kernels``, numba) instead of the pure-Python reference, and the calls into them.

numba costs about 0.2 s to import and 0.1 s to load the cached machine code
(a few seconds to compile it the very first time), while the Python loops run
about a million block references a second: below ``MIN_COMPILED_REFS`` the
Python code is done before numba would have started. ``KVSCOPE_ENGINE``
overrides the choice: ``python`` never compiles, ``compiled`` always does
(failing if numba is missing), ``auto`` (the default) decides by size.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import fields
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from sim.bounds.budget import checkpoint

if TYPE_CHECKING:
    from sim.engine.loop import TierSpec

MIN_COMPILED_REFS = 400_000
# The stack-distance and replay kernels run in slices of this many references, the deadline checked between them:
# ~30 ms each on a busy 2-core machine (2^21 took 127 ms, measured), so stopped work stops within that of its
# deadline. A slice costs the replay ~2 us more (the sample's 122,000 references in 30 slices, measured).
SLICE_REFS = 1 << 19
# A compiled trace replay costs at most this fraction of the Python engine's block steps (sim.bounds.budget's unit): the
# bundled trace's replays (GPU alone, with a CPU tier) ran 20-65x faster compiled, the Python-side summary included.
COMPILED_REPLAY_FRACTION = 0.1
ENGINE_ENV = "KVSCOPE_ENGINE"
EngineChoice = Literal["python", "compiled", "auto"]
ENGINE_CHOICES: tuple[EngineChoice, ...] = ("python", "compiled", "auto")

# The TierSpec fields the replay kernel knows. A spec with any other field is not what the kernel was written
# for: the Python engine runs it. Of the known ones, kernel_reproduces checks the values.
KNOWN_SPEC_FIELDS = frozenset(
    {
        "units", "gpu_tokens", "cpu_tokens", "disk_tokens", "free_order", "reserve_null_block", "cpu_policy", "disk_policy",
        "gpu_policy", "cpu_backend", "more_tiers",
    }
)


def engine_choice() -> EngineChoice:
    value = os.environ.get(ENGINE_ENV, "auto")
    if value not in ENGINE_CHOICES:
        raise ValueError(f"{ENGINE_ENV} must be one of {', '.join(ENGINE_CHOICES)}, got {value!r}")
    return value  # type: ignore[return-value]


@cache
def available() -> bool:
    """numba imports here (it ships wheels for the usual platforms; elsewhere everything runs in Python)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def worth_it(refs: int) -> bool:
    """Whether work of ``refs`` block references should run compiled."""
    choice = engine_choice()
    if choice == "python":
        return False
    if choice == "compiled":
        if not available():
            raise RuntimeError(f"{ENGINE_ENV}=compiled, but numba cannot be imported")
        return True
    return refs >= MIN_COMPILED_REFS and available()


def kernel_reproduces(spec: TierSpec) -> bool:
    """Whether ``sim.engine.kernels.replay_from`` gives exactly what the Python engine gives for a trace on these tiers.

    The one place to re-point when the tiers change. It reproduces: vLLM's
    pool (free order ``vllm``, policy ``lru``, the null block reserved), alone
    or with one CPU tier under LMCache's rules or the brief's (policy ``lru``,
    chunks a whole number of blocks); no tier behind it. A spec with fields the
    kernel does not know is refused.
    """
    if {f.name for f in fields(spec)} != KNOWN_SPEC_FIELDS:
        return False
    if spec.free_order != "vllm" or spec.gpu_policy != "lru" or not spec.reserve_null_block or spec.disk_tokens:
        return False
    if spec.more_tiers:
        return False
    if spec.cpu_tokens is None:
        return True
    return spec.cpu_backend in ("lmcache", "brief") and spec.cpu_policy == "lru" and spec.units.chunk % spec.units.block == 0


def replays_compiled(spec: TierSpec, refs: int) -> bool:
    """Whether a trace replay on ``spec`` runs compiled: the kernel reproduces those tiers, and ``refs`` (the block
    references of every replay the caller runs in this process, which pay numba's start-up once) are worth it."""
    return kernel_reproduces(spec) and worth_it(refs)


def _np() -> Any:
    import numpy as np

    return np


def stack_histogram(stream: Any) -> tuple[array, int]:
    """``(cumulative hits per capacity 0..distinct, distinct)`` of an int64 block stream (``array('q')`` or list)."""
    np = _np()
    from sim.engine import kernels

    ids = np.frombuffer(stream, dtype=np.int64) if isinstance(stream, (bytes, memoryview)) or hasattr(stream, "typecode") else np.asarray(stream, dtype=np.int64)
    dense, distinct_ids = kernels.dense_ids(ids)
    tree, depth_count, last = kernels.stack_state(dense.size, distinct_ids)
    distinct = 0
    for start in range(0, dense.size, SLICE_REFS):  # a deadline (sim.bounds.budget) is checked between slices
        checkpoint()
        distinct = kernels.stack_depths_from(dense, start, min(start + SLICE_REFS, dense.size), tree, depth_count, last, distinct)
    return array("q", np.cumsum(depth_count[: distinct + 1], dtype=np.int64).tobytes()), distinct


def replay_columns(
    hash_ids: Any, offsets: Any, input_tokens: Any, output_tokens: Any, block: int, num_blocks: int, chunk_blocks: int,
    cpu_capacity_tokens: int, lmcache: bool, explain: bool = False,
) -> tuple[Any, int, tuple[Any, Any] | None]:
    """The replay kernel (``sim.engine.kernels.replay_from``) on a trace's columns (``array('q')``): an int64 array, one
    row per request; the number of distinct ids (which making them dense counts for free); with ``explain``, the
    attribution's rows and ``by`` rows (``sim.engine.explain_kernel``), from the same run, else None. Run over slices of
    whole requests, the deadline checked between them."""
    np = _np()
    from sim.engine import explain_kernel, kernels

    dense, distinct = kernels.dense_ids(np.frombuffer(hash_ids, dtype=np.int64))
    starts = np.frombuffer(offsets, dtype=np.int64)
    inputs, outputs = np.frombuffer(input_tokens, dtype=np.int64), np.frombuffer(output_tokens, dtype=np.int64)
    *pool, c_in, c_nxt, c_prv, c_index, used, blocks, table = kernels.replay_state(
        starts, inputs, outputs, block, num_blocks, distinct, cpu_capacity_tokens
    )
    g_gone, c_gone, explained, by = explain_kernel.attribution_state(starts.size - 1, distinct, c_in.size, explain)
    run = kernels.explained_replay_from if explain else kernels.replay_from
    first, requests = 0, starts.size - 1
    while first < requests:  # a deadline (sim.bounds.budget) is checked between slices of about SLICE_REFS references
        checkpoint()
        stop = max(first + 1, min(requests, int(np.searchsorted(starts, starts[first] + SLICE_REFS, side="right")) - 1))
        by = run(
            dense, starts, inputs, outputs, block, chunk_blocks, cpu_capacity_tokens, lmcache, first, stop, *pool, c_in,
            c_nxt, c_prv, c_index, used, blocks, table, g_gone, c_gone, explained, by,
        )
        first = stop
    return table, distinct, (explained, by[: used[1]].copy()) if explain else None
