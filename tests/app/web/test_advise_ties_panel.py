"""The page's advisor shows candidates that tie as one row listing their policies, the engine's default first (over a
real uvicorn)."""

from __future__ import annotations

import re
import time

import httpx

from live_servers import serve_process


def test_the_panel_lists_the_policies_that_tie() -> None:
    # The sidebar's seed lab, only the CPU bought, a target everything meets: the search shrinks each policy's CPU tier
    # to one chunk, which every policy runs alike (a one-chunk cache has one victim), so the CPU rows tie: one row,
    # LMCache's default (LRU) first, the others in the search's (alphabetical) order.
    with serve_process() as (url, _):
        started = httpx.post(f"{url}/ui/analysis/advise", data={"advise_p50_ms": "100000", "advise_buy_cpu": "on",
                                                                "advise_points": "2"}, timeout=30)
        assert started.status_code == 200, started.text[:300]
        job = re.search(r'hx-get="(/ui/analysis/advise/[^"]+)"', started.text)
        assert job is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            poll = httpx.get(f"{url}{job.group(1)}", timeout=30)
            if 'id="advise-progress"' not in poll.text:
                break
            time.sleep(0.2)
        assert 'id="advise-table"' in poll.text, poll.text[:500]
        assert "<td>lru, arc, fifo, lfu, mru, s3fifo</td>" in poll.text
