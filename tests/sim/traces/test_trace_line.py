"""The reader's quick path for a Mooncake line in its usual form (sim.traces.line) reads what the JSON decoder reads, and errs as it does."""

from __future__ import annotations

import json
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.bounds import jsontext
from sim.traces import line as trace_line
from sim.traces.reader import Trace, TraceError, bundled_trace_path, parse_trace


def without_quick_path(monkeypatch: pytest.MonkeyPatch, data: bytes, block: int | None = None) -> Trace | str:
    with monkeypatch.context() as m:
        m.setattr(trace_line, "parse", lambda raw: None)
        m.setattr(trace_line, "parse_lines", lambda chunk: None)  # the whole-file reading too: each line decoded as JSON
        return read(data, block)


def read(data: bytes, block: int | None = None) -> Trace | str:
    """The trace's columns, or the error's text (its line number and field)."""
    try:
        t = parse_trace(data, block)
    except TraceError as exc:
        return f"TraceError: {exc} (line {exc.line})"
    return (t.block_tokens, t.lines, t.timestamps_ms, t.input_tokens, t.output_tokens, t.offsets, t.hash_ids, t.sha256)  # type: ignore[return-value]


def test_the_samples_lines_all_take_the_quick_path_and_read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    data = bundled_trace_path("mooncake-synthetic").read_bytes()
    lines = [line for line in data.splitlines() if line.strip()]
    for line in lines:
        quick = trace_line.parse(line)
        assert quick is not None
        assert {**quick, "hash_ids": list(quick["hash_ids"])} == jsontext.loads(line)  # type: ignore[arg-type]
    assert read(data) == without_quick_path(monkeypatch, data)


# Pieces of a line: the usual ones and the odd ones JSON refuses, reads otherwise, or the checks refuse.
NUMBERS = ["0", "7", "40160", "12.5", "-3", "1e3", "007", "true", "null", '"5"', "9223372036854775807", "99999999999999999999"]
IDS = ["0", "1", "2", "15", "-1", "01", "1.0", "true", "false", '"3"', "9223372036854775807", "9223372036854775808", "1e2", ""]
SEPARATORS = [", ", ",", " , ", ",  ", "\t,"]


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    """Lines in the usual form and right for 4-token blocks, half of them with one odd piece."""
    ids = draw(st.lists(st.sampled_from(IDS[:4]), min_size=1, max_size=6))
    fields = [
        ("timestamp", draw(st.sampled_from(NUMBERS[:3]))),
        ("input_length", str(draw(st.integers(4 * len(ids) - 3, 4 * len(ids))))),
        ("output_length", draw(st.sampled_from(NUMBERS[:3]))),
    ]
    sep, odd = ", ", draw(st.integers(0, 9))
    if odd == 1:
        at = draw(st.integers(0, 2))
        fields[at] = (fields[at][0], draw(st.sampled_from(NUMBERS)))
    elif odd == 2:
        ids[draw(st.integers(0, len(ids) - 1))] = draw(st.sampled_from(IDS))
    elif odd == 3:
        sep = draw(st.sampled_from(SEPARATORS))
    elif odd == 4:
        ids = []
    fields.append(("hash_ids", "[" + sep.join(ids) + "]"))
    if odd == 5:
        fields = draw(st.permutations(fields))
    elif odd == 6:
        fields.insert(draw(st.integers(0, 4)), ("extra", "1"))
    text = "{" + ", ".join(f'"{k}": {v}' for k, v in fields) + "}" + draw(st.sampled_from(["", " ", "\r", "\t "]))
    return text.encode()


