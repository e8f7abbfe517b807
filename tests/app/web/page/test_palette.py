"""One palette: static/css/palette.css is the only place a colour is written down; every other stylesheet, script and
template names it by its variable (static/js/palette.js reads the variables for the charts)."""

from __future__ import annotations

import re
from pathlib import Path

from live_servers import ROOT

# A hex colour (not an HTML entity such as &#9670;), or a functional colour: rgb(), rgba(), hsl(), hsla().
COLOUR = re.compile(r"(?<![&\w])#[0-9a-fA-F]{3,8}\b|\b(?:rgba?|hsla?)\(")
PALETTE = ROOT / "static" / "css" / "palette.css"


def sources() -> list[Path]:
    return sorted([*(ROOT / "static" / "css").glob("*.css"), *(ROOT / "static" / "js").glob("*.js"), *(ROOT / "templates").rglob("*.html")])


def test_no_colour_is_written_outside_the_palette() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {m.group(0)}"
        for path in sources() if path != PALETTE
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for m in COLOUR.finditer(line)
    ]
    assert found == []


def test_the_check_sees_a_colour() -> None:
    # The pattern finds what it must (else the test above could never fail) and passes over entities and ids.
    assert COLOUR.search("color: #fff;") and COLOUR.search("border: 1px solid #0072B2") and COLOUR.search("rgba(0, 0, 0, 0.1)")
    assert not COLOUR.search("&#9670; diamond") and not COLOUR.search('getElementById("#run-view")')


def test_every_variable_used_is_defined() -> None:
    defined = set(re.findall(r"(--[\w-]+)\s*:", "\n".join(p.read_text() for p in (ROOT / "static" / "css").glob("*.css"))))
    # Variables set from a script or a template's style attribute count as defined there.
    defined |= set(re.findall(r"setProperty\(\"(--[\w-]+)\"", "\n".join(p.read_text() for p in (ROOT / "static" / "js").glob("*.js"))))
    used: set[str] = set()
    for path in sources():
        used |= set(re.findall(r"var\((--[\w-]+)\s*\)", path.read_text()))  # a var() with a fallback needs no definition
    # palette.js builds names from templates (`--run-${i}`, `--cause-${name}`): their stems are checked by the page tests.
    assert used - defined == set()
    palette = PALETTE.read_text()
    for i in range(4):
        assert f"--run-{i}:" in palette and f"--run-{i}-ink:" in palette


def variables() -> dict[str, str]:
    """palette.css's colour variables by name (without the leading --), as upper-case hex."""
    return {name: value.upper() for name, value in re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})\s*;", PALETTE.read_text())}


# CIELAB distance (delta E 1976) between two sRGB colours as seen with normal vision and with the two common red-green
# deficiencies, simulated by Viénot, Brettel and Mollon (1999), "Digital video colourmaps for checking the legibility of
# displays by dichromats", whose matrices (in linear RGB) are below. A distance under about 10 is a colour mix-up.
DICHROMAT = {
    "normal": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    "protan": ((0.11238, 0.88762, 0), (0.11238, 0.88762, 0), (0.00401, -0.00401, 1)),
    "deutan": ((0.29275, 0.70725, 0), (0.29275, 0.70725, 0), (-0.02234, 0.02234, 1)),
}


def _lab(colour: str, vision: str) -> tuple[float, float, float]:
    def linear(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    rgb = [linear(int(colour[i:i + 2], 16)) for i in (1, 3, 5)]
    r, g, b = (min(1.0, max(0.0, sum(m * c for m, c in zip(row, rgb)))) for row in DICHROMAT[vision])
    x, y, z = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.9505, 0.2126 * r + 0.7152 * g + 0.0722 * b, (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.089
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def distance(a: str, b: str) -> float:
    """The smallest delta E between a and b over normal, protan and deutan vision."""
    return min(sum((p - q) ** 2 for p, q in zip(_lab(a, v), _lab(b, v))) ** 0.5 for v in DICHROMAT)


def test_the_distance_tells_a_mix_up() -> None:
    # Okabe-Ito's vermillion and bluish green are far apart for normal vision (delta E about 100) but the classic
    # red-green confusion pair for a deuteranope; identical colours are 0 apart.
    assert distance("#D55E00", "#D55E00") == 0
    assert distance("#FF0000", "#00FF00") < 40 < sum((p - q) ** 2 for p, q in zip(_lab("#FF0000", "normal"), _lab("#00FF00", "normal"))) ** 0.5


def test_cause_colours_keep_to_their_meaning() -> None:
    """The cause bars took the configurations' and sources' colours ("evicted" the `gpu` vermillion, "first seen" the
    disk configuration's green, "the last token" the GPU hit's sky blue). Every cause has its own colour; the
    unavoidable ones are greys; the avoidable ones are no configuration's, source's or document's colour, nor close to
    one for normal, protan or deutan vision, and apart from each other."""
    from sim.explain.causes import CHAIN_BROKEN, EVICTED, FIRST_SEEN, NOT_STORED, PRECEDENCE

    colours = variables()
    causes = {c: colours[f"cause-{c}"] for c in PRECEDENCE}
    avoidable = {c: causes[c] for c in (FIRST_SEEN, EVICTED, CHAIN_BROKEN, NOT_STORED)}
    for cause, colour in causes.items():
        grey = colour[1:3] == colour[3:5] == colour[5:7]
        assert grey == (cause not in avoidable), (cause, colour)
    meanings = {n: v for n, v in colours.items() if re.fullmatch(r"run-\d(-ink)?|source-[\w-]+|measured|doc-\d", n)}
    assert len(meanings) >= 4 + 4 + 4 + 1 + 10
    for cause, colour in avoidable.items():
        assert colour not in meanings.values(), cause
        near = {n: round(distance(colour, v)) for n, v in meanings.items() if distance(colour, v) < 15}
        assert near == {}, (cause, colour, near)
    pairs = [(a, b) for a in avoidable for b in avoidable if a < b]
    assert all(distance(avoidable[a], avoidable[b]) > 40 for a, b in pairs)
