"""Live targets: named server URLs, given only at start-up (``--target NAME=URL`` or ``KVSCOPE_TARGETS``).

Only ``http`` and ``https`` URLs with a host are accepted. Names are what the
browser and the measurement file see; the dashboard's API takes names only,
so nothing a browser sends can make the server contact another address.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

ENV_VAR = "KVSCOPE_TARGETS"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+_.-]{0,39}$")
DEFAULT_NAME = "gpu"


class TargetSpecError(ValueError):
    """A target could not be accepted; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Target:
    """A server live mode may contact: its name (a run name, e.g. ``gpu`` or ``gpu+cpu``) and base URL."""

    name: str
    url: str

    @property
    def has_cpu_tier_name(self) -> bool:
        """Run names follow the product's convention: ``gpu+cpu`` has a CPU tier, ``gpu`` has not."""
        return "cpu" in self.name.lower().split("+")


def parse_target(text: str, default_name: str = DEFAULT_NAME) -> Target:
    """``NAME=URL`` or a bare ``URL`` (named ``default_name``)."""
    text = text.strip()
    name, sep, url = text.partition("=")
    if not sep or "://" in name:
        name, url = default_name, text
    name, url = name.strip(), url.strip()
    if not NAME_RE.match(name):
        raise TargetSpecError(
            f"target name {name!r}: use 1-40 letters, digits and + _ . - (starting with a letter or digit)"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise TargetSpecError(f"target {name}: {url!r} is not an http:// or https:// URL")
    if not parts.hostname:
        raise TargetSpecError(f"target {name}: {url!r} has no host")
    if parts.query or parts.fragment:
        raise TargetSpecError(f"target {name}: {url!r} must be a base URL, without ?query or #fragment")
    try:
        parts.port
    except ValueError:
        raise TargetSpecError(f"target {name}: {url!r} has an invalid port") from None
    return Target(name, url.rstrip("/"))


def parse_targets(texts: Iterable[str]) -> list[Target]:
    """Several targets; names must be unique. A lone bare URL is named ``gpu``; several need names."""
    items = [t for t in texts if t.strip()]
    targets: list[Target] = []
    for i, text in enumerate(items):
        target = parse_target(text, DEFAULT_NAME if len(items) == 1 else f"target{i + 1}")
        if any(t.name == target.name for t in targets):
            raise TargetSpecError(f"target name {target.name!r} is given twice")
        targets.append(target)
    return targets


def targets_from_env(value: str | None) -> list[Target]:
    """``KVSCOPE_TARGETS``: comma-separated ``NAME=URL`` items."""
    if not value:
        return []
    return parse_targets(value.split(","))


def env_value(targets: Iterable[Target]) -> str:
    """The ``KVSCOPE_TARGETS`` value naming ``targets``."""
    return ",".join(f"{t.name}={t.url}" for t in targets)


def configured_targets() -> tuple[Target, ...]:
    """The targets of this process, from ``KVSCOPE_TARGETS`` (``kvscope serve --target`` sets it); raises on a bad one."""
    return tuple(targets_from_env(os.environ.get(ENV_VAR)))