@settings(max_examples=400, deadline=None)
@given(body=st.lists(lines(), min_size=1, max_size=3), block=st.sampled_from([4, 4, 8]))
def test_odd_lines_read_and_err_as_the_json_decoder_has_them(body: list[bytes], block: int) -> None:
    # Every line read with the quick path gives the trace, or the error (its line and field), that reading each
    # line as JSON gives; a line the quick path takes is exactly the decoder's object.
    data = b"\n".join(body)
    for line in body:
        quick = trace_line.parse(line)
        if quick is not None:
            assert isinstance(quick["hash_ids"], array)
            assert {**quick, "hash_ids": list(quick["hash_ids"])} == json.loads(line)  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as m:
        assert read(data, block) == without_quick_path(m, data, block)


def test_the_quick_path_takes_the_usual_form_only() -> None:
    usual = json.dumps({"timestamp": 3, "input_length": 9, "output_length": 0, "hash_ids": [0, 7, 12]}).encode()
    assert trace_line.parse(usual) == {"timestamp": 3, "input_length": 9, "output_length": 0, "hash_ids": array("q", [0, 7, 12])}
    for odd in (
        usual.replace(b"[0,", b"[00,"),  # a leading zero: not JSON
        usual.replace(b"12]", b"9223372036854775808]"),  # past a 64-bit id: the checks name hash_ids
        usual.replace(b"12]", b"12,]"),  # a trailing comma
        usual.replace(b": 3,", b": 3.0,"),  # a float timestamp: the decoder's own reading
        usual.replace(b"{", b' {'),  # other spacing
    ):
        assert trace_line.parse(odd) is None, odd


# -- the whole file at once (sim.traces.reader._read_usual, trace_line.parse_lines) -------------------------------------------


def test_the_sample_is_read_whole_and_gives_the_line_readers_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from sim.traces.reader import TraceLimits, _read_usual

    data = bundled_trace_path("mooncake-synthetic").read_bytes()
    whole = _read_usual(io.BytesIO(data), None, TraceLimits(), "upload", None)
    assert whole is not None  # every line of the sample is in the usual form: no line went to the line reader
    assert read(data) == without_quick_path(monkeypatch, data)
    # 3,993 requests (wc -l of the file), ids numbered from 0 (its first line: [0, 1, ..., 78]).
    assert len(whole) == 3993 and whole.hash_ids[:79].tolist() == list(range(79))


@settings(max_examples=300, deadline=None)
@given(
    body=st.lists(lines(), min_size=1, max_size=8),
    block=st.sampled_from([4, 8]),
    end=st.sampled_from([b"", b"\n"]),
    piece=st.sampled_from([48, 100, 4 * 2**20]),
)
def test_stretches_of_lines_read_and_err_as_each_line_decoded(body: list[bytes], block: int, end: bytes, piece: int) -> None:
    # The file read a few bytes at a time (48: most lines span two stretches), with or without a last newline:
    # the trace, or the error with its line and field, of decoding each line as JSON.
    data = b"\n".join(body) + end
    with pytest.MonkeyPatch.context() as m:
        m.setattr("sim.traces.reader.USUAL_PIECE_BYTES", piece)
        assert read(data, block) == without_quick_path(m, data, block)


