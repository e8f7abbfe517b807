"""Trace reader: Mooncake JSONL request traces, checked line by line and against size limits before any replay.

A Mooncake trace has one JSON object per request: ``timestamp`` (ms),
``input_length`` and ``output_length`` (tokens) and ``hash_ids``, one id per
``block_tokens``-token block of the prompt (512 in Mooncake's traces), the
last block possibly partial. Equal ids mean equal prefixes up to and including
that block, so the ids are already prefix-chained keys. The reader only reads:
turning a trace into requests for the tiers is ``sim.replay``'s job, and the
flattened block stream for a hit-ratio curve is ``Trace.block_stream``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from sim import jsontext, textfile

MOONCAKE_BLOCK_TOKENS = 512
MAX_HASH_ID = 2**63 - 1

# Bundled traces, by the name the CLI, API and page use; files live in sim/data/traces/.
BUNDLED_TRACES: dict[str, str] = {"mooncake-synthetic": "mooncake_synthetic_trace.jsonl"}
DEFAULT_TRACE = "mooncake-synthetic"


@dataclass(frozen=True, slots=True)
class TraceLimits:
    """The most a trace may hold; a trace over any of them is refused before it is replayed."""

    max_bytes: int = textfile.MAX_FILE_BYTES
    max_requests: int = 1_000_000
    max_blocks: int = 20_000_000  # hash_ids over all requests, as ``Scenario``'s total-work bound
    max_input_tokens: int = 10_000_000  # one prompt


class TraceError(ValueError):
    """A trace that cannot be read; ``line`` (1-based) names the offending line when there is one."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.line = line


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace, as read: ``hash_ids`` has one id per block, the last maybe partial."""

    line: int
    timestamp_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: list[int]


@dataclass(frozen=True, slots=True)
class Trace:
    """A whole trace, in file order (which is the order it is replayed in)."""

    name: str
    block_tokens: int
    requests: list[TraceRequest]
    sha256: str

    @property
    def total_blocks(self) -> int:
        return sum(len(r.hash_ids) for r in self.requests)

    def block_stream(self) -> list[int]:
        """Every block reference in order, each request's ``hash_ids`` as listed (partial tail blocks too).

        This is the flattened trace a plain cache simulator (libCacheSim) is
        fed: one object per block, all of equal size.
        """
        stream: list[int] = []
        extend = stream.extend
        for r in self.requests:
            extend(r.hash_ids)
        return stream

    def summary(self) -> dict[str, object]:
        stream = self.block_stream()
        return {
            "name": self.name,
            "sha256": self.sha256,
            "block_tokens": self.block_tokens,
            "requests": len(self.requests),
            "block_references": len(stream),
            "distinct_blocks": len(set(stream)),
            "input_tokens": sum(r.input_tokens for r in self.requests),
            "duration_ms": self.requests[-1].timestamp_ms - self.requests[0].timestamp_ms if self.requests else 0,
        }


def bundled_trace_path(name: str) -> Path:
    """The installed file of a bundled trace; ``TraceError`` naming the known ones otherwise."""
    filename = BUNDLED_TRACES.get(name)
    if filename is None:
        raise TraceError(f"unknown bundled trace {name!r}; known: {', '.join(BUNDLED_TRACES)}")
    return Path(str(resources.files("sim") / "data" / "traces" / filename))


def open_trace(
    source: str, block_tokens: int = MOONCAKE_BLOCK_TOKENS, limits: TraceLimits = TraceLimits()
) -> Trace:
    """A trace file's path, or a bundled trace's name (``mooncake-synthetic``) when no such file exists."""
    if not Path(source).exists() and source in BUNDLED_TRACES:
        return read_trace(bundled_trace_path(source), block_tokens, limits, name=source)
    if not Path(source).exists():
        raise TraceError(f"no trace file {source!r}, and no bundled trace of that name (bundled: {', '.join(BUNDLED_TRACES)})")
    return read_trace(source, block_tokens, limits)


def read_trace(
    path: str | os.PathLike[str],
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    limits: TraceLimits = TraceLimits(),
    name: str | None = None,
) -> Trace:
    """Read a trace file; bytes are counted against ``limits.max_bytes`` while reading, before a line is parsed."""
    path = Path(path)
    try:
        data = textfile.read_bytes(path, limits.max_bytes)
    except textfile.FileProblem as exc:
        raise TraceError(str(exc)) from None
    return parse_trace(data, block_tokens, limits, name or path.name)


def parse_trace(
    data: bytes,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    limits: TraceLimits = TraceLimits(),
    name: str = "upload",
) -> Trace:
    """Parse a whole trace held in memory (an upload); the first bad line raises ``TraceError``."""
    if block_tokens < 1:
        raise TraceError(f"block size must be at least 1 token, got {block_tokens}")
    _check_bytes(len(data), limits)
    try:
        text = textfile.text_bytes(data)  # no BOM; UTF-16 and binary files refused whole
    except textfile.FileProblem as exc:
        raise TraceError(str(exc)) from None
    requests = list(_parse_lines(text.splitlines(), block_tokens, limits))
    if not requests:
        raise TraceError("the trace holds no requests")
    return Trace(name, block_tokens, requests, hashlib.sha256(data).hexdigest())


def _check_bytes(size: int, limits: TraceLimits) -> None:
    if size > limits.max_bytes:
        raise TraceError(f"the trace is {size:,} bytes; the limit is {limits.max_bytes:,}")


def _parse_lines(lines: Iterable[bytes], block_tokens: int, limits: TraceLimits) -> Iterable[TraceRequest]:
    count = blocks = 0
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        request = _parse_line(raw, number, block_tokens, limits)
        count += 1
        blocks += len(request.hash_ids)
        if count > limits.max_requests:
            raise TraceError(f"the trace has more than {limits.max_requests:,} requests (the limit)", number)
        if blocks > limits.max_blocks:
            raise TraceError(f"the trace has more than {limits.max_blocks:,} blocks in all (the limit)", number)
        yield request


def _parse_line(raw: bytes, number: int, block_tokens: int, limits: TraceLimits) -> TraceRequest:
    try:
        obj = jsontext.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError is one
        raise TraceError(str(exc) if not isinstance(exc, UnicodeDecodeError) else f"not UTF-8 ({exc})", number) from None
    if not isinstance(obj, dict):
        raise TraceError(f"expected a JSON object, got {type(obj).__name__}", number)
    missing = [k for k in ("timestamp", "input_length", "output_length", "hash_ids") if k not in obj]
    if missing:
        raise TraceError(f"missing {', '.join(missing)}", number)
    timestamp = obj["timestamp"]
    if type(timestamp) not in (int, float) or not 0 <= timestamp < float("inf"):
        raise TraceError(f"timestamp must be a number of ms >= 0, got {timestamp!r}", number)
    input_tokens = _count(obj, "input_length", number, 1, limits.max_input_tokens)
    output_tokens = _count(obj, "output_length", number, 0, limits.max_input_tokens)
    hash_ids = obj["hash_ids"]
    if not isinstance(hash_ids, list) or not all(type(h) is int and 0 <= h <= MAX_HASH_ID for h in hash_ids):
        raise TraceError(f"hash_ids must be a list of integers from 0 to {MAX_HASH_ID}", number)
    expected = -(-input_tokens // block_tokens)
    if len(hash_ids) != expected:
        raise TraceError(
            f"hash_ids has {len(hash_ids)} ids, but input_length {input_tokens} at {block_tokens} tokens per block "
            f"needs {expected} (is the block size right?)",
            number,
        )
    return TraceRequest(number, timestamp, input_tokens, output_tokens, hash_ids)


def _count(obj: dict[str, object], key: str, number: int, low: int, high: int) -> int:
    value = obj[key]
    if type(value) is not int or not low <= value <= high:
        raise TraceError(f"{key} must be an integer from {low} to {high:,}, got {value!r}", number)
    return value
