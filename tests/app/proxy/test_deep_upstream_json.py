"""JSON nested past the parser's stack, from an upstream or a proxied client, is read as unreadable, never raised."""

from __future__ import annotations

import pytest

from app.live.client import TargetError, VllmClient, _error_message
from app.live.targets import parse_target
from app.proxy.forward import _has_text
from app.proxy.watch import _json_body
from live_servers import run_async

# 100,000 opening brackets: json.loads raises RecursionError (not ValueError) long before it reaches the end.
DEEP = "[" * 100_000


def test_a_proxied_request_body_nested_too_deep_is_a_body_without_a_prompt() -> None:
    assert _json_body(DEEP.encode()) == {}


def test_an_upstream_stream_line_nested_too_deep_carries_no_text() -> None:
    assert _has_text(b"data:" + DEEP.encode()) is False


def test_a_target_error_body_nested_too_deep_is_shown_as_text() -> None:
    assert _error_message(DEEP) == DEEP[:200]


def test_a_streamed_chunk_nested_too_deep_is_a_target_error_naming_the_target() -> None:
    async def read() -> None:
        async with VllmClient(parse_target("deep=http://127.0.0.1:9")) as client:  # never contacted
            client._chunk("/v1/completions", DEEP)

    with pytest.raises(TargetError, match="target deep: POST /v1/completions: a streamed chunk is not JSON"):
        run_async(read())
