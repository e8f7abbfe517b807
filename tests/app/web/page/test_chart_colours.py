"""The page's charts in headless Chromium keep each colour to its meaning: a configuration's, a tier's or source's and a
cause's colours (static/css/palette.css) appear only on series that are that configuration, tier, source or cause;
passes, the advisor's front and candidates, marked capacities and targets borrow none of them; every series is named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from live_servers import ROOT
from page_tour import compare_two_runs, open_view, run_seed_lab, seed_file  # noqa: F401 (a fixture: the seed lab as a measurement file)
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

# The colours that mean something: a configuration (--run-N and its ink), a tier or source, a cause.
MEANINGS = re.findall(r"--((?:run-\d(?:-ink)?|source-[\w-]+|cause-[\w-]+)):", (ROOT / "static" / "css" / "palette.css").read_text())

# Every chart on the page: each trace's name, its colours (line, marker, marker edge) as #rrggbb, and the colours of
# the chart's drawn lines and labels (layout shapes and annotations), which are never a configuration either.
CHARTS = """(meanings) => {
  const ctx = document.createElement("canvas").getContext("2d");
  const hex = (c) => { ctx.fillStyle = "#010203"; ctx.fillStyle = c; return ctx.fillStyle.toLowerCase(); };
  const root = getComputedStyle(document.documentElement);
  const meaning = Object.fromEntries(meanings.map((m) => [hex(root.getPropertyValue(`--${m}`).trim()), m]));
  const colours = (...cs) => cs.flat().filter((c) => typeof c === "string" && c !== "transparent").map(hex);
  const { palette } = window.kvscope;
  const causes = [...document.querySelectorAll("[data-causes]")].flatMap((d) => JSON.parse(d.dataset.causes).map((c) => c.label));
  return {
    meaning,
    sources: palette.sources.map((s) => palette.source(s).label),
    causes,
    charts: [...document.querySelectorAll(".js-plotly-plot")].map((div) => ({
      id: div.id,
      traces: (div.data || []).map((t) => ({ name: t.name, colours: colours(t.line?.color, t.marker?.color) })),
      furniture: colours(...(div.layout.shapes || []).map((s) => s.line?.color),
                         ...(div.layout.annotations || []).map((a) => a.font?.color)),
    })),
  };
}"""

# A series may wear a meaning's colour when it is that meaning: named by a configuration ("gpu", "gpu+cpu", "run a ·
# gpu+cpu", "gpu measured"), by a tier ("GPU hit ratio", the replay's "mostly loaded from CPU"), a source or a cause.
CONFIG = re.compile(r"(^|· )gpu(\+[a-z0-9]+)*( |$)")
TIER = re.compile(r"^(GPU|CPU|disk)\b|^mostly ", re.IGNORECASE)  # "Disk hit ratio" as sim.engine.events names the tier


def misused(page: Page) -> list[str]:
    got = page.evaluate(CHARTS, MEANINGS)
    assert len(got["meaning"]) >= 4 + 4 + 4, got["meaning"]  # the check sees the palette's meanings
    wrong = []
    for chart in got["charts"]:
        for t in chart["traces"]:
            if not isinstance(t["name"], str) or not t["name"].strip():
                wrong.append(f"{chart['id']}: a series without a legend name")
                continue
            name = t["name"]
            means = CONFIG.search(name) or TIER.search(name) or name in got["sources"] or name in got["causes"]
            wrong += [f"{chart['id']}: {name!r} wears {got['meaning'][c]}" for c in t["colours"] if c in got["meaning"] and not means]
        wrong += [f"{chart['id']}: a line or label wears {got['meaning'][c]}" for c in chart["furniture"] if c in got["meaning"]]
    return wrong


def test_no_series_borrows_a_configurations_tiers_or_causes_colour(live_server: str, page: Page, seed_file: Path) -> None:
    """Passes on the capacity curves were drawn in the gpu+cpu blue and the CPU-load orange, the advisor's front and
    candidates likewise, and the thresholds in the configurations' vermillion, blue and green."""
    drawn: set[str] = set()
    wrong: list[str] = []

    def read_view() -> None:
        # Each view holds its own charts (the nav swaps the page's body): read them before leaving it.
        drawn.update(page.evaluate("[...document.querySelectorAll('.js-plotly-plot')].map((d) => d.id)"))
        wrong.extend(misused(page))

    run_seed_lab(page, live_server, 1440, 900)
    read_view()
    open_view(page, "replay")
    page.click("#replay-form button[type=submit]")
    page.wait_for_selector("#replay[data-state=done]", timeout=60_000)
    read_view()
    open_view(page, "plan")
    page.set_input_files("#measure-file", str(seed_file))
    page.click("#measure-form button[type=submit]")
    expect(page.locator("#versus-passes")).to_be_visible(timeout=60_000)
    page.wait_for_selector("#versus-chart .main-svg")
    page.fill("#capacity-points", "8")
    page.click("#capacity-form button[type=submit]")
    page.wait_for_selector("#capacity-ttft .main-svg", timeout=60_000)
    page.fill("#advise-points", "3")
    page.click("#advise-form button[type=submit]")
    page.wait_for_selector("#advise-result .main-svg", timeout=90_000)
    read_view()
    open_view(page, "runs")
    compare_two_runs(page)
    read_view()
    # Every chart of a seed-lab session is read (the live and watch charts need servers of their own: test_watch_page).
    assert {"ttft-chart", "causes-chart", "replay-hit-chart", "replay-ttft-chart", "measure-chart", "versus-chart",
            "capacity-hits", "capacity-ttft", "advise-pareto", "runs-compare-chart"} <= drawn, drawn
    assert wrong == []
