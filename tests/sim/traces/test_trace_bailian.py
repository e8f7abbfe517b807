"""Qwen-Bailian traces: read (seconds, 16-token blocks, per-block ids chained into prefix keys), detected, replayed.

The format is the one alibaba-edu/qwen-bailian-usagetraces-anon documents in its README ("Data Specification
of the Traces"): chat_id, parent_chat_id (-1 for a root request), timestamp in seconds, input_length,
output_length, type (text/search/image/file), turn, hash_ids (one salted SipHash per 16-token block, mapped
to sequential integers). The samples here are written by the tests; nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from sim.simulation.replay import ReplayTiers, replay
from sim.traces.reader import TraceError, read_trace


def bailian(chat_id: int, ids: list[int], tokens: int, *, ts: float, parent: int = -1, turn: int = 1, kind: str = "text") -> dict:
    return {"chat_id": chat_id, "parent_chat_id": parent, "timestamp": ts, "input_length": tokens, "output_length": 7,
            "type": kind, "turn": turn, "hash_ids": ids}


# Four requests of 16-token blocks:
# 1. chat 0: blocks [10, 11], 32 tokens.
# 2. chat 1: block [99], 16 tokens.
# 3. chat 2: blocks [99, 11, 50], 40 tokens: its first block's content is chat 1's, its second block's content
#    is chat 0's second block, but after a different first block: a different prefix.
# 4. chat 3, chat 0's second turn: blocks [10, 11, 12], 48 tokens: chat 0's prompt and one block more.
SAMPLE = [
    bailian(0, [10, 11], 32, ts=0.0),
    bailian(1, [99], 16, ts=0.5, kind="search"),
    bailian(2, [99, 11, 50], 40, ts=1.25, kind="file"),
    bailian(3, [10, 11, 12], 48, ts=2.0, parent=0, turn=2),
]


def write(tmp_path: Path, rows: list[dict], name: str = "bailian.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_ids_are_chained_into_prefix_keys_and_seconds_become_ms(tmp_path: Path) -> None:
    trace = read_trace(write(tmp_path, SAMPLE))
    assert (trace.format, trace.block_tokens) == ("bailian", 16)
    # Keys are numbered by first appearance of each (previous key, id) pair: (-1,10)=0, (0,11)=1, (-1,99)=2,
    # (2,11)=3 (not 1: block 11 after block 99 is another prefix), (3,50)=4, (1,12)=5.
    assert [r.hash_ids for r in trace.requests] == [[0, 1], [2], [2, 3, 4], [0, 1, 5]]
    assert trace.timestamps_ms.tolist() == [0.0, 500.0, 1250.0, 2000.0]
    assert trace.summary()["distinct_blocks"] == 6


def test_replay_hits_only_whole_prefixes(tmp_path: Path) -> None:
    # A GPU large enough to evict nothing. Request 3 finds its first block (chat 1's) but not the second: with
    # the ids unchained, block 11 would have matched chat 0's and counted 32 tokens. Request 4 finds chat 0's two
    # blocks; its third block is new. Hits may not reach the last token: (n - 1) // 16 blocks at most.
    result = replay(read_trace(write(tmp_path, SAMPLE)), ReplayTiers(gpu_blocks=16))
    assert [r["gpu_hit_tokens"] for r in result["requests"]] == [0, 0, 16, 32]
    assert [r["timestamp_ms"] for r in result["requests"]] == [0.0, 500.0, 1250.0, 2000.0]


def test_cli_detects_the_format_and_uses_16_token_blocks(tmp_path: Path) -> None:
    path = write(tmp_path, SAMPLE)
    result = CliRunner().invoke(main, ["replay", str(path), "--gpu-blocks", "16", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["trace"]["format"], data["trace"]["block_tokens"]) == ("bailian", 16)
    assert [r["gpu_hit_tokens"] for r in data["requests"]] == [0, 0, 16, 32]
    # --format bailian says the same; the table names the format.
    text = CliRunner().invoke(main, ["replay", str(path), "--format", "bailian", "--gpu-blocks", "16"])
    assert text.exit_code == 0 and "bailian.jsonl (bailian): 4 requests" in text.output


def test_a_mooncake_file_is_not_read_as_bailian(tmp_path: Path) -> None:
    path = write(tmp_path, [{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]}])
    assert read_trace(path).format == "mooncake"
    result = CliRunner().invoke(main, ["replay", str(path), "--format", "bailian", "--gpu-blocks", "40"])
    assert result.exit_code == 2
    assert "line 1: missing chat_id, parent_chat_id, type, turn" in result.output


def test_an_ambiguous_first_request_asks_for_the_format(tmp_path: Path) -> None:
    row = bailian(0, [1], 16, ts=0)
    del row["turn"], row["type"]
    path = write(tmp_path, [row])
    with pytest.raises(TraceError, match="cannot tell the format: the request has chat_id, parent_chat_id but not turn, type") as info:
        read_trace(path)
    assert info.value.line == 1
    result = CliRunner().invoke(main, ["replay", str(path), "--gpu-blocks", "4"])
    assert result.exit_code == 2 and "name it (mooncake or bailian)" in result.output


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("type", "video", "type must be one of text, search, image, file, got 'video'"),
        ("turn", 0, "turn must be an integer from 1"),
        ("parent_chat_id", -2, "parent_chat_id must be an integer from -1"),
        ("chat_id", "7", "chat_id must be an integer from 0"),
        ("timestamp", -1.0, "timestamp must be a number of seconds >= 0"),
        ("hash_ids", [1, 2, 3], "hash_ids has 3 ids, but input_length 16 at 16 tokens per block needs 1"),
    ],
)
def test_a_bad_bailian_field_is_named_with_its_line(tmp_path: Path, field: str, value: object, message: str) -> None:
    bad = bailian(5, [1], 16, ts=1.0)
    bad[field] = value
    path = write(tmp_path, [bailian(4, [1], 16, ts=0.0), bad])
    with pytest.raises(TraceError, match=message) as info:
        read_trace(path)
    assert info.value.line == 2


def test_a_mooncake_block_size_given_for_a_bailian_file_is_named(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["replay", str(write(tmp_path, SAMPLE)), "--block-size", "512", "--gpu-blocks", "4"])
    assert result.exit_code == 2
    assert "line 1: hash_ids has 2 ids, but input_length 32 at 512 tokens per block needs 1 (is the block size right?)" in result.output


def test_curve_reads_a_bailian_trace_and_format_needs_a_trace(tmp_path: Path) -> None:
    path = write(tmp_path, SAMPLE)
    result = CliRunner().invoke(main, ["curve", str(path), "--json", "--points", "6"])
    assert result.exit_code == 0, result.output
    points = json.loads(result.output)
    # The stream of chained keys: 0 1 | 2 | 2 3 4 | 0 1 5, 9 references, 6 distinct. Re-references: the second 2
    # follows the first at once (depth 1); 0 comes back after 1 2 3 4 (depth 5: four others and itself), and so
    # does 1 after 2 3 4 0 (depth 5). An LRU of 1 to 4 blocks hits once, of 5 or 6 blocks three times.
    assert [(p["capacity_blocks"], p["hit_blocks"]) for p in points] == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 3), (6, 3)]
    refused = CliRunner().invoke(main, ["curve", "--format", "bailian"])
    assert refused.exit_code == 2 and "--format: names a trace's format; give a TRACE" in refused.output
