"""A request's lifecycle in the stepped engine: vLLM v1's ``RequestStatus``, reduced to the states kvscope models."""

from __future__ import annotations

import enum


class RequestStatus(enum.IntEnum):
    """Where a request stands; the order matters: anything after PREEMPTED is finished.

    vLLM 0.33.0 ``vllm/v1/request.py`` 370-393 orders its statuses the same
    way and defines ``is_finished`` as ``status > PREEMPTED``. kvscope leaves
    out the states of features it does not model (structured-output grammars,
    remote KV transfers, streaming input) and the finish reasons it cannot
    reach (a request stops at its output length or ``max_model_len``, or is aborted).
    """

    WAITING = enum.auto()  # arrived, in the waiting queue, holds no blocks
    # vLLM's native connector is loading its CPU hit into the GPU blocks it holds (request.py 375; scheduler.py 1514-1546)
    WAITING_FOR_REMOTE_KVS = enum.auto()
    RUNNING = enum.auto()  # admitted: holds blocks, scheduled every step until it finishes or is preempted
    PREEMPTED = enum.auto()  # its blocks freed (still cached), back at the head of the waiting queue
    FINISHED_LENGTH_CAPPED = enum.auto()  # generated its output tokens (or reached max_model_len)
    FINISHED_ABORTED = enum.auto()  # its client went away (a server's engine only: ``SteppedEngine.abort``)

    @property
    def is_finished(self) -> bool:
        return self > RequestStatus.PREEMPTED

    @property
    def is_waiting(self) -> bool:
        """In a waiting queue: new, loading its CPU hit, or preempted and waiting to be prefilled again."""
        return self in (RequestStatus.WAITING, RequestStatus.WAITING_FOR_REMOTE_KVS, RequestStatus.PREEMPTED)
