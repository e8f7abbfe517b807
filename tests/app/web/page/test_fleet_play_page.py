"""The Fleet view plays its run in headless Chromium: a position through the requests in arrival order, Step one
arrival at a time, each replica's bars what its tiers hold then, the replica each request is routed to outlined."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from app.web.views import BY_NAME
from test_accessibility import violations

pytestmark = pytest.mark.browser

# The seed lab's documents (5,011 tokens and a 13-token question: 5,024-token prompts, 314 full 16-token blocks) cut
# to three, read forward twice: requests 0-5 ask for documents 0, 1, 2, 0, 1, 2. A closed loop of one: request k
# arrives when request k - 1 has finished, its blocks left cached. Round-robin over two replicas sends request k to
# replica k mod 2: replica 0 serves requests 0, 2, 4 (documents 0, 2, 1), replica 1 requests 1, 3, 5 (1, 0, 2).
# A document on a replica's GPU is its 314 blocks, 5,024 tokens; in its CPU tier its 19 full 256-token chunks, 4,864
# tokens (LMCache stores full chunks only). The GPU's 21,520 tokens (1,344 usable blocks, 21,504 tokens) hold three
# documents' 15,072: nothing is evicted.
GPU_DOC, CPU_DOC = 5_024, 4_864


def _serve(page: Page, url: str, untick: tuple[str, ...] = ("affinity",)) -> None:
    """The three documents read twice on two replicas, one request at a time, under the form's routers but
    ``untick``; served and paused."""
    page.goto(url + BY_NAME["fleet"].path)
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.fill("#fleet-replicas", "2")
    page.fill("#fleet-docs", "3")
    page.fill("#fleet-passes", "forward,forward")
    page.fill("#fleet-concurrency", "1")
    for name in untick:
        page.uncheck(f"#fleet-fields input[name=routers][value={name}]")
    page.click("#fleet-form button[type=submit]")
    page.wait_for_selector("#fleet[data-state=done]", timeout=60_000)
    # Serve starts it playing (as Run does in Simulate): paused here, to be moved by hand.
    page.click("#fleet-playback [data-action=pause]")


def _seek(page: Page, position: int) -> None:
    page.fill("#fleet-position", str(position))
    page.dispatch_event("#fleet-position", "input")
    expect(page.locator("#fleet-player-status")).to_have_attribute("data-position", str(position))


def _held(page: Page, replica: int, tier: str) -> dict[int, int]:
    """The documents a replica's tier bar shows, with their tokens (tiles on their way out left aside)."""
    tiles = page.locator(f".fleet-stack:not([hidden]) .fleet-strip[data-replica='{replica}'] .tier[data-tier={tier}] .tile:not(.leaving)")
    return {int(d): int(t) for d, t in tiles.evaluate_all("ts => ts.map(t => [t.dataset.doc, t.dataset.tokens])")}


def _strip(page: Page, replica: int):  # noqa: ANN202
    return page.locator(f".fleet-stack:not([hidden]) .fleet-strip[data-replica='{replica}']")


