"""``make docs-shots``: the docs' screenshots, made from the real page in headless Chromium (never by hand).

Starts ``kvscope serve`` on a free loopback port with a database of its own, opens each view of ``VIEWS`` at each size
of ``SIZES``, plays the seed lab where the view has a Run button, and writes ``docs/img/NAME-WIDTH.png``. A view whose
URL does not answer 200 is named and left out (the exit status is then 1).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from app.web.views import VIEWS as APP_VIEWS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "img"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# The views and their URLs are the app's own list (app.web.views.VIEWS): a view added there is shot here too.
VIEWS = [(view.name, view.path) for view in APP_VIEWS]
# The Simulate view under load too (docs/load.md): 4 requests in flight, each generating 8 tokens, from its link,
# shown at its third scheduler step (``PAUSE_AT``), when running requests pin blocks in the lanes.
VIEWS.append(("simulate-load", "/?scenario=seed-lab&concurrency=4&output_tokens=8"))
PAUSE_AT = {"simulate-load": 3}
SIZES = [(1440, 900), (390, 844)]
DONE = "#player-status[data-state=done]"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(port: int, db: Path) -> subprocess.Popen[bytes]:
    kvscope = [sys.executable, "-m", "app.cli"] if not (ROOT / ".venv/bin/kvscope").exists() else [str(ROOT / ".venv/bin/kvscope")]
    proc = subprocess.Popen([*kvscope, "serve", "--host", "127.0.0.1", "--port", str(port), "--db", str(db),
                             "--log-level", "warning"], cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit("kvscope serve did not come up within 60 s")


def shoot(base: str) -> list[str]:
    """Every view at every size; the views left out, with why."""
    missing = []
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--disable-background-networking", "--disable-component-update"])
        for name, path in VIEWS:
            status = httpx.get(base + path, timeout=30).status_code
            if status != 200:
                missing.append(f"{name} ({path}) answered HTTP {status}")
                continue
            for width, height in SIZES:
                page = browser.new_page(viewport={"width": width, "height": height})
                page.goto(base + path)
                page.wait_for_function("() => window.htmx")
                run = page.locator("button[data-action=run]")
                if run.count() and run.first.is_visible():
                    page.select_option("#speed", "max")
                    if "?scenario=" not in path:  # a scenario link plays by itself: a second Run would race it
                        run.first.click()
                    page.wait_for_selector(DONE, timeout=120_000)
                    if name in PAUSE_AT:  # played again a step a second, paused at its step
                        page.select_option("#speed", "1")
                        page.click("button[data-action=play]")
                        page.wait_for_selector(f"#player-status[data-applied='{PAUSE_AT[name]}']", timeout=30_000)
                        page.click("button[data-action=pause]")
                    page.evaluate("() => window.kvscope?.plot?.settled?.()")
                page.wait_for_timeout(800)  # tiles finish sliding before the picture
                target = OUT / f"{name}-{width}.png"
                page.screenshot(path=str(target))
                print(f"wrote {target.relative_to(ROOT)}")
                page.close()
        browser.close()
    return missing


def main() -> int:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = serve(port, Path(tmp) / "runs.db")
        try:
            missing = shoot(f"http://127.0.0.1:{port}")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    for line in missing:
        print(f"left out: {line}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
