"""What work costs (block steps, memory, answer size), the budget it must fit, and the stop signal that ends it.

Every entry point (``simulate``, the capacity curve, the policy what-ifs, an
LRU curve, a trace replay) estimates its ``Cost`` from its inputs alone, before
building anything, and checks it against a ``Budget``: the surface decides
the budget (``app.budgets``: generous for the CLI, strict for the web), this
module says what things cost (a scenario's estimates are in
``sim.workloads.estimate``, which reads the scenario). The constants are measured upper estimates on a
2-core machine (``bench`` keeps an eye on them), not promises:

- work is counted in block steps: one GPU block looked up or allocated for one
  request of one run (~0.5 us); a request's fixed cost (its record, the chunk
  lookups, the events) is worth ``REQUEST_STEPS`` block steps (~8 us);
- memory is what the call holds at its peak: each request's key list (8 B a
  block) and the distinct keys, one record per request and run, and the
  blocks and chunks every run's tiers hold (a simulation keeps all its runs
  until it returns), at most what the workload asks for (the GPU pool builds
  a block on first use, ``sim.blocks.free_queue.FreshBlocks``);
- the answer is the JSON of the records the result lists.

A running simulation calls ``checkpoint()`` between requests: whoever started
it (a web worker with a deadline, a server shutting down) can stop it there
with ``Stopped``, so no thread is left computing an answer nobody will read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

REQUEST_STEPS = 16  # a request's fixed cost in block steps (measured: ~8 us against ~0.5 us a block)
WHAT_IF_STEPS = 3  # a block under the what-if policies (heaps, Belady's look-ahead): ~3x LRU's, measured
KEY_BYTES = 10  # a block key in a request's key list (8 B a slot, its chunk key on top)
DISTINCT_KEY_BYTES = 150  # a distinct block's id (an int object), its slot in its document's key list, and while the
# workload is built its hash (an int object) and their entry in the builder's dict of ids (sim.workloads.requests)
REQUEST_BYTES = 600  # a Request object with its lists' headers
RECORD_BYTES = 1_000  # a RequestRecord and its evicted list, per run
BLOCK_BYTES = 450  # a block the GPU pool holds: free queue entry (~180 B), hash map entry, table slots, id objects
CHUNK_BYTES = 400  # a chunk an offload tier holds
RECORD_JSON_BYTES = 600  # one request record in the JSON answer (evicted lists included)
SUMMARY_JSON_BYTES = 400  # one pass summary (a curve point has one per pass)
EXPLAIN_STEPS = 2  # explaining a run's misses (sim.explain) makes it 1.5-1.8x slower, measured
EXPLAIN_BLOCK_BYTES = 32  # and holds ~22 B a block, measured
EXPLAIN_JSON_BYTES = 400  # and adds its causes to each request record of the answer (50-350 B measured)


@dataclass(frozen=True, slots=True)
class Cost:
    """The estimate of one call: block steps, peak bytes held, bytes of the answer."""

    work_steps: int
    memory_bytes: int
    response_bytes: int

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.work_steps + other.work_steps,
            max(self.memory_bytes, other.memory_bytes),  # one after the other: the peak is the larger
            self.response_bytes + other.response_bytes,
        )

    def times(self, n: int) -> Cost:
        """``n`` such simulations one after another, keeping only their summaries."""
        return Cost(self.work_steps * n, self.memory_bytes, self.response_bytes * n)


class OverBudget(ValueError):
    """The estimate exceeds the budget; ``field`` is the input to change, the message names estimate and limit."""

    def __init__(self, message: str, field: str = "docs") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Budget:
    """The most one call may cost on a surface; ``seconds`` bounds its time where the surface can stop it."""

    work_steps: int
    memory_bytes: int
    response_bytes: int
    seconds: float | None = None

    def check(self, cost: Cost, field: str = "docs", fix: str = "fewer documents, passes or tokens") -> None:
        """Raises ``OverBudget`` naming the first limit the estimate exceeds."""
        for what, estimate, limit, unit in (
            ("work", cost.work_steps, self.work_steps, " block steps"),
            ("memory", cost.memory_bytes, self.memory_bytes, " bytes"),
            ("answer size", cost.response_bytes, self.response_bytes, " bytes"),
        ):
            if estimate > limit:
                raise OverBudget(f"estimated {what} is {estimate:,}{unit}; the limit here is {limit:,}{unit}: {fix}", field)


def trace_cost(requests: int, references: int, runs: int = 1) -> Cost:
    """A trace replay (``sim.simulation.replay``): like a simulation of ``requests`` prompts of ``references`` blocks in all."""
    work = runs * (references + requests * REQUEST_STEPS)
    memory = references * (KEY_BYTES + BLOCK_BYTES) + requests * (REQUEST_BYTES + runs * RECORD_BYTES)
    return Cost(work, memory, runs * requests * RECORD_JSON_BYTES)


def capacity_search_cost(runs: int, references: int, max_runs: int, max_lookups: int) -> Cost:
    """``explain``'s capacity search (``sim.explain.capacity.fill_needs``): per run at most ``max_runs`` re-simulations
    of ``references`` blocks and ``max_lookups`` block lookups in all, each holding what the run held."""
    return Cost(runs * min(max_runs * references, max_lookups), 0, 0)


def block_stream_cost(references: int, points: int) -> Cost:
    """A plain-LRU curve (``sim.analysis.curve``) of ``references`` block references: the stream, its stack distances."""
    return Cost(references * 2, references * (KEY_BYTES + BLOCK_BYTES), points * 100)


# -- stopping work that runs ---------------------------------------------------


class Stopped(Exception):
    """The work was stopped at a checkpoint: its deadline passed, or whoever started it gave up."""


@dataclass(slots=True, eq=False)  # identity: each call has its own
class StopSignal:
    """Set by whoever runs the work; read by ``checkpoint()`` in the work's own thread."""

    deadline: float | None = None  # time.monotonic() after which the work stops
    reason: str | None = None  # set to stop now

    def stop(self, reason: str) -> None:
        self.reason = reason

    def check(self) -> None:
        if self.reason is not None:
            raise Stopped(self.reason)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise Stopped("the deadline passed")


_signal: ContextVar[StopSignal | None] = ContextVar("kvscope_stop_signal", default=None)


def checkpoint() -> None:
    """Raise ``Stopped`` if the work running in this context was asked to stop (nothing to do without a signal)."""
    signal = _signal.get()
    if signal is not None:
        signal.check()


@contextmanager
def stoppable(signal: StopSignal) -> Iterator[StopSignal]:
    """Run the body with ``signal`` as what ``checkpoint()`` reads."""
    token = _signal.set(signal)
    try:
        yield signal
    finally:
        _signal.reset(token)
