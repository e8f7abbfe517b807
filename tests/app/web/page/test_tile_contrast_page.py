"""Text on every lane tile and eviction ghost reads at 4.5:1 or more (WCAG AA for small text), on each colour it sits
on: a tile's document colour and, for a hatched tile (doc 10 to 19 ...), its stripes; a ghost's veiled colour. Measured
from the page's own styles in headless Chromium, for every document colour, hatched or not, and the shared prefix."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page

pytestmark = pytest.mark.browser

# One tile and one ghost per document colour, plain and hatched, and the shared prefix's, placed in the first lane as
# lanes.js places them (class names from its docClass); each element's computed text colour, background colour and
# background image (the hatch).
PROBE = """() => {
  const box = document.createElement('div');
  box.className = 'ghosts';
  document.querySelector('.lane .tier').append(box);
  const classes = [...Array(10).keys()].flatMap(d => [`doc-${d}`, `doc-${d} doc-alt`]).concat(['doc-shared']);
  return classes.flatMap(c => ['tile', 'ghost'].map(kind => {
    const el = document.createElement(kind === 'tile' ? 'div' : 'span');
    el.className = `${kind} ${c}`;
    el.textContent = '13';
    box.append(el);
    const s = getComputedStyle(el);
    return [`${kind} ${c}`, s.color, s.backgroundColor, s.backgroundImage];
  }));
}"""

NUMBER = r"[\d.]+"


def _rgba(text: str) -> tuple[float, float, float, float]:
    """A computed colour, ``rgb(r, g, b)``, ``rgba(r, g, b, a)`` or ``color(srgb r g b)`` (0..1), as 0..1 channels and alpha."""
    values = [float(v) for v in re.findall(NUMBER, text)]
    if text.startswith("color(srgb"):
        r, g, b, *rest = values
        return r, g, b, rest[0] if rest else 1.0
    r, g, b, *rest = values
    return r / 255, g / 255, b / 255, rest[0] if rest else 1.0


def _over(top: tuple[float, float, float, float], under: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    """``top`` composited over an opaque ``under`` (source-over, in sRGB as browsers blend)."""
    a = top[3]
    return tuple(a * t + (1 - a) * u for t, u in zip(top[:3], under[:3])) + (1.0,)  # type: ignore[return-value]


def _luminance(c: tuple[float, float, float, float]) -> float:
    lin = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in c[:3]]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_contrast_helpers() -> None:
    # WCAG's own extremes, black on white 21:1, and the figure the issue measured: the page's ink #1d2125 on doc 3's
    # green #117733 reads 2.86:1 (luminance 0.0148 and 0.1355: (0.1355 + 0.05) / (0.0148 + 0.05)).
    assert contrast(_rgba("rgb(0, 0, 0)"), _rgba("rgb(255, 255, 255)")) == pytest.approx(21)
    assert contrast(_rgba("rgb(29, 33, 37)"), _rgba("rgb(17, 119, 51)")) == pytest.approx(2.86, abs=0.01)
    # Half-transparent black over white is mid grey (127.5/255).
    assert _over(_rgba("rgba(0, 0, 0, 0.5)"), _rgba("rgb(255, 255, 255)"))[:3] == pytest.approx((0.5, 0.5, 0.5))
    assert _rgba("color(srgb 0.5 0.25 1)") == (0.5, 0.25, 1.0, 1.0)


def test_text_on_every_tile_and_ghost_reads_at_4_5_to_1(page: Page, live_server: str) -> None:
    page.goto(live_server + "/")
    page.wait_for_function("() => window.htmx")
    probes = page.evaluate(PROBE)
    assert len(probes) == 2 * 21
    low: list[tuple[str, str, float]] = []
    for name, text, background, image in probes:
        ink, base = _rgba(text), _rgba(background)
        assert base[3] == 1.0, (name, background)  # an opaque colour of its own: what the text is read on
        surfaces = {"ground": base}
        # Each colour stop of the hatch's gradient, laid over the ground (its transparent stops are the ground itself).
        for stop in re.findall(r"rgba?\([^)]*\)", image):
            surfaces[f"stripe {stop}"] = _over(_rgba(stop), base)
        for where, surface in surfaces.items():
            ratio = contrast(ink, surface)
            if ratio < 4.5:
                low.append((name, where, round(ratio, 2)))
    assert low == []
