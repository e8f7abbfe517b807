"""A Mooncake trace line in its usual form read with one pattern match and the JSON decoder on its ids only; anything else is left to the full reading.

Almost every line of a published trace is written the same way (``json.dumps``
of ``timestamp``, ``input_length``, ``output_length``, ``hash_ids``, in that
order). For such a line this gives the object ``jsontext.loads`` gives, with
``hash_ids`` already an ``array('q')`` of ids from 0 up, at about half the
cost: the pattern has checked the counts, and the ids hold no sign, fraction,
exponent or literal, so the checks for negative, boolean and non-finite values
have nothing to find. For any other line (other spacing or key order, more
fields, a float, a leading zero, a number past 18 digits or 2**63 - 1,
anything malformed) it gives None and the reader decodes the whole line, so
its errors (line number and field) are the ones it always gave.
"""

from __future__ import annotations

import re
from array import array
from typing import Annotated

import msgspec

from sim.bounds.jsontext import DECODER

# At most 18 digits: the value fits a 64-bit integer, and JSON allows no leading zero.
_COUNT = rb"(0|[1-9][0-9]{0,17})"
LINE = re.compile(
    rb'\{"timestamp": ' + _COUNT + rb', "input_length": ' + _COUNT + rb', "output_length": ' + _COUNT
    + rb', "hash_ids": (\[[0-9, ]*\])\}[ \t\r\n]*'
)


def parse(raw: bytes) -> dict[str, object] | None:
    """The line's object as ``jsontext.loads`` gives it (``hash_ids`` as an array), or None when not in the usual form."""
    m = LINE.fullmatch(raw)
    if m is None:
        return None
    try:
        # The list as JSON reads it: a leading zero, an empty id or a missing comma is refused there.
        ids, end = DECODER.raw_decode(raw.decode("ascii"), m.start(4))
        hash_ids = array("q", ids)  # OverflowError past 2**63 - 1
    except (ValueError, OverflowError):
        return None
    if end != m.end(4):
        return None
    return {"timestamp": int(m[1]), "input_length": int(m[2]), "output_length": int(m[3]), "hash_ids": hash_ids}


class _Row(msgspec.Struct, forbid_unknown_fields=True):
    """A Mooncake request line whose fields are all whole numbers, its ids left as their JSON text."""

    timestamp: int
    input_length: int
    output_length: int
    hash_ids: msgspec.Raw


_ROWS = msgspec.json.Decoder(list[_Row])
# Ids as the line reader takes them, from 0 to 2**63 - 1, checked in msgspec's C loop rather than over the ids after.
_IDS = msgspec.json.Decoder(list[Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]])


def parse_lines(chunk: bytes) -> tuple[list[int], list[int], list[int], list[int], list[int]] | None:
    """Whole lines (``chunk`` ends in a newline) each one Mooncake request of the four fields, all whole numbers:
    their timestamps, input and output lengths, the number of ids of each and all the ids in order; None if any line
    is not (a blank line, another field, a float, a list of anything but integers, malformed JSON).

    msgspec decodes the lines as one JSON array (each newline a comma), each line's ids kept as text; then the ids
    of all lines as one list of integers. The array has as many items as lines only if every line holds exactly one
    value (JSON has no empty items); a line's commas count its ids when its ids are integers between commas, which
    the list's decoding checks, as it checks each id is from 0 to 2**63 - 1. Lengths and timestamps the line reader
    refuses (below 0, over the limits) are left to the reader's caller to check, as the limits are.
    """
    if not chunk:
        return [], [], [], [], []
    try:
        rows = _ROWS.decode(b"[" + chunk[:-1].replace(b"\n", b",") + b"]")
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    if len(rows) != chunk.count(b"\n"):
        return None
    texts = [bytes(r.hash_ids) for r in rows]
    if b"".join([t[:1] + t[-1:] for t in texts]) != b"[]" * len(texts):
        return None  # ids not a list (a list's text opens and closes so; its items are checked below)
    counts = [t.count(b",") + 1 if len(t) > 2 else 0 for t in texts]
    try:
        flat = _IDS.decode(b"[" + b",".join([t[1:-1] for t in texts if len(t) > 2]) + b"]")
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    if sum(counts) != len(flat):
        return None  # "[ ]": no id, and no comma to count
    return [r.timestamp for r in rows], [r.input_length for r in rows], [r.output_length for r in rows], counts, flat
