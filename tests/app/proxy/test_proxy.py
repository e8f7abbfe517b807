"""The OpenAI proxy of ``kvscope serve --upstream``: transparent (same bytes as a direct call, streamed chunks passed
as they come, statuses and errors passed), bounded, and never contacting anything but its configured upstreams."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import httpx
import pytest
from fake_upstream import CHUNK_GAP_S, fake_upstream
from live_servers import free_port, run_kvscope

Serve = Callable[..., AbstractContextManager[str]]


@pytest.fixture(scope="module")
def proxied(live_server_factory: Serve) -> Iterator[tuple[str, str, list[bytes]]]:
    """(the upstream's URL, kvscope's URL proxying to it, the bodies the upstream received)."""
    with fake_upstream() as (upstream, received):
        with live_server_factory("--upstream", f"fake={upstream}") as url:
            yield upstream, url, received


def test_models_and_completions_come_back_byte_for_byte(proxied: tuple[str, str, list[bytes]]) -> None:
    upstream, url, received = proxied
    for path in ("/v1/models", "/upstream/fake/v1/models"):
        direct, via = httpx.get(upstream + "/v1/models"), httpx.get(url + path)
        assert (via.status_code, via.content) == (direct.status_code, direct.content)
        assert via.headers["content-type"] == direct.headers["content-type"] and via.headers["x-upstream"] == "fake"
    # A body with odd spacing and key order reaches the upstream exactly as sent.
    body = b'{ "prompt":"a b c",   "max_tokens": 2, "zeta": [1, 2.50] }'
    direct = httpx.post(upstream + "/v1/completions", content=body, headers={"content-type": "application/json"})
    via = httpx.post(url + "/v1/completions", content=body, headers={"content-type": "application/json"})
    assert (via.status_code, via.content) == (direct.status_code, direct.content)
    assert received[-2:] == [body, body]


def test_streamed_chunks_pass_as_they_arrive(proxied: tuple[str, str, list[bytes]]) -> None:
    upstream, url, _ = proxied
    body = {"prompt": "x", "stream": True}
    chunks: dict[str, list[tuple[float, bytes]]] = {}
    for name, base in (("direct", upstream), ("via", url)):
        got: list[tuple[float, bytes]] = []
        t0 = time.perf_counter()
        with httpx.stream("POST", base + "/v1/completions", content=json.dumps(body).encode()) as r:
            for chunk in r.iter_raw():
                got.append((time.perf_counter() - t0, chunk))
        chunks[name] = got
    assert b"".join(c for _, c in chunks["via"]) == b"".join(c for _, c in chunks["direct"])
    # The upstream waits 0.4 s between its three chunks: passed on as they come, they reach the client about
    # 0.8 s apart (a proxy that buffered the answer would deliver them all at once, at its end).
    first, last = chunks["via"][0][0], chunks["via"][-1][0]
    assert last - first >= 2 * CHUNK_GAP_S * 0.8


def test_chat_completions_pass_and_ttft_waits_for_the_first_content(proxied: tuple[str, str, list[bytes]]) -> None:
    upstream, url, received = proxied
    body = b'{"messages": [{"role": "user", "content": "hi"}], "stream": true}'
    direct = httpx.post(upstream + "/v1/chat/completions", content=body)
    via = httpx.post(url + "/v1/chat/completions", content=body)
    assert via.content == direct.content and received[-1] == body
    # The role chunk carries no text; the first content comes 0.4 s later, and that is the time to first token.
    deadline = time.monotonic() + 10
    while (record := httpx.get(url + "/api/watch/fake").json()["requests"][-1])["path"] != "/v1/chat/completions":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert record["ttft_ms"] >= CHUNK_GAP_S * 1000 and record["streamed"] is True


def test_statuses_and_error_bodies_pass_through(proxied: tuple[str, str, list[bytes]]) -> None:
    upstream, url, _ = proxied
    for prompt, status in (("fail", 503), ("bad", 400)):
        body = json.dumps({"prompt": prompt}).encode()
        direct = httpx.post(upstream + "/v1/completions", content=body)
        via = httpx.post(url + "/v1/completions", content=body)
        assert via.status_code == direct.status_code == status
        assert via.content == direct.content
    # The watch says so for the server error (a 400 is the client's own business).
    deadline = time.monotonic() + 10
    while not any("HTTP 503" in w for w in httpx.get(url + "/api/watch/fake").json()["warnings"]):
        assert time.monotonic() < deadline, "no warning for the 503"
        time.sleep(0.05)
    assert not any("HTTP 400" in w for w in httpx.get(url + "/api/watch/fake").json()["warnings"])


def test_a_stream_the_upstream_breaks_off_ends_early_for_the_client(proxied: tuple[str, str, list[bytes]]) -> None:
    _, url, _ = proxied
    got = b""
    with pytest.raises(httpx.HTTPError):
        with httpx.stream("POST", url + "/v1/completions", content=b'{"prompt": "break", "stream": true}') as r:
            for chunk in r.iter_raw():
                got += chunk
    assert b" t0" in got and b" t1" in got and b"[DONE]" not in got  # what came before the break was passed on


def test_a_client_that_leaves_ends_the_upstream_request(proxied: tuple[str, str, list[bytes]]) -> None:
    _, url, _ = proxied
    before = len(httpx.get(url + "/api/watch/fake").json()["requests"])
    with httpx.stream("POST", url + "/v1/completions", content=b'{"prompt": "leave", "stream": true}') as r:
        next(r.iter_raw())  # the first chunk, then away
    deadline = time.monotonic() + 10
    while len(records := httpx.get(url + "/api/watch/fake").json()["requests"]) == before:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # Accounted for at once, not when the upstream would have finished (2 x 0.4 s later).
    assert records[-1]["error"] == "the client left mid-answer"
    assert records[-1]["latency_ms"] < 2 * CHUNK_GAP_S * 1000


def test_a_body_over_the_limit_is_refused(proxied: tuple[str, str, list[bytes]]) -> None:
    _, url, received = proxied
    before = len(received)
    big = b'{"prompt": "' + b"a " * (4 * 2**20 + 1) + b'"}'  # over 8 MiB
    r = httpx.post(url + "/v1/completions", content=big, timeout=30)
    assert r.status_code == 413 and "8,388,608 bytes" in r.json()["error"]["message"]
    assert len(received) == before  # nothing reached the upstream


def test_only_configured_upstreams_are_reachable(proxied: tuple[str, str, list[bytes]]) -> None:
    _, url, _ = proxied
    assert httpx.get(url + "/upstream/other/v1/models").status_code == 404
    # No route takes an address: a URL where a name goes is just an unknown name.
    assert httpx.get(url + "/upstream/http:%2F%2F127.0.0.1:1/v1/models").status_code == 404
    assert httpx.get(url + "/api/watch").json() == [{"name": "fake", "kv_events": False}]


def test_the_proxied_paths_keep_the_servers_host_origin_and_token_rules(live_server_factory: Serve) -> None:
    with fake_upstream() as (upstream, received), live_server_factory(
        "--upstream", f"fake={upstream}", "--auth-token", "s3cret"
    ) as url:
        port = url.rsplit(":", 1)[1]
        bearer = {"authorization": "Bearer s3cret"}
        body = b'{"prompt": "a b", "max_tokens": 1}'
        before = len(received)
        # DNS rebinding: a page whose name resolves to 127.0.0.1 must not reach the upstream through the proxy.
        rebound = httpx.post(url + "/v1/completions", content=body, headers={**bearer, "host": f"evil.example:{port}"})
        assert rebound.status_code == 400
        # A cross-site page may not spend the upstream's GPU either, and without the token nobody may.
        foreign = httpx.post(url + "/v1/completions", content=body, headers={**bearer, "origin": "http://evil.example"})
        assert foreign.status_code == 403
        assert httpx.post(url + "/v1/completions", content=body).status_code == 401
        assert httpx.get(url + "/upstream/fake/v1/models").status_code == 401
        assert len(received) == before  # none of them reached the upstream
        ok = httpx.post(url + "/v1/completions", content=body, headers=bearer)
        assert ok.status_code == 200 and received[-1] == body


def test_an_upstream_that_is_down_gives_502_naming_it(live_server_factory: Serve) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    with live_server_factory("--upstream", f"gone={down}") as url:
        r = httpx.post(url + "/v1/completions", content=b'{"prompt": "x"}')
        assert r.status_code == 502
        assert "upstream gone cannot be reached" in r.json()["error"]["message"]
        assert down not in r.text  # names, never addresses
        state = httpx.get(url + "/api/watch/gone").json()
        assert state["requests"][-1]["error"].startswith("upstream gone cannot be reached")


def test_bad_upstream_flags_exit_2() -> None:
    for args, flag in (
        (["--upstream", "a=ftp://x"], "--upstream"),
        (["--upstream", "a=http://x", "--kv-events", "b=tcp://h:1"], "--upstream"),
        (["--upstream", "a=http://x", "--kv-events", "a=http://h:1"], "--upstream"),
        (["--kv-events", "a=tcp://h:1"], "--kv-events"),
    ):
        result = run_kvscope(["serve", "--port", "0", *args], timeout_s=30)
        assert result.returncode == 2, result
        assert flag in result.stderr


def test_an_upstream_that_stalls_is_cut_off_at_the_configured_timeout(live_server_factory: Serve) -> None:
    with fake_upstream() as (upstream, _), live_server_factory("--upstream", f"slow={upstream}",
                                                               "--upstream-timeout", "1") as url:
        # A request answered in full first: what is recorded before the stalls must stay.
        assert httpx.post(url + "/v1/completions", content=b'{"prompt": "x"}').status_code == 200
        # Mid-stream: t0, then t1 after 0.4 s, then silence. The proxy waits 1 s for more, sends an error event in
        # vLLM's shape and cuts the connection, so the client sees both the message and an incomplete answer.
        got = b""
        started = time.monotonic()
        with pytest.raises(httpx.HTTPError):
            with httpx.stream("POST", url + "/v1/completions", content=b'{"prompt": "stall", "stream": true}',
                              timeout=20) as r:
                assert r.status_code == 200
                for chunk in r.iter_raw():
                    got += chunk
        waited = time.monotonic() - started
        assert CHUNK_GAP_S + 1 <= waited < 10  # the stall (30 s at the upstream) was cut after 1 s of silence
        assert b" t0" in got and b" t1" in got and b"[DONE]" not in got
        last = json.loads(got.rstrip().rsplit(b"\n\n", 1)[-1].removeprefix(b"data: "))
        assert last["error"]["code"] == 504
        assert last["error"]["message"] == "upstream slow sent nothing for 1 s mid-answer"
        # Not streamed: silent before the answer starts, so the client gets 504 naming the upstream.
        r = httpx.post(url + "/v1/completions", content=b'{"prompt": "stall"}', timeout=20)
        assert r.status_code == 504
        assert r.json()["error"]["message"] == "upstream slow did not answer within 1 s"
        # The watch has all three, the first intact, and a warning for each stall.
        deadline = time.monotonic() + 10
        while len((state := httpx.get(url + "/api/watch/slow").json())["requests"]) < 3:
            assert time.monotonic() < deadline, state
            time.sleep(0.05)
        first, streamed, plain = state["requests"]
        assert (first["status"], first["error"]) == (200, None)
        assert streamed["error"] == "upstream slow sent nothing for 1 s mid-answer"
        assert streamed["ttft_ms"] is not None and streamed["ttft_ms"] < CHUNK_GAP_S * 1000  # t0 came before
        assert plain["error"] == "upstream slow did not answer within 1 s"
        assert [w for w in state["warnings"] if "slow" in w] == [
            "request 1: upstream slow sent nothing for 1 s mid-answer",
            "request 2: upstream slow did not answer within 1 s",
        ]


def test_a_bad_upstream_timeout_exits_2_naming_the_flag_and_limits() -> None:
    for value in ("0", "abc", "7200"):
        result = run_kvscope(["serve", "--port", "0", "--upstream", "a=http://x", "--upstream-timeout", value],
                             timeout_s=30)
        assert result.returncode == 2, result
        assert "--upstream-timeout" in result.stderr
        assert value == "abc" or "0.1 to 3600 seconds" in result.stderr


def test_the_upstream_is_probed_at_start_up_not_on_the_first_request(live_server_factory: Serve) -> None:
    with fake_upstream() as (upstream, received), live_server_factory("--upstream", f"early={upstream}") as url:
        # No request has been proxied, yet the watch knows the upstream's model (from its /v1/models): the probe
        # ran when the server started, so the first client's request does not wait for it.
        deadline = time.monotonic() + 10
        while (state := httpx.get(url + "/api/watch/early").json())["server"] is None:
            assert time.monotonic() < deadline, state
            time.sleep(0.05)
        assert state["server"]["model"] == "fake" and state["requests"] == [] and received == []


def test_kvscopes_own_credentials_stop_at_kvscope(live_server_factory: Serve) -> None:
    # With --auth-token the client proves itself to kvscope with "Authorization: Bearer s3cret" or the kvscope_token
    # cookie; neither is meant for the upstream (a vLLM server, perhaps run by someone else), so neither reaches it.
    # What the client meant for the upstream passes: its other cookies, and an Authorization that is not kvscope's.
    seen: list[dict[str, list[str]]] = []
    with fake_upstream(seen) as (upstream, received), live_server_factory(
        "--upstream", f"fake={upstream}", "--auth-token", "s3cret"
    ) as url:
        body = b'{"prompt": "a b", "max_tokens": 1}'
        by_header = httpx.post(url + "/v1/completions", content=body,
                               headers={"authorization": "Bearer s3cret", "x-client": "one"})
        assert by_header.status_code == 200
        assert "authorization" not in seen[-1] and seen[-1]["x-client"] == ["one"]
        # The cookie between two of the client's own: those two pass, in their order, and kvscope's does not.
        by_cookie = httpx.post(url + "/upstream/fake/v1/completions", content=body,
                               headers={"cookie": "a=1; kvscope_token=s3cret; b=2", "authorization": "Bearer vllm-key"})
        assert by_cookie.status_code == 200
        assert seen[-1]["cookie"] == ["a=1; b=2"] and seen[-1]["authorization"] == ["Bearer vllm-key"]
        # kvscope's cookie alone: no Cookie header is left to send.
        alone = httpx.post(url + "/v1/completions", content=body, headers={"cookie": "kvscope_token=s3cret"})
        assert alone.status_code == 200 and "cookie" not in seen[-1]
        assert all("s3cret" not in v for h in seen for values in h.values() for v in values)
        assert len(received) == 3


def test_an_upstream_token_set_at_start_up_replaces_the_clients(live_server_factory: Serve) -> None:
    # A vLLM started with --api-key wants its own bearer token: kvscope sends the one it was given for that upstream,
    # in place of kvscope's (which stops at kvscope) or whatever the client sent.
    seen: list[dict[str, list[str]]] = []
    with fake_upstream(seen) as (upstream, _), live_server_factory(
        "--upstream", f"fake={upstream}", "--auth-token", "s3cret", "--upstream-token", "fake=vk-1"
    ) as url:
        body = b'{"prompt": "a b", "max_tokens": 1}'
        for auth in ("Bearer s3cret", None):
            headers = {"authorization": auth} if auth else {"cookie": "kvscope_token=s3cret"}
            assert httpx.post(url + "/v1/completions", content=body, headers=headers).status_code == 200
            assert seen[-1]["authorization"] == ["Bearer vk-1"]


def test_a_bad_upstream_token_exits_2_without_echoing_it() -> None:
    for args, why in (
        (["--upstream", "a=http://127.0.0.1:1", "--upstream-token", "b=tok,en"], "no upstream is named 'b'"),
        (["--upstream", "a=http://127.0.0.1:1", "--upstream-token", "a=tok en"], "printable ASCII without spaces"),
        (["--upstream-token", "a=token"], "--upstream NAME=URL too"),
    ):
        r = run_kvscope(["serve", *args, "--port", "0"], timeout_s=30)
        assert r.returncode == 2 and why in r.stderr and "--upstream-token" in r.stderr, r.stderr
        assert "tok en" not in r.stderr and "tok,en" not in r.stderr
