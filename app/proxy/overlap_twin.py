"""The watch's twin of the server's KV state under concurrent traffic: vLLM's scheduler holding each request's blocks
from its arrival to its end, in the order the proxy saw them happen.

The proxy learns a request's token ids only after its answer has ended, so
the requests are told here out of order: each with its arrival and end
(``time.perf_counter()``). What happened before the earliest arrival of a
request not told yet cannot change any more, so the twin plays every told
arrival and end up to there, in time order, through the stepped engine
(``sim.sched.stepped``): an arrival is admitted in a step of its own (a
budget and sequence limit it never meets, so its whole prompt is prefilled
then, as the emulator does a prompt that fits its budget), holds its blocks
while later requests allocate theirs (so theirs evict around them), and its
end lets them go, tail first (``SteppedEngine.abort``). A request waiting for
blocks is admitted at the next arrival or end. Decoding is not played as the
server's: a running request decodes one token in each step the twin plays (an
arrival's, an end's), not one per token it generated.
"""

from __future__ import annotations

import heapq
import math

from sim.blocks.prompt_keys import request_for_tokens
from sim.costs.model import CostModel
from sim.engine.loop import Engine, TierSpec
from sim.sched.config import SchedulerConfig
from sim.sched.flight import Flight
from sim.sched.serving import MAX_BATCHED_TOKENS, MAX_NUM_SEQS
from sim.sched.stepped import SteppedEngine

OVERLAP_TWIN = "twin under overlap"
_END, _ARRIVAL = 0, 1  # at the same instant an end goes first: its blocks are free for the arrival


class OverlapTwin:
    """The stepped twin; ``tell`` it each request once its tokens are known, with ``pending`` the arrivals of
    the requests begun and not told yet."""

    def __init__(self, spec: TierSpec, costs: CostModel) -> None:
        self.engine = Engine(OVERLAP_TWIN, spec, costs)
        self.stepped = SteppedEngine(self.engine, SchedulerConfig(MAX_BATCHED_TOKENS, MAX_NUM_SEQS))
        self._timeline: list[tuple[float, int, int, list[int] | None]] = []  # (time, end or arrival, seq, tokens)
        self._flights: dict[int, Flight] = {}
        self._epoch: float | None = None

    def tell(self, seq: int, tokens: list[int] | None, arrived: float, ended: float, pending: list[float]) -> None:
        """Request ``seq`` arrived and ended then (no tokens: not a prompt the twin serves); then play what can no
        longer change."""
        if self._epoch is None:
            self._epoch = arrived
        if tokens:
            heapq.heappush(self._timeline, (arrived, _ARRIVAL, seq, tokens))
            heapq.heappush(self._timeline, (max(ended, arrived), _END, seq, None))
        frontier = min(pending, default=math.inf)
        while self._timeline and self._timeline[0][0] < frontier:
            at, kind, seq_, toks = heapq.heappop(self._timeline)
            if kind == _ARRIVAL:
                assert toks is not None
                self._arrive(seq_, toks, at)
            else:
                self._end(seq_)

    def _ms(self, at: float) -> float:
        assert self._epoch is not None
        return (at - self._epoch) * 1000

    def _arrive(self, seq: int, tokens: list[int], at: float) -> None:
        stepped, units = self.stepped, self.engine.units
        capacity = stepped.gpu.capacity_blocks * units.block
        if len(tokens) >= capacity:
            return  # it could never run (the server refused it, or ran it on a larger cache than the twin knows)
        # Generating until its end: as many tokens as leave its blocks within the pool (never all sampled here).
        output = capacity - len(tokens)
        request = request_for_tokens(tokens, units, seq=seq)
        request.output_tokens, request.alloc_blocks = output, stepped.gpu.capacity_blocks
        stepped.now_ms = max(stepped.now_ms, self._ms(at))
        self._flights[seq] = stepped.arrive(request, stepped.now_ms)
        stepped.step()

    def _end(self, seq: int) -> None:
        flight = self._flights.pop(seq, None)
        if flight is None:
            return
        stepped = self.stepped
        stepped.abort(flight)
        if stepped.waiting:  # blocks came free: a waiting request is admitted (its step)
            stepped.step()
