"""Trace reader: Mooncake and Qwen-Bailian JSONL request traces, read line by line into compact arrays.

A Mooncake trace has one JSON object per request: ``timestamp`` (ms),
``input_length`` and ``output_length`` (tokens) and ``hash_ids``, one id per
``block_tokens``-token block of the prompt (512 in Mooncake's traces), the
last block possibly partial. Equal ids mean equal prefixes up to and including
that block, so the ids are already prefix-chained keys.

A Qwen-Bailian trace (alibaba-edu/qwen-bailian-usagetraces-anon, README.md,
"Data Specification of the Traces") has the same four fields, but
``timestamp`` in seconds and ``hash_ids`` of 16-token blocks, plus
``chat_id``, ``parent_chat_id`` (-1 for a root request), ``type`` (text,
search, image, file) and ``turn``. Its ids are salted SipHash-2-4 of each
block's own 16 tokens, mapped to sequential integers (the README's
"Anonymization Process"): not chained, so the same block content under two
different prefixes has one id. A prefix cache only ever reuses a whole prefix,
so the reader chains them: a block's key is a fresh integer per distinct
(previous block's key, id) pair, and equal keys mean equal prefixes, as in
Mooncake's ids.

The reader only reads: a file is read one line at a time (a line longer than
``max_line_bytes`` is refused by its number without being held), or, when
every line is a Mooncake request in its usual form, a MiB of lines at a
time with one pattern search and one JSON decode each; every line is
checked against the limits, and the requests are kept as columns of machine
integers (``array``), not Python objects, so that ten million block ids take
80 MB rather than half a GB. Turning a trace into requests for the tiers is
``sim.simulation.replay``'s job; the flattened block stream for a hit-ratio curve is
``Trace.block_stream``. A ``kvscope watch --record`` file is a Mooncake
trace too: its lines that only carry a KV event are skipped.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import os
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import BinaryIO, Literal, overload

from sim.bounds import jsontext, textfile
from sim.traces import line as trace_line

MOONCAKE_BLOCK_TOKENS = 512
BAILIAN_BLOCK_TOKENS = 16
MAX_HASH_ID = 2**63 - 1
_INF = float("inf")

TraceFormat = Literal["mooncake", "bailian"]
TRACE_FORMATS: tuple[TraceFormat, ...] = ("mooncake", "bailian")
# Tokens per hash id in each format's published traces: the block size a replay uses unless told otherwise.
FORMAT_BLOCK_TOKENS: dict[TraceFormat, int] = {"mooncake": MOONCAKE_BLOCK_TOKENS, "bailian": BAILIAN_BLOCK_TOKENS}
# The fields only a Bailian line has; a file whose first request has all of them is Bailian, none of them Mooncake.
BAILIAN_ONLY_FIELDS = ("chat_id", "parent_chat_id", "turn", "type")
BAILIAN_TYPES = ("text", "search", "image", "file")

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
    max_line_bytes: int = 32 * 2**20  # one line, read at most this far before it is refused


class TraceError(ValueError):
    """A trace that cannot be read; ``line`` (1-based) names the offending line when there is one."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.line = line


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace, as read: ``hash_ids`` has one id per block, the last maybe partial.

    For a Bailian trace the ids are the chained keys (see the module's docstring).
    """

    line: int
    timestamp_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: list[int]


class TraceRequests(Sequence[TraceRequest]):
    """A trace's requests as objects, made on access from its columns (for code that wants one at a time)."""

    __slots__ = ("_trace",)

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def __len__(self) -> int:
        return len(self._trace.input_tokens)

    @overload
    def __getitem__(self, i: int) -> TraceRequest: ...
    @overload
    def __getitem__(self, i: slice) -> list[TraceRequest]: ...
    def __getitem__(self, i: int | slice) -> TraceRequest | list[TraceRequest]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        t = self._trace
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        ids = t.hash_ids[t.offsets[i] : t.offsets[i + 1]].tolist()
        return TraceRequest(t.lines[i], t.timestamps_ms[i], t.input_tokens[i], t.output_tokens[i], ids)

    def __iter__(self) -> Iterator[TraceRequest]:
        return (self[i] for i in range(len(self)))


@dataclass(frozen=True, slots=True, eq=False)
class Trace:
    """A whole trace as columns, in file order (which is the order it is replayed in).

    Request ``i`` has ids ``hash_ids[offsets[i]:offsets[i + 1]]``; ``offsets``
    has one more entry than there are requests.
    """

    name: str
    block_tokens: int
    sha256: str
    lines: array  # 'q': the request's line number in the file
    timestamps_ms: array  # 'd'
    input_tokens: array  # 'q'
    output_tokens: array  # 'q'
    offsets: array  # 'q'
    hash_ids: array  # 'q'
    format: TraceFormat = "mooncake"
    _summary: dict[str, object] = field(default_factory=dict, repr=False)  # computed once, on first ask
    _distinct: list[int] = field(default_factory=list, repr=False)  # the distinct ids, once someone has counted them

    @property
    def requests(self) -> TraceRequests:
        return TraceRequests(self)

    def __len__(self) -> int:
        return len(self.input_tokens)

    @property
    def total_blocks(self) -> int:
        return len(self.hash_ids)

    def counted_distinct(self, distinct: int) -> None:
        """Record how many distinct ids the trace has, counted by whoever made its ids dense (a replay)."""
        self._distinct[:] = [distinct]

    def block_counts(self) -> Iterator[int]:
        """``len(hash_ids)`` of each request, in order."""
        offsets = self.offsets
        return (offsets[i + 1] - offsets[i] for i in range(len(self)))

    def block_stream(self) -> array:
        """Every block reference in order, each request's ``hash_ids`` as listed (partial tail blocks too).

        This is the flattened trace a plain cache simulator (libCacheSim) is
        fed: one object per block, all of equal size. The array itself, not a copy.
        """
        return self.hash_ids

    def summary(self) -> dict[str, object]:
        """Name, size and reuse of the trace (the distinct count costs a pass over the ids: done once)."""
        if not self._summary:
            self._summary.update(self._summarise())
        return dict(self._summary)

    def _summarise(self) -> dict[str, object]:
        stamps = self.timestamps_ms
        return {
            "name": self.name,
            "format": self.format,
            "sha256": self.sha256,
            "block_tokens": self.block_tokens,
            "requests": len(self),
            "block_references": len(self.hash_ids),
            "distinct_blocks": self._distinct[0] if self._distinct else distinct_count(self.hash_ids),
            "input_tokens": sum(self.input_tokens),
            "duration_ms": stamps[-1] - stamps[0] if len(stamps) else 0,
        }


def distinct_count(ids: array) -> int:
    """How many distinct ids; by sorting a copy (numpy, when a trace is large) rather than a set of Python ints."""
    if len(ids) < 200_000:
        return len(set(ids))
    import numpy as np

    ordered = np.sort(np.frombuffer(ids, dtype=np.int64))
    return int(np.count_nonzero(ordered[1:] != ordered[:-1])) + 1 if len(ordered) else 0


def bundled_trace_path(name: str) -> Path:
    """The installed file of a bundled trace; ``TraceError`` naming the known ones otherwise."""
    filename = BUNDLED_TRACES.get(name)
    if filename is None:
        raise TraceError(f"unknown bundled trace {name!r}; known: {', '.join(BUNDLED_TRACES)}")
    # The package's own folder (the wheel installs it as files), not importlib.resources, whose import pulls in
    # tempfile, shutil and lzma: a fifth of a small curve's start-up.
    return Path(__file__).resolve().parents[1] / "data" / "traces" / filename


def open_trace(
    source: str,
    block_tokens: int | None = None,
    limits: TraceLimits = TraceLimits(),
    fmt: TraceFormat | None = None,
) -> Trace:
    """A trace file's path, or a bundled trace's name (``mooncake-synthetic``) when no such file exists."""
    if not Path(source).exists() and source in BUNDLED_TRACES:
        return read_trace(bundled_trace_path(source), block_tokens, limits, name=source, fmt=fmt)
    if not Path(source).exists():
        raise TraceError(f"no trace file {source!r}, and no bundled trace of that name (bundled: {', '.join(BUNDLED_TRACES)})")
    return read_trace(source, block_tokens, limits, fmt=fmt)


def read_trace(
    path: str | os.PathLike[str],
    block_tokens: int | None = None,
    limits: TraceLimits = TraceLimits(),
    name: str | None = None,
    fmt: TraceFormat | None = None,
) -> Trace:
    """Read a trace file; a file that says it is over ``limits.max_bytes`` is refused before a line is read.

    ``fmt`` None detects the format from the first request; ``block_tokens``
    None takes the format's own block size.
    """
    path = Path(path)
    try:
        with textfile.open_binary(path, limits.max_bytes) as f:
            return _read(f, block_tokens, limits, name or path.name, fmt, sized=path.is_file())
    except textfile.FileProblem as exc:
        raise TraceError(str(exc)) from None
    except OSError as exc:
        raise TraceError(exc.strerror or str(exc)) from None


def parse_trace(
    data: bytes,
    block_tokens: int | None = None,
    limits: TraceLimits = TraceLimits(),
    name: str = "upload",
    fmt: TraceFormat | None = None,
) -> Trace:
    """Parse a whole trace held in memory (an upload); the first bad line raises ``TraceError``."""
    if len(data) > limits.max_bytes:
        raise TraceError(str(textfile.too_large(limits.max_bytes)))
    return _read(io.BytesIO(data), block_tokens, limits, name, fmt, sized=True)


def _lines(f: BinaryIO, limits: TraceLimits, digest: hashlib._Hash, sized: bool) -> Iterator[tuple[int, bytes]]:
    """Numbered non-blank lines, each read at most ``max_line_bytes`` (+1) far, so memory stays bounded.

    Bytes are counted against ``max_bytes`` as they are read (a pipe or
    /dev/zero does not say its size). A line over the line limit in a file of
    known size is refused at once; in a stream, the rest of it is read (and
    dropped) to tell an over-long line from an over-long stream.
    """
    cap, total = limits.max_line_bytes, 0
    for number in range(1, 2**63):
        raw = f.readline(cap + 1)
        if not raw:
            return
        total += len(raw)
        if total > limits.max_bytes:
            raise TraceError(str(textfile.too_large(limits.max_bytes)))
        digest.update(raw)  # the file's own bytes, BOM and all: its sha256 as sha256sum prints it
        if len(raw) > cap and not (len(raw) == cap + 1 and raw.endswith(b"\n")):
            while not sized and not raw.endswith(b"\n") and raw:
                raw = f.read(2**20) if b"\n" not in raw else b"\n"
                total += len(raw)
                if total > limits.max_bytes:
                    raise TraceError(str(textfile.too_large(limits.max_bytes)))
            raise TraceError(f"the line is longer than {cap:,} bytes (the limit)", number)
        if number == 1:
            if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                raise TraceError(textfile.UTF16)
            raw = raw.removeprefix(codecs.BOM_UTF8)  # as the page drops it from uploads
        if b"\0" in raw:
            raise TraceError(textfile.NUL_BYTE, number)
        if raw.strip():
            yield number, raw


def _read(
    f: BinaryIO, block_tokens: int | None, limits: TraceLimits, name: str, fmt: TraceFormat | None, sized: bool
) -> Trace:
    if block_tokens is not None and block_tokens < 1:
        raise TraceError(f"block size must be at least 1 token, got {block_tokens}")
    if f.seekable():
        start = f.tell()
        whole = _read_usual(f, block_tokens, limits, name, fmt)
        if whole is not None:
            return whole
        f.seek(start)
    digest = hashlib.sha256()
    objects = _requests(_lines(f, limits, digest, sized))
    first = next(objects, None)
    if first is None:
        raise TraceError("the trace holds no requests")
    number, obj = first
    if fmt is None:
        fmt = detect_format(obj, number)
    block = block_tokens or FORMAT_BLOCK_TOKENS[fmt]
    columns = _Columns()
    parse = _BailianParser(block, limits) if fmt == "bailian" else _MooncakeParser(block, limits)
    parse(obj, number, columns)
    for number, obj in objects:
        parse(obj, number, columns)
        if len(columns.input_tokens) > limits.max_requests:
            raise TraceError(f"the trace has more than {limits.max_requests:,} requests (the limit)", number)
    return Trace(
        name, block, digest.hexdigest(), columns.lines, columns.timestamps_ms, columns.input_tokens,
        columns.output_tokens, columns.offsets, columns.hash_ids, fmt,
    )


# A file is read a MiB at a time by ``_read_usual``: each stretch's lines in one go, the memory they take bounded
# (~10 MB of bytes, ints and lists a stretch; 4 MiB stretches doubled the peak of reading a 40 MB trace, measured).
USUAL_PIECE_BYTES = 2**20


def _read_usual(f: BinaryIO, block_tokens: int | None, limits: TraceLimits, name: str, fmt: TraceFormat | None) -> Trace | None:
    """The trace, when every line of the file is a Mooncake request in its usual form (``sim.traces.line``) that
    passes every check; else None, having read some of ``f``, and the line reader reads it again from the start.

    It gives the trace the line reader gives (``_MooncakeParser`` on each line's object), a stretch of lines at a
    time: all lines here are requests, in the usual form, so none is blank, none is an event, and none holds a BOM
    or a NUL byte; a line may run on over stretches up to the line limit. Anything the reader would refuse, it
    leaves to the reader, whose error names the line.
    """
    cap = limits.max_line_bytes
    if fmt == "bailian" or cap < USUAL_PIECE_BYTES:  # so that no line within one stretch can be over the limit
        return None
    block = block_tokens or MOONCAKE_BLOCK_TOKENS
    digest = hashlib.sha256()
    columns = _Columns()  # arrays, stretch by stretch: a million requests as Python objects would take ~100 MB
    total, rest = 0, b""
    while True:
        piece = f.read(USUAL_PIECE_BYTES)
        total += len(piece)
        if total > limits.max_bytes:
            return None
        digest.update(piece)
        if piece:
            data = rest + piece if rest else piece
            cut = data.rfind(b"\n") + 1
            if rest and cut and data.find(b"\n") > cap:  # the line run on from the stretch before is over the limit
                return None
            lines, rest = data[:cut], data[cut:]
            if len(rest) > cap:  # a line that has not ended within the limit
                return None
        else:
            lines, rest = rest + b"\n" if rest else b"", b""  # the last line, without its newline
        parsed = trace_line.parse_lines(lines)
        if parsed is None or not _usual_requests(parsed, block, limits, columns):
            return None
        if not piece:
            break
    if not columns.input_tokens:
        return None
    return Trace(
        name, block, digest.hexdigest(), columns.lines, columns.timestamps_ms, columns.input_tokens,
        columns.output_tokens, columns.offsets, columns.hash_ids, "mooncake",
    )


def _usual_requests(
    parsed: tuple[list[int], list[int], list[int], list[int], list[int]], block: int, limits: TraceLimits, out: _Columns
) -> bool:
    """Append a stretch of lines read by ``trace_line.parse_lines`` to the columns, if ``_MooncakeParser`` would take
    every one of them (their fields are whole numbers and their ids from 0 to 2**63 - 1 already); False if not."""
    stamps, inputs, outputs, counts, ids = parsed
    if inputs and (
        min(inputs) < 1 or max(inputs) > limits.max_input_tokens or min(outputs) < 0
        or max(outputs) > limits.max_input_tokens or min(stamps) < 0
        or counts != [-(-tokens // block) for tokens in inputs]
        or len(out.hash_ids) + len(ids) > limits.max_blocks
        or len(out.input_tokens) + len(inputs) > limits.max_requests
    ):
        return False
    out.hash_ids.fromlist(ids)  # from the list in one C loop, no copy between; ids from 0 to 2**63 - 1 (parse_lines')
    first = len(out.input_tokens) + 1  # every line is a request: line numbers follow on
    out.lines.extend(range(first, first + len(inputs)))
    out.timestamps_ms.extend(array("d", map(float, stamps)))  # as the parser's int * 1.0
    out.input_tokens.extend(array("q", inputs))
    out.output_tokens.extend(array("q", outputs))
    if counts:
        counts[0] += out.offsets[-1]  # running on from the stretches before
        out.offsets.extend(accumulate(counts))
    return True


def detect_format(obj: dict[str, object], number: int = 1) -> TraceFormat:
    """Bailian when the first request has every Bailian-only field, Mooncake when it has none; else ambiguous."""
    present = [k for k in BAILIAN_ONLY_FIELDS if k in obj]
    if len(present) == len(BAILIAN_ONLY_FIELDS):
        return "bailian"
    if not present:
        return "mooncake"
    missing = [k for k in BAILIAN_ONLY_FIELDS if k not in obj]
    raise TraceError(
        f"cannot tell the format: the request has {', '.join(present)} but not {', '.join(missing)}; "
        f"name it ({' or '.join(TRACE_FORMATS)})",
        number,
    )


class _Columns:
    __slots__ = ("lines", "timestamps_ms", "input_tokens", "output_tokens", "offsets", "hash_ids")

    def __init__(self) -> None:
        self.lines, self.timestamps_ms = array("q"), array("d")
        self.input_tokens, self.output_tokens = array("q"), array("q")
        self.offsets, self.hash_ids = array("q", [0]), array("q")


def _requests(lines: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, dict[str, object]]]:
    """Each line's object; a ``kvscope watch --record`` line that carries an event but caches no prompt (no
    ``hash_ids``, sim.kvevents.recording) is not a request and is skipped."""
    fast = trace_line.parse
    for number, raw in lines:
        obj = fast(raw) or _object(raw, number)
        if "event" in obj and "hash_ids" not in obj:
            continue
        yield number, obj


def _object(raw: bytes, number: int) -> dict[str, object]:
    try:
        obj = jsontext.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError is one
        raise TraceError(str(exc) if not isinstance(exc, UnicodeDecodeError) else f"not UTF-8 ({exc})", number) from None
    if not isinstance(obj, dict):
        raise TraceError(f"expected a JSON object, got {type(obj).__name__}", number)
    return obj


class _MooncakeParser:
    """Checks one request and appends it to the columns; ``timestamp`` is in ms."""

    FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
    TIMESTAMP_UNIT = "ms"
    MS_PER_UNIT = 1.0

    def __init__(self, block_tokens: int, limits: TraceLimits) -> None:
        self.block_tokens = block_tokens
        self.limits = limits
        self._fields = frozenset(self.FIELDS)
        self._more = type(self).check_more is not _MooncakeParser.check_more

    def __call__(self, obj: dict[str, object], number: int, out: _Columns) -> None:
        # Every line of a trace of millions passes here: the checks are kept to a few C calls.
        if not self._fields <= obj.keys():
            raise TraceError(f"missing {', '.join(k for k in self.FIELDS if k not in obj)}", number)
        timestamp = obj["timestamp"]
        if type(timestamp) not in (int, float) or not 0 <= timestamp < _INF:  # type: ignore[operator]
            raise TraceError(f"timestamp must be a number of {self.TIMESTAMP_UNIT} >= 0, got {timestamp!r}", number)
        limits = self.limits
        input_tokens = _count(obj, "input_length", number, 1, limits.max_input_tokens)
        output_tokens = _count(obj, "output_length", number, 0, limits.max_input_tokens)
        hash_ids = _ids(obj["hash_ids"], number)
        expected = -(-input_tokens // self.block_tokens)
        if len(hash_ids) != expected:
            raise TraceError(
                f"hash_ids has {len(hash_ids)} ids, but input_length {input_tokens} at {self.block_tokens} tokens per block "
                f"needs {expected} (is the block size right?)",
                number,
            )
        if len(out.hash_ids) + len(hash_ids) > limits.max_blocks:
            raise TraceError(f"the trace has more than {limits.max_blocks:,} blocks in all (the limit)", number)
        if self._more:
            self.check_more(obj, number)
        out.lines.append(number)
        out.timestamps_ms.append(timestamp * self.MS_PER_UNIT)  # type: ignore[operator]
        out.input_tokens.append(input_tokens)
        out.output_tokens.append(output_tokens)
        out.hash_ids.extend(self.keys(hash_ids))  # type: ignore[arg-type]
        out.offsets.append(len(out.hash_ids))

    def check_more(self, obj: dict[str, object], number: int) -> None:
        """A format's own fields, checked before the request is kept."""

    def keys(self, hash_ids: array) -> array | list[int]:
        return hash_ids


class _BailianParser(_MooncakeParser):
    """Bailian: ``timestamp`` in seconds, its own fields checked, per-block ids chained into prefix keys."""

    FIELDS = ("chat_id", "parent_chat_id", "timestamp", "input_length", "output_length", "type", "turn", "hash_ids")
    TIMESTAMP_UNIT = "seconds"
    MS_PER_UNIT = 1000.0

    def __init__(self, block_tokens: int, limits: TraceLimits) -> None:
        super().__init__(block_tokens, limits)
        self._chain: dict[tuple[int, int], int] = {}  # (previous key, block id) -> key

    def check_more(self, obj: dict[str, object], number: int) -> None:
        for key, low in (("chat_id", 0), ("parent_chat_id", -1), ("turn", 1)):
            value = obj[key]
            if type(value) is not int or not low <= value <= MAX_HASH_ID:
                raise TraceError(f"{key} must be an integer from {low} to {MAX_HASH_ID}, got {value!r}", number)
        if obj["type"] not in BAILIAN_TYPES:
            raise TraceError(f"type must be one of {', '.join(BAILIAN_TYPES)}, got {obj['type']!r}", number)

    def keys(self, hash_ids: array) -> array | list[int]:
        """Key ``i`` stands for the whole prefix ``hash_ids[: i + 1]``: equal keys, equal prefixes."""
        chain = self._chain
        out = []
        prev = -1
        for block_id in hash_ids:
            key = chain.get((prev, block_id))
            if key is None:
                key = chain[(prev, block_id)] = len(chain)
            out.append(key)
            prev = key
        return out


def _ids(value: object, number: int) -> array:
    """``hash_ids`` as 64-bit integers from 0 up; the array's own conversion does the per-id work in C."""
    if type(value) is array:  # read by sim.traces.line: ids from 0 to MAX_HASH_ID already
        return value
    bad = TraceError(f"hash_ids must be a list of integers from 0 to {MAX_HASH_ID}", number)
    if not isinstance(value, list):
        raise bad
    try:
        ids = array("q", value)  # refuses floats, strings and ids past 2**63 - 1
    except (TypeError, OverflowError):
        raise bad from None
    if ids and min(ids) < 0:
        raise bad
    if ids and (True in value or False in value) and any(type(h) is bool for h in value):
        raise bad  # JSON true and false are ints to array(); `in` finds them (or a 1 or 0) first, cheaply
    return ids


def _count(obj: dict[str, object], key: str, number: int, low: int, high: int) -> int:
    value = obj[key]
    if type(value) is not int or not low <= value <= high:
        raise TraceError(f"{key} must be an integer from {low} to {high:,}, got {value!r}", number)
    return value
