"""What a simulation will cost before it runs (work, memory, answer size), the budget it must fit, and its stop signal.

Every entry point (``simulate``, the capacity curve, the policy what-ifs, an
LRU curve, a trace replay) estimates its ``Cost`` from its inputs alone, before
building anything, and checks it against a ``Budget``: the surface decides
the budget (``app.budgets``: generous for the CLI, strict for the web), this
module says what things cost. The constants are measured upper estimates on a
2-core machine (``bench`` keeps an eye on them), not promises:

- work is counted in block steps: one GPU block looked up or allocated for one
  request of one run (~0.5 us); a request's fixed cost (its record, the chunk
  lookups, the events) is worth ``REQUEST_STEPS`` block steps (~8 us);
- memory is what the call holds at its peak: each request's key list (8 B a
  block) and the distinct keys, one record per request and run, and the
  blocks and chunks every run's tiers hold (a simulation keeps all its runs
  until it returns), at most what the workload asks for (the GPU pool builds
  a block on first use, ``sim.free_queue.FreshBlocks``);
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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.scenario import Scenario

REQUEST_STEPS = 16  # a request's fixed cost in block steps (measured: ~8 us against ~0.5 us a block)
WHAT_IF_STEPS = 3  # a block under the what-if policies (heaps, Belady's look-ahead): ~3x LRU's, measured
KEY_BYTES = 10  # a block key in a request's key list (8 B a slot, its chunk key on top)
DISTINCT_KEY_BYTES = 150  # a distinct block's id (an int object), its slot in its document's key list, and while the
# workload is built its hash (an int object) and their entry in the builder's dict of ids (sim.workload)
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


def _tier_bytes(scenario: Scenario, run: str, distinct_blocks: int) -> int:
    """What a run's tiers can hold at most: their capacity or the workload's distinct blocks, whichever is less."""
    gpu = min(scenario.gpu_tokens // scenario.block_size, distinct_blocks) * BLOCK_BYTES
    chunk_blocks = max(1, scenario.chunk_size // scenario.block_size)
    chunks = 0
    for tier, capacity in (("cpu", scenario.cpu_capacity_tokens), ("disk", scenario.disk_capacity_tokens)):
        if tier in run and capacity:
            chunks += min(capacity // scenario.chunk_size + 1, distinct_blocks // chunk_blocks + 1)
    return gpu + chunks * CHUNK_BYTES


def _distinct_blocks(scenario: Scenario) -> int:
    """At most: each document's blocks once, each request's question blocks (and its whole prompt if passes force
    misses), and never more than all the requests' blocks."""
    block = scenario.block_size
    doc_blocks = -(-(scenario.shared_prefix_tokens + scenario.doc_tokens) // block)
    question = scenario.question_tokens
    per_request = -(-(max(question) if isinstance(question, list) else question) // block) + 1
    if any(p.hit_miss_ratio for p in scenario.passes):
        per_request += doc_blocks  # a forced miss makes its document's text unique
    return min(scenario.total_blocks, scenario.docs * doc_blocks + scenario.total_requests * per_request)


def simulation_cost(scenario: Scenario, runs: tuple[str, ...] | None = None, records: bool = True, explain: bool = True) -> Cost:
    """One ``simulate`` of the scenario (every run, or ``runs``); ``records``: the answer lists every request;
    ``explain``: with each miss's cause (``simulate``'s default)."""
    names = runs if runs is not None else tuple(scenario.run_names)
    requests, blocks = scenario.total_requests, scenario.total_blocks
    distinct = _distinct_blocks(scenario)
    # A run with an offload tier also looks up and stores each prompt's offload units (LMCache's chunks, or
    # vllm-native's offload blocks of blocks_per_chunk GPU blocks: as many as blocks at one block a unit).
    chunks = requests * -(-scenario.prompt_tokens // scenario.offload_unit_tokens)
    work = len(names) * (blocks + requests * REQUEST_STEPS) + sum(chunks for run in names if "cpu" in run)
    workload = blocks * KEY_BYTES + distinct * DISTINCT_KEY_BYTES + requests * REQUEST_BYTES
    held = sum(_tier_bytes(scenario, run, distinct) for run in names)
    memory = workload + held + len(names) * requests * RECORD_BYTES
    answer = len(names) * (requests * RECORD_JSON_BYTES if records else len(scenario.passes) * SUMMARY_JSON_BYTES)
    if explain and records:
        work *= EXPLAIN_STEPS
        memory += len(names) * blocks * EXPLAIN_BLOCK_BYTES
        answer += len(names) * requests * EXPLAIN_JSON_BYTES
    return Cost(work, memory, answer)


def curve_cost(scenario: Scenario, tier: str, points: int) -> Cost:
    """A capacity curve (``sim.capacity``): the GPU's runs ``gpu`` at two granularities x ``points``; the CPU's runs
    ``gpu+cpu`` at ``points`` sizes and ``gpu`` once. A point keeps its pass summaries only."""
    if tier == "gpu":
        return simulation_cost(scenario, runs=("gpu",), records=False).times(2 * points)
    return simulation_cost(scenario, runs=("gpu+cpu",), records=False).times(points + 1)


def policies_cost(scenario: Scenario) -> Cost:
    """``sim.whatif.compare``: ``gpu`` under each GPU policy, ``gpu+cpu`` under each CPU policy if there is a CPU tier."""
    # Imported here: every curve and replay reads this module for its costs and checkpoint, and the policy modules
    # (the GPU pool's free queue, the chunk store's tiers) are a tenth of a small ``kvscope curve``'s start-up.
    from sim.chunk_store import CHUNK_POLICIES
    from sim.policies import GPU_POLICY_NAMES

    cost = simulation_cost(scenario, runs=("gpu",), records=False).times(len(GPU_POLICY_NAMES) * WHAT_IF_STEPS)
    if scenario.cpu_capacity_tokens is not None:
        cost = cost + simulation_cost(scenario, runs=("gpu+cpu",), records=False).times(len(CHUNK_POLICIES) * WHAT_IF_STEPS)
    return cost


def trace_cost(requests: int, references: int, runs: int = 1) -> Cost:
    """A trace replay (``sim.replay``): like a simulation of ``requests`` prompts of ``references`` blocks in all."""
    work = runs * (references + requests * REQUEST_STEPS)
    memory = references * (KEY_BYTES + BLOCK_BYTES) + requests * (REQUEST_BYTES + runs * RECORD_BYTES)
    return Cost(work, memory, runs * requests * RECORD_JSON_BYTES)


def capacity_search_cost(runs: int, references: int, max_runs: int, max_lookups: int) -> Cost:
    """``explain``'s capacity search (``sim.explain.capacity.fill_needs``): per run at most ``max_runs`` re-simulations
    of ``references`` blocks and ``max_lookups`` block lookups in all, each holding what the run held."""
    return Cost(runs * min(max_runs * references, max_lookups), 0, 0)


def block_stream_cost(references: int, points: int) -> Cost:
    """A plain-LRU curve (``sim.curve``) of ``references`` block references: the stream, its stack distances."""
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
