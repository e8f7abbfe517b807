"""Measurements the page tests share: whether a select is wide enough to show its longest choice whole, and in which
animation frame each chart is drawn."""

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


# Wrapped after the page's scripts have loaded (they call window.Plotly.* at call time): each call is recorded with the
# time of the animation frame it runs in (null outside one); the frame's time is the same for all its callbacks. A
# chart is named by its id, or its data-role (the watch view's charts).
WRAP = """() => {
  window.__calls = []; window.__frame = null;
  const raf = window.requestAnimationFrame.bind(window);
  window.requestAnimationFrame = (cb) => raf((t) => { window.__frame = t; try { cb(t); } finally { window.__frame = null; } });
  for (const name of ["extendTraces", "react", "newPlot"]) {
    const f = window.Plotly[name];
    window.Plotly[name] = function (div, ...rest) { window.__calls.push([name, div.id || div.dataset.role, window.__frame]); return f.call(this, div, ...rest); };
  }
}"""


def frames_per_chart(calls: list[list], chart: str) -> tuple[int, int]:
    """Of ``chart``'s updates recorded by WRAP (extendTraces, react; not the newPlot that sets it up): how many ran
    outside an animation frame, and how many frames drew it more than once."""
    mine = [frame for name, div, frame in calls if div == chart and name != "newPlot"]
    inside = [f for f in mine if f is not None]
    return len(mine) - len(inside), len(inside) - len(set(inside))
