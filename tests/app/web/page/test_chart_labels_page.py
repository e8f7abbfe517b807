"""Charts speak the reader's words, not the code's: after a run (the three-tier preset, so every source appears) and a
trace replay, no trace name, hover text, axis or chart title holds a code key (snake_case such as gpu_hit or
cpu_block, or "gpu block"), and the CPU and disk loads are named as LMCache users say them: L1 and L2."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page

from page_tour import open_view, run_to_end

pytestmark = pytest.mark.browser

# Every text a chart shows: trace names, hover templates and hover texts (customdata strings), titles of the chart and
# its axes, annotations.
TEXTS = """(id) => { const el = document.getElementById(id); const out = [];
  for (const t of el.data) { out.push(t.name, t.hovertemplate);
    for (const c of (t.customdata || []).flat(2)) if (typeof c === 'string') out.push(c); }
  const l = el.layout; out.push(l.title?.text, l.xaxis?.title?.text, l.yaxis?.title?.text, ...(l.annotations || []).map((a) => a.text));
  return out.filter((s) => typeof s === 'string'); }"""
CODE_KEY = re.compile(r"\b[a-z]+_[a-z_]+\b|\b(gpu|cpu|disk) (block|chunk|hit)s?\b")


def test_no_chart_shows_a_code_key_and_offload_tiers_are_l1_and_l2(page: Page, live_server: str) -> None:
    run_to_end(page, live_server, "/?scenario=three-tiers")
    texts = {chart: page.evaluate(TEXTS, chart) for chart in ("ttft-chart", "causes-chart")}
    open_view(page, "replay")
    page.click("#replay-form button[type=submit]")
    page.wait_for_function("() => document.getElementById('replay-ttft-chart')?.data", timeout=60_000)
    texts.update({chart: page.evaluate(TEXTS, chart) for chart in ("replay-hit-chart", "replay-ttft-chart")})
    for chart, shown in texts.items():
        assert shown, chart
        # Plotly's own placeholders (%{customdata[0]:,}) are not shown as typed: leave them out.
        keys = [m.group(0) for s in shown for m in CODE_KEY.finditer(re.sub(r"%\{[^}]*\}", "", s))]
        assert not keys, (chart, keys)
    # The TTFT chart's hover: a request loaded mostly from CPU or from disk names LMCache's tier.
    ttft = " ".join(texts["ttft-chart"])
    assert "LMCache L1, local CPU" in ttft and "LMCache L2, local disk" in ttft, ttft[:500]
