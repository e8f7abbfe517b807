"""``kvscope serve --upstream``: the servers the OpenAI proxy forwards to, and their KV event publishers."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from app.live.targets import TargetSpecError
from app.proxy.upstreams import (
    DEFAULT_TIMEOUT_S,
    ENV_VAR,
    MAX_TIMEOUT_S,
    MIN_TIMEOUT_S,
    TIMEOUT_ENV_VAR,
    TOKEN_ENV_VAR,
    configured_timeout,
    configured_upstreams,
    env_values,
    parse_timeout,
    parse_upstreams,
)


def upstream_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--upstream-timeout", "upstream_timeout", default=None, metavar="SECONDS",
        help=f"how long the proxy waits for an upstream's next bytes, before its answer and mid-answer "
             f"({MIN_TIMEOUT_S:g} to {MAX_TIMEOUT_S:g}; default {DEFAULT_TIMEOUT_S:g}; replaces ${TIMEOUT_ENV_VAR})",
    )(f)
    f = click.option("--upstream-token", "upstream_tokens", multiple=True, metavar="NAME=TOKEN",
                     help=f"the bearer token to send an upstream (vLLM's --api-key) in place of the client's "
                          f"(replaces ${TOKEN_ENV_VAR})")(f)
    f = click.option("--kv-events-replay", "kv_replay", multiple=True, metavar="NAME=tcp://HOST:PORT",
                     help="an upstream's replay endpoint, to fill gaps in its KV events")(f)
    f = click.option("--kv-events", "kv_events", multiple=True, metavar="NAME=tcp://HOST:PORT",
                     help="an upstream's KV event publisher (vLLM's --kv-events-config endpoint)")(f)
    return click.option(
        "--upstream", "upstreams", multiple=True, metavar="NAME=URL",
        help=f"proxy /v1/completions, /v1/chat/completions and /v1/models to this server and watch it (replaces ${ENV_VAR})",
    )(f)


def configure_upstreams(
    urls: tuple[str, ...], kv_events: tuple[str, ...], kv_replay: tuple[str, ...], timeout: str | None = None,
    tokens: tuple[str, ...] = (),
) -> None:
    """Check the upstreams and the proxy's timeout before serving and hand them to the app through the environment."""
    try:
        if timeout is not None:
            os.environ[TIMEOUT_ENV_VAR] = str(parse_timeout(timeout))
        else:
            configured_timeout()
    except TargetSpecError as exc:
        if timeout is not None:
            raise click.BadParameter(str(exc), param_hint="--upstream-timeout") from None
        raise click.UsageError(f"{TIMEOUT_ENV_VAR}: {exc}") from None
    try:
        if urls:
            os.environ.update(env_values(parse_upstreams(urls, kv_events, kv_replay, tokens)))
        elif kv_events or kv_replay or tokens:
            flag = "--kv-events" if kv_events else "--kv-events-replay" if kv_replay else "--upstream-token"
            raise click.BadParameter("name the upstream with --upstream NAME=URL too", param_hint=flag)
        else:
            configured_upstreams()
    except TargetSpecError as exc:
        if urls:
            raise click.BadParameter(str(exc), param_hint="--upstream") from None
        raise click.UsageError(f"{ENV_VAR}: {exc}") from None
