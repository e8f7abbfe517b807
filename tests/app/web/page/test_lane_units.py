"""Units users read elsewhere, over a real server: each tier's size on the lanes, and the GPU's in the why-card, in
tokens and, beside it, in GiB (vLLM logs its KV cache in tokens, LMCache sizes its CPU tier in GiB)."""

from __future__ import annotations

import re

import httpx


def test_each_tier_head_gives_its_size_in_gib_beside_its_tokens(live_server: str) -> None:
    page = httpx.get(live_server + "/", timeout=60).text  # the seed lab
    heads = re.findall(r'<span class="tier-fill">.*?/ ([\d,]+) tokens · ([\d.]+) GiB</span>', page, re.S)
    # Qwen2.5-1.5B's KV: 28 layers x 2 KV heads x 128 dims x 2 (K and V) x 2 bytes = 28,672 B per token.
    # GPU: 21,520 tokens less the null block's 16 = 21,504 x 28,672 B = 0.574 GiB; CPU: 1.5 GiB holds 56,173 tokens.
    assert heads == [("21,504", "0.57"), ("21,504", "0.57"), ("56,173", "1.50")], heads


def test_the_why_card_gives_the_gpu_cache_in_gib_beside_its_tokens(live_server: str) -> None:
    page = " ".join(httpx.get(live_server + "/", timeout=60).text.split())
    assert "The GPU cache holds <strong>21,504 tokens (0.57 GiB):" in page  # as the lanes above: 21,504 x 28,672 B
