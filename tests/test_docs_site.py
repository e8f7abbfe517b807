"""The docs: ``mkdocs build --strict`` passes (a broken link, a missing image or a page left out of the nav fails
it), README.md stays a quick start of at most 250 lines, and what it links to exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from live_servers import ROOT

README_MAX_LINES = 250


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("material", reason="mkdocs-material is in the test extra: make test installs it")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    for page in ("index", "cli", "watch", "developers"):
        assert (tmp_path / "site" / ("" if page == "index" else page) / "index.html").is_file(), page


def test_readme_is_a_short_quick_start_whose_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    # The two set-up commands come first, before any other command.
    first_block = readme.split("```", 2)[1]
    assert "make serve" in first_block and "make test" in first_block
    links = [m for m in re.findall(r"\]\(([^)\s]+)\)", readme) if "://" not in m]
    assert links, "README links into the docs"
    for link in links:
        path = link.split("#", 1)[0]
        assert (ROOT / path).exists(), link