def test_the_replicas_lanes_change_as_the_run_plays_and_step_advances_one_request(page: Page, live_server: str) -> None:
    _serve(page, live_server)
    status = page.locator("#fleet-player-status")
    _seek(page, 1)  # request 0 arriving: nothing has run yet
    assert _held(page, 0, "gpu") == {} and _held(page, 1, "gpu") == {}
    expect(_strip(page, 0)).to_have_class("fleet-strip routed")
    expect(status).to_contain_text("Request 0 (1 of 6)")
    # Step: one arrival further, request 1 (document 1) routed to replica 1. Replica 0 has served request 0: its GPU
    # holds document 0's blocks, its CPU tier its chunks; replica 1 holds nothing yet.
    page.click("#fleet-playback [data-action=step]")
    expect(status).to_have_attribute("data-position", "2")
    expect(status).to_contain_text("Request 1 (2 of 6)")
    expect(status).to_contain_text("replica 1")
    assert _held(page, 0, "gpu") == {0: GPU_DOC} and _held(page, 0, "cpu") == {0: CPU_DOC}
    assert _held(page, 1, "gpu") == {} and _held(page, 1, "cpu") == {}
    expect(_strip(page, 1)).to_have_class("fleet-strip routed")
    expect(_strip(page, 0)).to_have_class("fleet-strip")
    # The marks of the requests arrived so far are shown, each on its replica's strip; the others wait their turn.
    shown = page.locator(".fleet-stack:not([hidden]) .fleet-mark:not(.ahead)").evaluate_all("ms => ms.map(m => m.dataset.seq)")
    assert sorted(shown) == ["0", "1"], shown
    # Two steps on, request 3 (document 0) arrives and goes to replica 1, whose GPU holds document 1 only, while replica
    # 0 holds documents 0 and 2: it held more of the request (313 blocks, all a 5,024-token prompt may hit) and is
    # marked so.
    page.click("#fleet-playback [data-action=step]")
    assert _held(page, 1, "gpu") == {1: GPU_DOC}
    page.click("#fleet-playback [data-action=step]")
    expect(status).to_have_attribute("data-position", "4")
    assert _held(page, 0, "gpu") == {0: GPU_DOC, 2: GPU_DOC} and _held(page, 1, "gpu") == {1: GPU_DOC}
    expect(_strip(page, 1)).to_have_class("fleet-strip routed")
    expect(_strip(page, 0)).to_have_class("fleet-strip better")
    expect(_strip(page, 0).locator("[data-role=now]")).to_contain_text("5,008 tokens of request 3")
    expect(_strip(page, 0).locator(".tier[data-tier=gpu] [data-role=used]")).to_have_text("10,048")
    # Mid-play, tiles drawn and a route outlined: axe finds nothing serious either.
    assert violations(page) == []
    # Played to its end (the last position: every request served): each replica holds its three documents.
    page.select_option("#fleet-speed", "max")
    page.click("#fleet-playback [data-action=play]")
    expect(status).to_have_attribute("data-state", "done", timeout=10_000)
    expect(status).to_have_attribute("data-position", "7")
    assert _held(page, 0, "gpu") == {0: GPU_DOC, 1: GPU_DOC, 2: GPU_DOC} == _held(page, 1, "gpu")
    expect(page.locator("#fleet-playback [data-action=step]")).to_be_disabled()
    # Back to request 1's arrival: the bars are as they were then, not as they were left.
    _seek(page, 2)
    page.wait_for_timeout(500)  # tiles going out finish leaving
    assert _held(page, 0, "gpu") == {0: GPU_DOC} and _held(page, 1, "gpu") == {}


def test_another_routers_lanes_play_from_the_same_arrival(page: Page, live_server: str) -> None:
    _serve(page, live_server, untick=())  # round-robin and affinity, the form's routers
    _seek(page, 5)  # request 4 (document 1, its second read) arriving
    page.select_option("#fleet-lanes-router", "affinity")
    status = page.locator("#fleet-player-status")
    expect(status).to_have_attribute("data-position", "5")
    # Affinity hashes a request's first blocks, which are its document's: every read of a document goes to one
    # replica. So the second read finds its document where it is routed (the replica's tile for it outlined) and no
    # other replica held more of it (none dashed).
    routed = page.locator(".fleet-stack[data-router=affinity] .fleet-strip.routed")
    expect(routed).to_have_count(1)
    expect(routed.locator(".tier[data-tier=gpu] .tile.current")).to_have_attribute("data-doc", "1")
    expect(page.locator(".fleet-stack[data-router=affinity] .fleet-strip.better")).to_have_count(0)
    # At the end each document is on one replica's GPU only: the replicas' documents are disjoint and all three.
    _seek(page, 7)
    page.wait_for_timeout(500)
    held = [set(_held(page, r, "gpu")) for r in (0, 1)]
    assert held[0].isdisjoint(held[1]) and held[0] | held[1] == {0, 1, 2}, held


def test_on_a_phone_the_fleet_playback_bar_is_as_short_as_simulates(page: Page, live_server: str) -> None:
    # Fixed to the window's foot, as Simulate's (tests/app/web/page/test_views_page.py): at most 80 px, its controls
    # whole and in the window; its status one line, whole in its title. With the position's label shown and a
    # two-line status it took 112 px of an 844-px phone.
    page.set_viewport_size({"width": 390, "height": 844})
    _serve(page, live_server)
    _seek(page, 4)
    bar = page.locator("#fleet-playback").bounding_box()
    assert bar is not None and bar["height"] <= 80 and bar["y"] + bar["height"] <= 844, bar
    for control in ["[data-action=step]", "[data-action=play]", "[data-action=pause]", "#fleet-speed", "#fleet-position",
                    "#fleet-player-status"]:
        expect(page.locator(f"#fleet-playback {control}")).to_be_in_viewport(ratio=1)
    status = page.locator("#fleet-player-status")
    assert status.get_attribute("title") == status.text_content()
    expect(page.get_by_label("Request", exact=True)).to_have_count(1)  # the position keeps its name for a reader
