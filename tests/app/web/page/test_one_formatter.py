"""One way of writing a figure: each rounded once, from the exact value, in the CLI's tables, the page's table, the
kept runs' comparison and the browser's formatter alike (real uvicorn, real Chromium).

The seed lab's gpu+cpu pass 3 has an exact mean of 39.4496 ms (the mean of its ten TTFTs, each to the microsecond):
to one decimal that is 39.4. Rounded to the microsecond first it was 39.450, and then 39.5 in the CLI and the
comparison while the page read 39.4.
"""

from __future__ import annotations

import json
import re
import subprocess
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import httpx
import pytest
from live_servers import KVSCOPE, ROOT
from playwright.sync_api import Page
from test_page import DONE, cell, open_dashboard


def kvscope(*args: str) -> str:
    done = subprocess.run([*KVSCOPE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def one_decimal(value: float) -> str:
    """The exact binary value to one decimal, ties to even, by decimal arithmetic (no float formatting)."""
    return f"{Decimal(value).quantize(Decimal('0.1'), rounding=ROUND_HALF_EVEN):,}"


def pass3_mean(result: dict) -> float:
    run = next(r for r in result["runs"] if r["name"] == "gpu+cpu")
    return next(p["mean_ms"] for p in run["passes"] if p["pass"] == 3)


def test_the_cli_and_the_comparison_write_the_exact_mean_rounded_once(tmp_path: Path) -> None:
    result = json.loads(kvscope("simulate", "--preset", "seed-lab", "--json", "--no-save"))
    run = next(r for r in result["runs"] if r["name"] == "gpu+cpu")
    ttfts = [r["ttft_ms"] for r in run["requests"] if r["pass"] == 3]
    # The JSON carries the exact mean of the records, not one rounded to the microsecond (39.45).
    assert pass3_mean(result) == pytest.approx(sum(ttfts) / len(ttfts), abs=1e-9)
    assert pass3_mean(result) == pytest.approx(39.4496, abs=1e-9)
    want = one_decimal(pass3_mean(result))
    assert want == "39.4"
    row = next(line for line in kvscope("simulate", "--preset", "seed-lab", "--no-save").splitlines()
               if line.startswith("gpu+cpu  3 reverse"))
    assert row.split()[4] == want  # config, pass, order, p50, mean
    # Kept, then shown and compared with itself: the comparison recomputes the summaries from the records.
    db = str(tmp_path / "runs.db")
    saved = tmp_path / "sim.json"
    saved.write_text(json.dumps(result))
    kvscope("runs", "--db", db, "import", str(saved))
    shown = next(line for line in kvscope("runs", "--db", db, "show", "1").splitlines() if line.startswith("gpu+cpu  3 reverse"))
    assert shown.split()[5] == want  # config, pass, order, n, p50, mean
    diffed = next(line for line in kvscope("runs", "--db", db, "diff", "1", "1").splitlines() if line.startswith("gpu+cpu  3 reverse"))
    assert want in diffed.split()


@pytest.mark.browser
def test_the_browser_rounds_as_python_does(page: Page, live_server: str) -> None:
    """Ties as the decimal numbers a reader sees (39.45, 581.25): 581.25 is exact in binary, a true tie, to the even
    581.2; 39.45 is 39.4500000000000028... in binary, above the tie, so 39.5; likewise 2.675 is below its tie."""
    open_dashboard(page, live_server)
    values = [39.45, 581.25, 0.05, 0.25, 2.675, 1.15, 48.35, 1234.56, 39.4496]
    got = page.evaluate("vs => vs.map(v => window.kvscope.format.ms(v))", values)
    assert got == [one_decimal(v) for v in values]


@pytest.mark.browser
def test_the_page_table_and_the_kept_comparison_agree(page: Page, tmp_path: Path, live_server_factory) -> None:
    with live_server_factory("--db", str(tmp_path / "runs.db")) as url:
        open_dashboard(page, url)
        page.click("button[data-action=run]")
        page.wait_for_selector(DONE, timeout=60_000)
        assert cell(page, "gpu+cpu", 3, "mean") == "39.4"
        run_id = httpx.get(f"{url}/api/runs").json()[0]["id"]
        html = httpx.get(f"{url}/ui/runs/compare", params={"a": run_id}).text
        row = re.search(r'<tr data-config="gpu\+cpu" data-pass="3".*?</tr>', html, re.S)
        assert row is not None, html[:500]
        cells = re.findall(r'<td class="num">([^<]*)</td>', row.group(0))
        assert cells[2] == "39.4", cells  # n, p50, mean
