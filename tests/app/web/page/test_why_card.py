"""The why-cards above the lanes say only what the run shows: each scenario's page (``/?scenario=...``, a real server)
is read beside the same scenario simulated through ``/api/simulate``, and every claim the cards make is checked
against that result: no GPU hits on a re-read in the same order, the GPU policy named, the tokens a prompt loads."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest


class _Cards(HTMLParser):
    """The text of each ``<div class="fact">``, whitespace squeezed."""

    def __init__(self) -> None:
        super().__init__()
        self.cards: list[str] = []
        self.depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth:
            self.depth += tag == "div"
        elif tag == "div" and dict(attrs).get("class") == "fact":
            self.depth = 1
            self.cards.append("")

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag == "div":
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.cards[-1] += data


def cards(url: str, query: dict[str, str]) -> tuple[str, str]:
    page = httpx.get(url + "/", params={"scenario": "seed-lab", **query}, timeout=60)
    assert page.status_code == 200, page.text[:300]
    parser = _Cards()
    parser.feed(page.text)
    gpu, cpu = (" ".join(text.split()) for text in parser.cards)
    return gpu, cpu


def _json(value: str) -> int | float | str:
    """A link's text value as JSON would carry it: the API reads JSON's own types (a number is not "5")."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def simulated(url: str, query: dict[str, str]) -> dict[str, Any]:
    body = {"preset": "seed-lab", **{k: _json(v) for k, v in query.items()}}
    answer = httpx.post(url + "/api/simulate", json=body, timeout=60)
    assert answer.status_code == 200, answer.text[:300]
    return answer.json()


def repeat_hits(result: dict[str, Any]) -> list[int]:
    """GPU hit tokens of every pass read in the same order as the pass before it (forward after forward), per run."""
    hits = []
    for run in result["runs"]:
        passes = run["passes"]
        hits += [p["gpu_hit_tokens"] for before, p in zip(passes, passes[1:]) if p["order"] == before["order"]]
    return hits


SCENARIOS = {
    # The lab: 4.3 of 10 prompts fit; the second forward pass gets nothing from the GPU.
    "seed-lab": {},
    # 5 prompts of 5,024 tokens in 22,984 usable tokens (23,000 less the null block): more than 4 prompts fit, so the
    # head of each document is still there when the second pass asks for it (vLLM frees a request's tail first).
    "nearly-fits": {"docs": "5", "gpu_tokens": "23000", "passes": "forward,forward"},
    # Every prompt starts with the same 1,024 tokens: they hit on the GPU whatever else is evicted.
    "shared-prefix": {"shared_prefix_tokens": "1024"},
    # MRU evicts the newest blocks: the older documents stay and a re-read hits them.
    "mru": {"gpu_policy": "mru"},
    "belady": {"gpu_policy": "belady"},
    "fifo": {"gpu_policy": "fifo"},
    # vLLM's native offload keeps 16-token blocks, not LMCache's 256-token chunks.
    "vllm-native": {"cpu_backend": "vllm-native"},
    # A prompt of exactly 20 chunks (5,107 + 13 tokens): the last token is always computed, so its last chunk is not loaded.
    "whole-chunks": {"doc_tokens": "5107"},
    "whole-documents": {"granularity": "doc", "docs": "5", "gpu_tokens": "23000", "passes": "forward,forward"},
}


@pytest.mark.parametrize("query", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_the_gpu_card_claims_no_hits_only_where_the_run_has_none(live_server: str, query: dict[str, str]) -> None:
    gpu, _ = cards(live_server, query)
    hits = repeat_hits(simulated(live_server, query))
    assert hits, "each scenario reads a pass again in the same order"
    # What the card allows a re-read to hit: nothing, or the shared prefix of each of the pass's 10 (or 5) requests.
    shared = int(query.get("shared_prefix_tokens", 0)) * int(query.get("docs", 10))
    if "no GPU hits" in gpu or "gone by the time" in gpu:
        assert set(hits) == ({shared} if "only the shared prefix" in gpu else {0}), (gpu, hits)
    if any(h > shared for h in hits):
        assert "no GPU hits" not in gpu and "gone by the time" not in gpu, (gpu, hits)


@pytest.mark.parametrize("query", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_the_gpu_card_names_the_scenarios_own_policy(live_server: str, query: dict[str, str]) -> None:
    gpu, _ = cards(live_server, query)
    policy = query.get("gpu_policy", "lru").upper()
    assert policy in gpu.upper(), gpu
    if policy != "LRU":
        assert "LRU evicts" not in gpu and "least recently used one" not in gpu, gpu


def test_a_shared_prefix_is_named_as_what_still_hits(live_server: str) -> None:
    query = SCENARIOS["shared-prefix"]
    gpu, _ = cards(live_server, query)
    hits = repeat_hits(simulated(live_server, query))
    # 1,024 tokens are 64 whole 16-token blocks: every one of the 10 requests of a re-read hits exactly them.
    assert set(hits) == {10 * 1024}, hits
    assert "shared prefix" in gpu and "1,024" in gpu, gpu


@pytest.mark.parametrize("query", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_the_cpu_card_quotes_the_tokens_a_prompt_loads(live_server: str, query: dict[str, str]) -> None:
    _, cpu = cards(live_server, query)
    loaded = re.search(r"the ([\d,]+) tokens of a prompt", cpu)
    assert loaded, cpu
    result = simulated(live_server, query)
    with_cpu = next(r for r in result["runs"] if r["name"] == "gpu+cpu")
    # A pass of the gpu+cpu run with no GPU hits: each of its requests loaded from the CPU what one prompt can load.
    cold = [p for p in with_cpu["passes"] if p["pass"] > 1 and not p["gpu_hit_tokens"] and p["tier_hits"].get("cpu")]
    if not cold:
        pytest.skip("no pass of this scenario loads every prompt from the CPU alone")
    requests = sum(1 for r in with_cpu["requests"] if r["pass"] == cold[0]["pass"])
    assert int(loaded.group(1).replace(",", "")) * requests == cold[0]["tier_hits"]["cpu"], (cpu, cold[0])


@pytest.mark.parametrize(("query", "lru"), [({}, True), ({"gpu_policy": "mru"}, False), ({"cpu_policy": "fifo"}, False),
                                            ({"gpu_policy": "belady", "cpu_policy": "arc"}, False)])
def test_the_lanes_say_evicted_first_on_the_left_only_under_lru(live_server: str, query: dict[str, str], lru: bool) -> None:
    # The bars are in recency order (static/js/lanes.js): the left tile is the next evicted only where every tier
    # evicts by LRU. MRU evicts from the right; FIFO, Belady and ARC by their own order.
    page = httpx.get(live_server + "/", params={"scenario": "seed-lab", **query}, timeout=60).text
    lanes = " ".join(page[page.index('class="panel panel-lanes"'):page.index('<div class="lanes">')].split())
    axes = re.findall(r'<p class="bar-axis"[^>]*><span>&larr; ([^<]+)</span>', page)
    assert axes and set(axes) == {"evicted first" if lru else "least recent"}, axes
    assert ("LRU evicts from the left" in lanes) == lru, lanes
    if not lru:
        named = {query.get("gpu_policy", "lru"), query.get("cpu_policy", "lru")} - {"lru"}
        assert all(p.upper() in lanes for p in named), lanes
