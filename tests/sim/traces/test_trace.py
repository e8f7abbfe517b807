"""The trace reader: the bundled Mooncake sample, line-numbered errors, and limits checked before any work."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from sim.traces.reader import TraceError, TraceLimits, bundled_trace_path, open_trace, parse_trace, read_trace

# The facts of the bundled sample as its source documents them (sim/data/traces/README.md).
SAMPLE_SHA256 = "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131"


def line(input_length: int, hash_ids: list[int], timestamp: float = 0, output_length: int = 1) -> str:
    return json.dumps({"timestamp": timestamp, "input_length": input_length, "output_length": output_length, "hash_ids": hash_ids})


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bundled_sample_is_the_documented_file() -> None:
    path = bundled_trace_path("mooncake-synthetic")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SAMPLE_SHA256
    trace = read_trace(path)
    summary = trace.summary()
    assert (summary["requests"], summary["block_references"], summary["distinct_blocks"]) == (3993, 121_877, 43_924)
    assert summary["sha256"] == SAMPLE_SHA256
    assert max(r.input_tokens for r in trace.requests) == 191_378


def test_open_trace_takes_a_path_or_a_bundled_name(tmp_path: Path) -> None:
    path = write(tmp_path, [line(5, [7])])
    assert open_trace(str(path)).requests[0].hash_ids == [7]
    assert open_trace("mooncake-synthetic").name == "mooncake-synthetic"
    with pytest.raises(TraceError, match="no bundled trace of that name"):
        open_trace(str(tmp_path / "missing.jsonl"))


def test_block_stream_lists_every_hash_id_in_order() -> None:
    # Two requests at 4 tokens per block: 6 tokens -> 2 ids (the second partial), 4 tokens -> 1 id.
    trace = parse_trace((line(6, [1, 2]) + "\n" + line(4, [1])).encode(), block_tokens=4)
    assert trace.block_stream().tolist() == [1, 2, 1]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"timestamp": 0, "input_length": 4, "hash_ids": [1]}), "missing output_length"),
        (line(0, []), "input_length must be an integer from 1"),
        (line(4, [1], timestamp=-1), "timestamp must be a number"),
        (line(4, [True]), "hash_ids must be a list of integers"),
        (line(4, [-3]), "hash_ids must be a list of integers"),
        (line(4, [1, 2]), "hash_ids has 2 ids, but input_length 4 at 4 tokens per block needs 1"),
    ],
)
def test_a_malformed_line_is_reported_with_its_number(tmp_path: Path, bad: str, message: str) -> None:
    # Line 1 is good, line 2 blank (skipped, but still counted), line 3 bad.
    path = write(tmp_path, [line(4, [1]), "", bad, line(4, [1])])
    with pytest.raises(TraceError, match=message) as info:
        read_trace(path, block_tokens=4)
    assert info.value.line == 3
    assert str(info.value).startswith("line 3: ")


def test_cli_names_the_bad_line_and_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path, [line(512, [1]), line(1024, [1])])
    result = CliRunner().invoke(main, ["replay", str(path), "--gpu-blocks", "8"])
    assert result.exit_code == 2
    assert "line 2: hash_ids has 1 ids, but input_length 1024 at 512 tokens per block needs 2" in result.output


def test_a_file_over_the_byte_limit_is_refused_before_any_line_is_read(tmp_path: Path) -> None:
    # Line 1 is malformed: had the reader started, it would have named line 1.
    path = write(tmp_path, ["{broken", line(4, [1])])
    with pytest.raises(TraceError, match="larger than the limit of 10 bytes") as info:
        read_trace(path, limits=TraceLimits(max_bytes=10))
    assert info.value.line is None


def test_request_and_block_limits_name_the_limit(tmp_path: Path) -> None:
    path = write(tmp_path, [line(8, [1, 2]), line(8, [1, 2]), line(8, [1, 2])])
    with pytest.raises(TraceError, match="more than 2 requests") as info:
        read_trace(path, block_tokens=4, limits=TraceLimits(max_requests=2))
    assert info.value.line == 3
    with pytest.raises(TraceError, match="more than 5 blocks in all") as info:
        read_trace(path, block_tokens=4, limits=TraceLimits(max_blocks=5))
    assert info.value.line == 3  # 2 + 2 + 2 = 6 > 5 on the third line


def test_an_empty_trace_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no requests"):
        read_trace(write(tmp_path, ["", "  "]))


def test_a_billion_byte_line_is_refused_by_number_within_bounded_memory(tmp_path: Path) -> None:
    # A sparse file: one good line, then a line of a billion NUL bytes that never ends. The byte limit is
    # raised past it so that only the line limit can refuse it; reading it whole would take 1 GB.
    import tracemalloc

    path = tmp_path / "huge.jsonl"
    with path.open("wb") as f:
        f.write((line(4, [1]) + "\n").encode())
        f.truncate(f.tell() + 10**9)
    limits = TraceLimits(max_bytes=2 * 10**9, max_line_bytes=2**20)
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match=r"the line is longer than 1,048,576 bytes \(the limit\)") as info:
            read_trace(path, block_tokens=4, limits=limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.line == 2
    assert peak < 8 * 2**20  # the line limit's worth of buffers, not the line


def test_a_line_exactly_at_the_limit_is_read(tmp_path: Path) -> None:
    text = line(4, [1])
    path = write(tmp_path, [text])  # the line and its newline
    assert len(read_trace(path, 4, TraceLimits(max_line_bytes=len(text) + 1))) == 1
    with pytest.raises(TraceError, match="longer than") as info:
        read_trace(path, 4, TraceLimits(max_line_bytes=len(text) - 1))
    assert info.value.line == 1


def test_the_columns_hold_each_request(tmp_path: Path) -> None:
    path = write(tmp_path, [line(6, [1, 2], timestamp=5, output_length=3), "", line(4, [9], timestamp=7)])
    trace = read_trace(path, block_tokens=4)
    assert trace.offsets.tolist() == [0, 2, 3]
    assert trace.hash_ids.tolist() == [1, 2, 9]
    assert trace.lines.tolist() == [1, 3]  # the blank line 2 holds no request
    second = trace.requests[1]
    assert (second.line, second.timestamp_ms, second.input_tokens, second.output_tokens, second.hash_ids) == (3, 7.0, 4, 1, [9])
    assert [r.hash_ids for r in trace.requests] == [[1, 2], [9]]
