"""Upstreams: the servers ``kvscope serve`` forwards OpenAI requests to, named at start-up only.

``--upstream NAME=URL`` (or ``KVSCOPE_UPSTREAM``, comma-separated) takes URLs
as live targets do (``app.live.targets.parse_target``: http or https, a host,
no query); ``--kv-events NAME=tcp://HOST:PORT`` (``KVSCOPE_UPSTREAM_KV_EVENTS``)
and ``--kv-events-replay NAME=tcp://HOST:PORT`` (``KVSCOPE_UPSTREAM_KV_REPLAY``)
attach a server's KV event publisher; ``--upstream-token NAME=TOKEN``
(``KVSCOPE_UPSTREAM_TOKEN``) is the bearer token kvscope sends that upstream
(a vLLM started with ``--api-key``), in place of any the client sent;
``--upstream-timeout SECONDS``
(``KVSCOPE_UPSTREAM_TIMEOUT``) is how long the proxy waits for an upstream's
next bytes, before its answer starts and mid-answer. Requests name upstreams,
never addresses: nothing a client sends can make kvscope contact another one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from app.live.targets import NAME_RE, TargetSpecError, parse_targets
from sim.kvevents.endpoints import EndpointError, check_endpoint

ENV_VAR = "KVSCOPE_UPSTREAM"
KV_ENV_VAR = "KVSCOPE_UPSTREAM_KV_EVENTS"
REPLAY_ENV_VAR = "KVSCOPE_UPSTREAM_KV_REPLAY"
TOKEN_ENV_VAR = "KVSCOPE_UPSTREAM_TOKEN"
TIMEOUT_ENV_VAR = "KVSCOPE_UPSTREAM_TIMEOUT"
DEFAULT_TIMEOUT_S = 120.0
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.1, 3_600.0


@dataclass(frozen=True, slots=True)
class Upstream:
    """A server to forward to: its name, base URL, its KV event endpoints and the token it wants, if any."""

    name: str
    url: str
    kv_events: str | None = None
    kv_replay: str | None = None
    token: str | None = field(default=None, repr=False)  # a secret: kept out of reprs and logs


def parse_upstreams(
    urls: Iterable[str], kv_events: Iterable[str] = (), kv_replay: Iterable[str] = (), tokens: Iterable[str] = (),
) -> list[Upstream]:
    """``NAME=URL`` items, and ``NAME=tcp://...`` (``NAME=TOKEN``) items naming those upstreams; ``TargetSpecError``
    says what is wrong."""
    targets = parse_targets(urls)
    names = {t.name for t in targets}
    events = _named(kv_events, names, "--kv-events", "tcp://HOST:PORT", check_endpoint)
    replay = _named(kv_replay, names, "--kv-events-replay", "tcp://HOST:PORT", check_endpoint)
    secrets = _named(tokens, names, "--upstream-token", "TOKEN", _token)
    for name in replay:
        if name not in events:
            raise TargetSpecError(f"upstream {name}: a replay endpoint needs --kv-events {name}=tcp://... too")
    return [Upstream(t.name, t.url, events.get(t.name), replay.get(t.name), secrets.get(t.name)) for t in targets]


def _named(
    items: Iterable[str], names: set[str], flag: str, shape: str, check: Callable[[str], str],
) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (i.strip() for i in items if i.strip()):
        name, sep, value = item.partition("=")
        # Never the item itself in a message: a token's is a secret.
        if not sep or not NAME_RE.match(name):
            raise TargetSpecError(f"{flag}: expected NAME={shape}")
        if name not in names:
            raise TargetSpecError(f"{flag}: no upstream is named {name!r}")
        if name in out:
            raise TargetSpecError(f"{flag}: upstream {name!r} is given twice")
        try:
            out[name] = check(value)
        except (EndpointError, ValueError) as exc:
            raise TargetSpecError(f"{flag} {name}: {exc}") from None
    return out


def _token(value: str) -> str:
    # Sent in a header and kept in a comma-separated variable: printable ASCII, no comma, no space.
    if not value or not all("!" <= c <= "~" and c != "," for c in value):
        raise ValueError("a token is printable ASCII without spaces or commas")
    return value


def env_values(upstreams: Iterable[Upstream]) -> dict[str, str]:
    """The environment variables that name ``upstreams`` (how ``kvscope serve`` hands them to the app)."""
    ups = list(upstreams)
    return {
        ENV_VAR: ",".join(f"{u.name}={u.url}" for u in ups),
        KV_ENV_VAR: ",".join(f"{u.name}={u.kv_events}" for u in ups if u.kv_events),
        REPLAY_ENV_VAR: ",".join(f"{u.name}={u.kv_replay}" for u in ups if u.kv_replay),
        TOKEN_ENV_VAR: ",".join(f"{u.name}={u.token}" for u in ups if u.token),
    }


def configured_upstreams() -> tuple[Upstream, ...]:
    """This process's upstreams, from the environment; raises ``TargetSpecError`` on a bad one."""
    urls = os.environ.get(ENV_VAR, "")
    if not urls.strip():
        return ()
    split = lambda var: os.environ.get(var, "").split(",")  # noqa: E731
    return tuple(parse_upstreams(urls.split(","), split(KV_ENV_VAR), split(REPLAY_ENV_VAR), split(TOKEN_ENV_VAR)))


def parse_timeout(value: str | float) -> float:
    """The proxy's read timeout in seconds; ``TargetSpecError`` names the limits when it is out of them."""
    try:
        seconds = float(value)
    except ValueError:
        raise TargetSpecError(f"{value!r} is not a number of seconds") from None
    if not MIN_TIMEOUT_S <= seconds <= MAX_TIMEOUT_S:  # also refuses nan
        raise TargetSpecError(f"{value} s is out of range: {MIN_TIMEOUT_S:g} to {MAX_TIMEOUT_S:g} seconds")
    return seconds


def configured_timeout() -> float:
    """This process's read timeout for upstreams, from the environment; raises ``TargetSpecError`` on a bad one."""
    value = os.environ.get(TIMEOUT_ENV_VAR, "").strip()
    return parse_timeout(value) if value else DEFAULT_TIMEOUT_S
