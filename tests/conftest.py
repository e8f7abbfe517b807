"""Shared fixtures: ``kvscope serve`` in a subprocess on a free loopback port, and headless Debian Chromium.

- ``live_server``: one server for the session; its base URL, e.g. ``http://127.0.0.1:40123``.
- ``live_server_factory``: ``with live_server_factory("--some-flag") as url:`` a server of your own (own
  counters, own flags), stopped when the block ends.
- ``chromium``: one browser per test module; ``page``: a fresh page that fails the test on any page error or
  console error (a CSP violation, a 404, an exception in a script).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from live_servers import ROOT, serve_process

# Tests never touch the user's runs database: every server, CLI run and in-process app keeps runs in memory unless a
# test names a temporary file itself; and the data directory points at a throwaway folder in case anything asks it.
os.environ["KVSCOPE_DB"] = ":memory:"
os.environ["XDG_DATA_HOME"] = str(ROOT / "test-artifacts" / "xdg-data")
for _name in ("KVSCOPE_KEEP_RUNS", "KVSCOPE_DB_MAX_MB"):
    os.environ.pop(_name, None)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
ARTIFACTS = ROOT / "test-artifacts"


@contextmanager
def serve(*args: str) -> Iterator[str]:
    """``kvscope serve --host 127.0.0.1 --port FREE ARGS``; yields the base URL and always stops the server."""
    with serve_process(*args) as (url, _):
        yield url


@pytest.fixture(scope="session")
def live_server() -> Iterator[str]:
    with serve() as url:
        yield url


@pytest.fixture(scope="session")
def live_server_factory() -> Callable[..., AbstractContextManager[str]]:
    return serve


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    # Per module, not per session: sync Playwright keeps an event loop running in this thread until it stops,
    # and later modules' asyncio.run() would fail.
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture()
def expected_console_errors() -> list[str]:
    """Append a regular expression for each console error a test provokes on purpose (e.g. ``"status of 422"``)."""
    return []


@pytest.fixture()
def page(chromium: Browser, expected_console_errors: list[str]) -> Iterator[Page]:
    context = chromium.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}") if msg.type == "error" else None)
    yield page
    context.close()
    assert [p for p in problems if not any(re.search(e, p) for e in expected_console_errors)] == []


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where tests leave screenshots for a human to look at (gitignored)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