def test_parse_lines_takes_only_files_of_usual_lines() -> None:
    usual = json.dumps({"timestamp": 3, "input_length": 9, "output_length": 0, "hash_ids": [0, 7, 12]}).encode() + b"\n"
    empty_ids = json.dumps({"timestamp": 3, "input_length": 9, "output_length": 0, "hash_ids": []}).encode() + b"\n"
    # Timestamps, lengths, ids a line, then every id: [0, 7, 12], [], [0, 7, 12].
    assert trace_line.parse_lines(usual + empty_ids + usual) == ([3] * 3, [9] * 3, [0] * 3, [3, 0, 3], [0, 7, 12, 0, 7, 12])
    # Any spacing JSON allows is the line reader's too (it decodes each line as JSON): read alike.
    assert trace_line.parse_lines(b" " + usual.replace(b", ", b",")) == ([3], [9], [0], [3], [0, 7, 12])
    for odd in (
        usual + b"\n",  # a blank line
        usual.replace(b"[0,", b"[00,"),  # a leading zero
        usual.replace(b"12]", b"12,]"),  # a trailing comma
        usual.replace(b"[0, 7, 12]", b"[ ]"),  # no id, no comma: one blank counted as an id if unchecked
        usual.replace(b"}", b"}x"),  # more after the object
        usual.replace(b"\n", b"\r") + usual,  # two lines to the line reader, which splits at newlines only
        usual.replace(b"\n", b",") + usual,  # two requests on one line: the line reader refuses the line
        usual.replace(b"[0, 7, 12]", b"[0, [7], 12]"),  # a list in the ids: its commas would be counted
        usual.replace(b"[0, 7, 12]", b'"0, 7, 12"'),  # ids as text
        usual.replace(b"[0, 7, 12]", b"{}"),  # not a list at all
        usual.replace(b"12]", b"12.0]"),  # a float id
        usual.replace(b'"timestamp": 3', b'"timestamp": 3.5'),  # a float timestamp: the line reader takes it
        usual.replace(b"}", b', "event": 1}'),  # another field (a kvscope watch --record line's)
        usual.replace(b'"output_length": 0', b'"output_length": true'),  # a boolean
    ):
        assert trace_line.parse_lines(odd) is None, odd


@pytest.mark.parametrize("cap", [165, 166, 200, 400])
def test_a_line_over_several_stretches_meets_the_line_limit_as_the_line_reader_does(monkeypatch: pytest.MonkeyPatch, cap: int) -> None:
    # Stretches of 64 bytes; the second line is 166 bytes before its newline, over three stretches: read within a
    # limit of 166 or more, refused by its number under it, as the line reader has it.
    import io

    from sim.traces.reader import TraceLimits, _read_usual

    short = json.dumps({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [5]}).encode()
    long = json.dumps({"timestamp": 1, "input_length": 24, "output_length": 1, "hash_ids": list(range(10, 34))}).encode()
    # '{"timestamp": 1, ' 17 + '"input_length": 24, ' 20 + '"output_length": 1, ' 20 + '"hash_ids": [' 13, then 24
    # two-digit ids and 23 ", " (94), then "]}" (2): 166.
    assert len(long) == 166
    data = b"\n".join([short, long, short]) + b"\n"

    def outcome() -> object:
        try:
            t = parse_trace(data, 1, TraceLimits(max_line_bytes=cap))
        except TraceError as exc:
            return str(exc)
        return t.hash_ids.tolist(), t.offsets.tolist(), t.sha256

    monkeypatch.setattr("sim.traces.reader.USUAL_PIECE_BYTES", 64)
    quick = outcome()
    # Read in stretches when within the limit; left to the line reader otherwise.
    assert (_read_usual(io.BytesIO(data), 1, TraceLimits(max_line_bytes=cap), "t", None) is not None) == (cap >= 166)
    with monkeypatch.context() as m:
        m.setattr(trace_line, "parse", lambda raw: None)
        m.setattr(trace_line, "parse_lines", lambda chunk: None)
        assert quick == outcome()
    if cap >= 166:
        assert quick[:2] == ([5, *range(10, 34), 5], [0, 1, 25, 26])  # type: ignore[index]
    else:
        assert quick == "line 2: the line is longer than 165 bytes (the limit)"


@pytest.mark.parametrize(
    "field, value", [("timestamp", -1), ("output_length", -1), ("input_length", 0), ("hash_ids", [0, -7])]
)
def test_whole_numbers_the_line_reader_refuses_are_refused_by_its_line(field: str, value: object) -> None:
    # Whole numbers all, so the stretch decodes; but each is out of the line reader's range (a timestamp, an output
    # length or an id below 0, no prompt): the stretch goes back to the line reader, whose error names line 2.
    good = {"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [0, 1]}
    data = b"".join(json.dumps(row).encode() + b"\n" for row in (good, {**good, field: value}, good))
    outcome = read(data, 4)
    assert isinstance(outcome, str) and "(line 2)" in outcome and field in outcome, outcome
