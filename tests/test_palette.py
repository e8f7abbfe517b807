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
