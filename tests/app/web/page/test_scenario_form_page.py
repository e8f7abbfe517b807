"""The sidebar's "More settings" in headless Chromium: the scenario fields beyond the main ones, end to end.

Expected values come from the seed's arithmetic: 10 documents of 5,011 tokens and a 13-token question, 16-token
GPU blocks.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from sim.tiers.chunk_store import CPU_BACKENDS
from sim.workloads.scenario import MAX_DOC_TOKENS

pytestmark = pytest.mark.browser

DONE = "#player-status[data-state=done]"


def open_dashboard(page: Page, url: str) -> None:
    page.goto(url + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.select_option("#speed", "max")


def cell(page: Page, run: str, number: int, col: str) -> str:
    return page.inner_text(f'#results-table tr[data-run="{run}"][data-pass="{number}"] [data-col={col}]').strip()


def test_a_shared_prefix_hits_on_the_gpu_from_the_second_request(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server)
    more = page.locator("#more-settings")
    prefix = page.locator("#f-shared-prefix-tokens")
    expect(prefix).to_be_hidden()  # collapsed until opened
    page.focus("#more-settings summary")
    page.keyboard.press("Enter")  # opened from the keyboard
    expect(prefix).to_be_visible()
    expect(prefix).to_have_value("0")  # the preset's: no system prompt
    expect(prefix).to_have_attribute("min", "0")
    expect(prefix).to_have_attribute("max", str(MAX_DOC_TOKENS))
    prefix.fill("512")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)

    # Prompts are 512 + 5,011 + 13 = 5,536 tokens. The system prompt is 32 whole blocks that every request touches,
    # so they stay the most recently used and are never evicted; after the first request of pass 1, each of the
    # other nine finds them and misses at the document's first block: 9 x 512 = 4,608 tokens hit on the GPU, and
    # 10 x 5,536 - 4,608 = 50,752 computed. Without the prefix, pass 1 hits nothing.
    assert cell(page, "gpu", 1, "gpu-hit") == "4,608"
    assert cell(page, "gpu", 1, "computed") == "50,752"
    assert cell(page, "gpu+cpu", 1, "gpu-hit") == "4,608"
    expect(more).to_have_attribute("open", "")  # still open after the run redrew the fields
    expect(prefix).to_have_value("512")


def test_an_error_under_more_settings_opens_it_beside_the_field(
    page: Page, live_server: str, expected_console_errors: list[str]
) -> None:
    expected_console_errors.append("status of 422")
    open_dashboard(page, live_server)
    page.click("#more-settings summary")
    page.fill("#f-question-tokens", "-1")
    page.click("#more-settings summary")  # closed again before Run
    expect(page.locator("#f-question-tokens")).to_be_hidden()
    page.click("button[data-action=run]")
    expect(page.locator("#f-question-tokens-error")).to_contain_text("greater than or equal to 0")
    expect(page.locator("#f-question-tokens")).to_be_visible()
    expect(page.locator("#player-status")).to_have_attribute("data-state", "idle")  # nothing ran


def test_more_settings_stay_open_across_presets_and_take_their_values(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server)
    page.click("#more-settings summary")
    page.select_option("#f-preset", "three-tiers")
    expect(page.locator("#f-docs")).to_have_value("20")  # the fields were swapped for the preset's
    expect(page.locator("#more-settings")).to_have_attribute("open", "")
    expect(page.locator("#f-disk-gb")).to_be_visible()
    assert float(page.input_value("#f-disk-gb")) > 0  # three-tiers is the preset with a disk tier
    page.select_option("#f-preset", "seed-lab")
    expect(page.locator("#f-disk-gb")).to_have_value("")  # the seed lab has none


def test_gpu_policy_mru_hits_where_lru_gets_nothing(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server)
    page.click("#more-settings summary")
    expect(page.locator("#f-gpu-policy option")).to_have_text(["lru", "fifo", "mru", "belady"])
    page.select_option("#f-gpu-policy", "mru")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)
    # Under LRU a same-order re-read evicts each document just before it is asked for (pass 2 hits 0, as
    # test_page.py checks). MRU evicts the most recently freed blocks: prompts are 5,024 tokens = 314 blocks, the GPU
    # holds 1,344, so docs 0-3 fill 1,256 and every later document evicts the one read just before it; docs 0, 1
    # and 2 stay whole. Pass 2's first request (doc 0) hits all of its blocks but the last token's: 313 x 16 = 5,008
    # tokens; no request can hit more than that.
    hits = int(cell(page, "gpu", 2, "gpu-hit").replace(",", ""))
    assert 5_008 <= hits <= 10 * 5_008


def test_a_tier_behind_the_cpu_gets_its_own_lane_and_table_column(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server)
    page.click("#more-settings summary")
    # The backends offered are the scenario's definition, not a list in the template.
    options = page.eval_on_selector_all("#f-cpu-backend option", "els => els.map(e => e.value)")
    assert options == list(CPU_BACKENDS)
    page.fill("#f-cpu-gb", "0.5")
    page.fill("#f-storage-tiers", "remote:2")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=60_000)
    lane = page.locator('.lane[data-run="gpu+cpu+remote"]')
    expect(lane.locator(".tier")).to_have_count(3)
    expect(lane.locator('.tier[data-tier="remote"] .tier-name')).to_have_text("remote")
    # 0.5 GiB / 28,672 B = 18,724 tokens: 73 chunks, under 4 documents of 19; remote holds 2 GiB,
    # all ten. Pass 2 rereads forward: the GPU and the CPU hold only the documents read last
    # (the next one needed is never among them), so every document loads its 19 chunks from
    # remote: 10 x 4,864 = 48,640 tokens, none from the CPU.
    assert cell(page, "gpu+cpu+remote", 2, "remote-hit") == "48,640"
    assert cell(page, "gpu+cpu+remote", 2, "cpu-hit") == "0"
    assert cell(page, "gpu+cpu", 2, "remote-hit") == "0"


def test_vllm_native_is_offered_under_more_settings_and_runs(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server)
    page.click("#more-settings summary")
    expect(page.locator('#f-cpu-backend option[value="vllm-native"]')).to_have_count(1)
    page.select_option("#f-cpu-backend", "vllm-native")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=60_000)
    # seed-lab under vLLM's native offloading: 16-token offload blocks of 16 x 28,672 = 458,752 bytes (112
    # whole pages), so 1.5 GiB holds 3,510 of them. Pass 1 stores each prompt's 314 full blocks (3,140);
    # pass 2 reads each document's 313 blocks (5,008 tokens) from the GPU or, beyond the GPU's hit, from the
    # CPU, which evicted nothing; only the last block, holding the pass's new question, is computed:
    # 10 x 16 = 160 tokens. (LMCache's 256-token chunks serve 4,864 tokens of each document.)
    gpu = int(cell(page, "gpu+cpu", 2, "gpu-hit").replace(",", ""))
    cpu = int(cell(page, "gpu+cpu", 2, "cpu-hit").replace(",", ""))
    assert gpu + cpu == 50_080
    assert cell(page, "gpu+cpu", 2, "computed") == "160"
    expect(page.locator("#f-cpu-backend")).to_have_value("vllm-native")
