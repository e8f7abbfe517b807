"""Browser-facing protection over a real uvicorn: foreign Host and cross-site writes refused, no framing, the optional token."""

from __future__ import annotations

import socket
from collections.abc import Callable
from contextlib import AbstractContextManager
from urllib.parse import urljoin

import httpx
import pytest

from app.web.guard import allowed_hosts_for, host_name


def test_a_foreign_host_is_refused_and_local_names_are_served(live_server: str) -> None:
    port = live_server.rsplit(":", 1)[1]
    # DNS rebinding: the attacker's name resolves to 127.0.0.1, the browser sends it as Host.
    response = httpx.get(f"{live_server}/api/presets", headers={"host": f"evil.example:{port}"}, timeout=10)
    assert response.status_code == 400
    assert "--allowed-host" in response.json()["detail"]
    for name in ("127.0.0.1", "localhost", "[::1]"):
        assert httpx.get(f"{live_server}/api/presets", headers={"host": f"{name}:{port}"}, timeout=10).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://evil.example"},
        {"origin": "null"},  # a sandboxed frame or a file: page
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},  # another port or subdomain is another origin
    ],
)
def test_cross_site_writes_are_refused(live_server: str, headers: dict[str, str]) -> None:
    # The case: a plain cross-site HTML form posting to /ui/live/run reserved the live targets.
    for path, data in (("/ui/live/run", {"targets": "gpu"}), ("/ui/analysis/capacity", {"gpu_tokens": "10000000"})):
        response = httpx.post(f"{live_server}{path}", data=data, headers=headers, timeout=10)
        assert response.status_code == 403, (path, headers)
    response = httpx.post(f"{live_server}/api/simulate", json={}, headers=headers, timeout=10)
    assert response.status_code == 403


def test_same_origin_writes_and_clients_without_browser_headers_pass(live_server: str) -> None:
    same = {"origin": live_server, "sec-fetch-site": "same-origin"}
    assert httpx.post(f"{live_server}/api/simulate", json={"docs": 2}, headers=same, timeout=30).status_code == 200
    assert httpx.post(f"{live_server}/api/simulate", json={"docs": 2}, timeout=30).status_code == 200
    # Reading is never refused: a cross-site GET cannot change anything.
    assert httpx.get(f"{live_server}/api/presets", headers={"sec-fetch-site": "cross-site"}, timeout=10).status_code == 200


def test_no_page_may_frame_this_one_or_learn_its_addresses(live_server: str) -> None:
    response = httpx.get(f"{live_server}/", timeout=10)
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "same-origin"
    docs = httpx.get(f"{live_server}/docs", timeout=10)  # its own CSP (an inline script's hash) keeps the rule
    assert "frame-ancestors 'none'" in docs.headers["content-security-policy"]


def test_the_guards_own_refusals_carry_the_same_headers(live_server: str) -> None:
    # The refusals are this server's pages too (a 401 is what a browser shows): no framing, no sniffing, no referrer.
    port = live_server.rsplit(":", 1)[1]
    refusals = [
        httpx.get(f"{live_server}/", headers={"host": f"evil.example:{port}"}, timeout=10),  # 400: a foreign Host
        httpx.post(f"{live_server}/ui/run", data={}, headers={"origin": "http://evil.example"}, timeout=10),  # 403
        httpx.post(f"{live_server}/api/simulate", content=b" " * (2 * 2**20 + 1), headers={"content-type": "application/json"}, timeout=10),  # 413
    ]
    for response in refusals:
        assert response.status_code in (400, 403, 413), response.text
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"], response.status_code
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "same-origin"
        assert response.headers["x-content-type-options"] == "nosniff"


def test_with_a_token_every_request_but_healthz_needs_it(live_server_factory: Callable[..., AbstractContextManager[str]]) -> None:
    with live_server_factory("--auth-token", "s3cret") as url:
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200  # the container's health check
        refused = httpx.get(f"{url}/api/presets", timeout=10)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        assert httpx.get(f"{url}/api/presets", headers={"authorization": "Bearer wrong"}, timeout=10).status_code == 401
        assert httpx.get(f"{url}/api/presets", headers={"authorization": "Bearer s3cret"}, timeout=10).status_code == 200
        # The page: one visit with ?token= sets a cookie and takes the token out of the address.
        visit = httpx.get(f"{url}/?token=s3cret", timeout=10)
        assert visit.status_code == 303 and visit.headers["location"] == "/"
        assert "HttpOnly" in visit.headers["set-cookie"] and "SameSite=Strict" in visit.headers["set-cookie"]
        with httpx.Client(base_url=url, cookies=visit.cookies, timeout=10) as browser:
            assert browser.get("/").status_code == 200
            assert browser.post("/api/simulate", json={"docs": 2}).status_code == 200


def _location_of_visit(url: str, target: str) -> str:
    """The Location answered to ``GET TARGET`` sent byte for byte (httpx would normalise some targets)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    assert head[0].startswith("HTTP/1.1 303"), head
    return next(line.split(":", 1)[1].strip() for line in head if line.lower().startswith("location:"))


def test_the_token_visit_redirects_only_to_a_path_on_this_server(live_server_factory: Callable[..., AbstractContextManager[str]]) -> None:
    with live_server_factory("--auth-token", "s3cret") as url:
        # Each target, redirected to itself without the token, was a scheme-relative address to evil.example:
        # "//evil.example/" as such, "/\\evil.example/" because browsers read a backslash as a slash in http URLs.
        # One leading slash makes each a path here; a percent-encoded slash stays encoded (a path, too).
        cases = {
            "//evil.example/?token=s3cret": "/evil.example/",
            "///evil.example/x?token=s3cret&a=1": "/evil.example/x?a=1",
            "/\\evil.example/?token=s3cret": "/evil.example/",
            "/%2F%2Fevil.example/?token=s3cret": "/%2F%2Fevil.example/",
            "/runs?token=s3cret": "/runs",  # an ordinary page keeps its path
        }
        for target, location in cases.items():
            assert _location_of_visit(url, target) == location, target
            # And a browser resolving it stays on this server.
            assert urljoin(f"{url}/", location).startswith(f"{url}/"), location


def test_the_allow_list_follows_the_bind_address() -> None:
    assert allowed_hosts_for("127.0.0.1", ()) == "127.0.0.1,localhost,::1"
    assert allowed_hosts_for("10.0.0.5", ("kv.example",)) == "kv.example,10.0.0.5,localhost,127.0.0.1,::1"
    # Bound to every interface, clients reach it by names the server cannot know: any, unless given.
    assert allowed_hosts_for("0.0.0.0", ()) == "*"
    assert allowed_hosts_for("0.0.0.0", ("kv.example",)) == "kv.example,localhost,127.0.0.1,::1"
    assert [host_name(h) for h in ("127.0.0.1:8000", "[::1]:8000", "LOCALHOST", "::1")] == ["127.0.0.1", "::1", "localhost", "::1"]
