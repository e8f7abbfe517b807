"""The Plan view's order on a phone, in headless Chromium: its answers before the scenario they read (the sidebar),
which stays beside them on a wide screen."""

from __future__ import annotations

import pytest
from page_tour import goto_view
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser


def tops(page: Page) -> tuple[float, float]:
    expect(page.locator("#measure-form")).to_be_visible(timeout=30_000)  # the analysis panel has loaded
    area = page.locator("#analysis-area").bounding_box()
    sidebar = page.locator("#sidebar").bounding_box()
    assert area is not None and sidebar is not None
    return area["y"], sidebar["y"]


def test_on_a_phone_plans_answers_come_before_its_sidebar(page: Page, live_server: str) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    goto_view(page, live_server, "plan")
    area, sidebar = tops(page)
    assert area < sidebar
    # The first answer's form is in the first window, not below the sidebar's fields.
    assert page.locator("#analysis-area").bounding_box()["y"] < 844


def test_on_a_wide_screen_the_sidebar_stays_beside_the_answers(page: Page, live_server: str) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    goto_view(page, live_server, "plan")
    area, sidebar = tops(page)
    assert abs(area - sidebar) < 40
    assert page.locator("#sidebar").bounding_box()["x"] < page.locator("#analysis-area").bounding_box()["x"]


def test_simulate_keeps_its_form_first_on_a_phone(page: Page, live_server: str) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    goto_view(page, live_server, "simulate")
    assert page.locator("#sidebar").bounding_box()["y"] < page.locator("#run").bounding_box()["y"]
