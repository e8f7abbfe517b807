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

from sim.jsontext import DECODER

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
