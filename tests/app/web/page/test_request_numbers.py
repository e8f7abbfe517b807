"""One number per request: the JSON's ``seq`` (from 0, DESIGN.md's contract), the CLI's ``--request``, explain's
words, and the page's event log, why-card, lanes and player (real uvicorn, real Chromium) all name it alike.

The seed lab reads 10 documents per pass, so pass 1 is seq 0..9 and doc 0's pass-2 request is seq 10. In pass 1 the
GPU (21,504 tokens = 4.28 prompts) lost doc 0's blocks to the requests for docs 4 and 5, which are seq 4 and 5
(tests/test_explain.py derives it).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from playwright.sync_api import Page, expect
from test_page import DONE, open_dashboard

from app.cli import main

SEQ = 10  # doc 0, pass 2


def test_json_and_cli_agree_on_the_number() -> None:
    out = CliRunner().invoke(main, ["simulate", "--preset", "seed-lab", "--json", "--no-save"]).output
    rec = json.loads(out)["runs"][0]["requests"][SEQ]
    assert (rec["seq"], rec["pass"], rec["doc"]) == (SEQ, 2, 0)
    out = CliRunner().invoke(main, ["explain", "--preset", "seed-lab", "--request", str(SEQ)]).output
    assert out.startswith(f"doc 0, pass 2 (request {SEQ}), run gpu:"), out


@pytest.mark.browser
def test_the_page_names_a_request_by_its_seq(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server)
    page.click("button[data-action=step]")
    # The first request played is seq 0; one request of 30 has been played.
    expect(page.locator("#player-status")).to_contain_text("Request 0 (1 of 30)")
    expect(page.locator('.lane[data-run="gpu"] [data-role=now]')).to_contain_text("Request 0 ·")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)
    line = page.locator(f'#event-log li[data-run="gpu"][data-seq="{SEQ}"]')
    expect(line).to_contain_text(f"req {SEQ} · pass 2 · doc 0")
    line.click()
    card = page.locator("#explain-detail")
    expect(card).to_contain_text(f"req {SEQ} · gpu: doc 0, pass 2")
    expect(card).to_contain_text("evicted from GPU by req 4, req 5")
    # The TTFT chart's x is the seq too: the run's points at 0..29.
    xs = page.evaluate("document.getElementById('ttft-chart').data.find(t => t.meta === 'run').x")
    assert list(xs) == list(range(30))
