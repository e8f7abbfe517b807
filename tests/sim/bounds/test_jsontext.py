"""JSON files as kvscope reads them: finite numbers and shallow nesting only, each refusal saying why."""

from __future__ import annotations

import pytest

from sim.bounds.jsontext import MAX_DEPTH, loads


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"ttft_ms": NaN}', "NaN is not a JSON number"),
        ('{"ttft_ms": Infinity}', "Infinity is not a JSON number"),
        ('[-Infinity]', "-Infinity is not a JSON number"),
        ("[1e400]", "1e400 is out of range"),  # float() would make it inf
        ("[" * 100_000 + "]" * 100_000, f"nested deeper than {MAX_DEPTH} levels"),  # json raises RecursionError
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),  # json parses it
        ('{"a": 1,,}', "not JSON: Expecting property name enclosed in double quotes, line 1"),
    ],
)
def test_what_is_refused_and_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("[", r"\[")):
        loads(text)


def test_ordinary_json_reads_as_json_does() -> None:
    assert loads('{"a": [1, 2.5, {"b": null}], "c": "x"}') == {"a": [1, 2.5, {"b": None}], "c": "x"}
    deepest = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads(deepest) is not None  # exactly at the limit
