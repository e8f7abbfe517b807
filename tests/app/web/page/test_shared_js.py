"""The page's scripts share their pieces instead of each writing its own: one number formatter
(static/js/format.js), which writes numbers as the server's template filters do, and one intake of event streams
(static/js/stream.js)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page

from app.web.context import ms, times, tokens
from live_servers import ROOT

JS = ROOT / "static" / "js"


def test_numbers_are_formatted_in_one_module() -> None:
    # A locale-dependent formatter anywhere else is a second way of writing a number (and toLocaleString() without a
    # locale writes 21.504 in a German browser).
    found = {f.name for f in JS.glob("*.js") if re.search(r"toLocaleString|Intl\.NumberFormat", f.read_text())}
    assert found == {"format.js"}, found


def test_event_streams_are_read_in_one_module() -> None:
    # Opening a stream (EventSource) or taking htmx's SSE messages anywhere else is a second reader of the same events.
    found = {f.name for f in JS.glob("*.js") if re.search(r"EventSource\(|htmx:sse:before:message", f.read_text())}
    assert found == {"stream.js"}, found


@pytest.mark.browser
def test_the_page_writes_numbers_as_the_server_does(page: Page, live_server: str) -> None:
    page.goto(live_server + "/")
    page.wait_for_function("() => window.kvscope && window.kvscope.format")
    # 581.25, 0.125 and 2.5 are ties in binary too: both round to the even digit, as Python's format() does. (A tie
    # only in decimal, 0.15, is 0.1499... in binary to Python and 0.15 to the browser: one digit apart, left as is.)
    values = [0, 5, 50240, 1234.56, 0.966, 11.747, 581.25, 0.125, 2.5, None]
    js = page.evaluate("(vs) => vs.map((v) => ['count', 'ms', 'times'].map((f) => window.kvscope.format[f](v)))", values)
    py = [[tokens(v), ms(v), times(v)] for v in values]
    assert js == py
