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


# Every line of a stretch of the file in the usual form, each ending in a newline: ``^`` (MULTILINE) starts a match at
# a line's start and the pattern takes no newline before its last byte, so a match is one whole line.
_LINES = re.compile(
    rb'^\{"timestamp": ' + _COUNT + rb', "input_length": ' + _COUNT + rb', "output_length": ' + _COUNT
    + rb', "hash_ids": \[([0-9, ]*)\]\}[ \t\r]*\n',
    re.MULTILINE,
)


def parse_lines(chunk: bytes) -> tuple[list[bytes], list[bytes], list[bytes], list[int], list[int]] | None:
    """Whole lines (``chunk`` ends in a newline) all in the usual form: their timestamps, input and output lengths
    (as digits), the number of ids of each and all the ids in order; None if any line is not, as ``parse`` gives it.

    One pattern search and one JSON decode for the lot, instead of one of each a line: the ids of all the lines are
    joined by ", " into one list, which JSON reads only if each line's ids are numbers between commas (a leading
    zero, an empty id or a missing comma in one line spoils it), so a line's commas count its ids.
    """
    rows = _LINES.findall(chunk)
    if len(rows) != chunk.count(b"\n"):
        return None  # a line that is not in the usual form (or blank): the line reader takes the file
    if not rows:
        return [], [], [], [], []
    timestamps, inputs, outputs, ids = zip(*rows)
    try:
        flat = DECODER.decode("[" + b", ".join(filter(None, ids)).decode("ascii") + "]")
    except ValueError:
        return None
    counts = [text.count(b",") + 1 if text else 0 for text in ids]
    if sum(counts) != len(flat):
        return None  # ids of blanks only ("[ ]"): no id, and no comma to count
    return list(timestamps), list(inputs), list(outputs), counts, flat
