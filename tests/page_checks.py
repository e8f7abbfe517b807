"""Measurements the page tests share: whether a select is wide enough to show its longest choice whole."""

from __future__ import annotations

from playwright.sync_api import Page

# The width of the longest option's text in the select's font, and the room the select leaves it: its width less its
# side paddings and borders and about 20 px of arrow.
SELECT_ROOM = """(id) => { const s = document.getElementById(id), style = getComputedStyle(s);
     const probe = document.createElement('span'); probe.style.font = style.font; probe.style.whiteSpace = 'pre';
     document.body.append(probe);
     const longest = Math.max(...[...s.options].map(o => { probe.textContent = o.text; return probe.getBoundingClientRect().width; }));
     probe.remove();
     const room = s.getBoundingClientRect().width - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)
                  - parseFloat(style.borderLeftWidth) - parseFloat(style.borderRightWidth) - 20;
     return [longest, room]; }"""


def select_room(page: Page, select_id: str) -> tuple[float, float]:
    """(longest option's text width, room for it) of the select with this id: the text is whole when the first is the
    smaller."""
    longest, room = page.evaluate(SELECT_ROOM, select_id)
    return longest, room
