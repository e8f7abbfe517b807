"""``kvscope emulate --kv-events``: the flags that make the emulator publish KV events as vLLM does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import zmq

from app.emulator.backend import Backend
from app.emulator.kv_events import attach
from sim.kvevents.endpoints import EndpointError, check_endpoint


def kv_events_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--kv-events-topic", default="kv-events", show_default=True, help="topic of every message")(f)
    f = click.option(
        "--kv-events-replay", default=None, metavar="tcp://HOST:PORT",
        help="also answer replay requests here (vLLM's replay_endpoint)",
    )(f)
    return click.option(
        "--kv-events", default=None, metavar="tcp://HOST:PORT",
        help="publish KV events here in vLLM's format (its --kv-events-config endpoint)",
    )(f)


def publish_kv_events(backend: Backend, endpoint: str | None, replay: str | None, topic: str) -> None:
    """Bind the publisher if asked; a bad or busy endpoint exits 2 naming its flag."""
    if endpoint is None:
        if replay is not None:
            raise click.BadParameter("needs --kv-events as well", param_hint="--kv-events-replay")
        return
    for flag, value in (("--kv-events", endpoint), ("--kv-events-replay", replay)):
        if value is not None:
            try:
                check_endpoint(value, bind=True)
            except EndpointError as exc:
                raise click.BadParameter(str(exc), param_hint=flag) from None
    try:
        attach(backend, endpoint, replay, topic)
    except zmq.ZMQError as exc:
        raise click.BadParameter(f"cannot bind {endpoint} / {replay}: {exc}", param_hint="--kv-events") from None
    where = endpoint + (f", replay on {replay}" if replay else "")
    click.echo(f"publishing KV events on {where} (topic {topic!r})", err=True)
