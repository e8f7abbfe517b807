"""KV bytes per token for the architectures people serve, each from a config.json shape written here."""

from __future__ import annotations

import pytest

from sim.blocks.kv import MODELS, shape_from_config


def test_llama_31_8b_gqa() -> None:
    # meta-llama/Llama-3.1-8B config.json: 32 layers, 32 heads, 8 KV heads, hidden 4096 (head dim 4096/32 = 128), bf16.
    cfg = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, "torch_dtype": "bfloat16"}
    shape = shape_from_config(cfg)
    # 32 layers x 8 heads x 128 dims x 2 (K, V) x 2 B = 131,072 B.
    assert shape.bytes_per_token == 131_072
    assert shape.kv_groups == 1
    # Under TP=2 each rank holds 4 of the 8 KV heads: half, 65,536 B; under TP=16 each rank still holds one head: 16,384 B.
    assert shape.per_rank_bytes_per_token(2) == 65_536
    assert shape.per_rank_bytes_per_token(16) == 16_384


def test_qwen25_15b_ignores_an_unused_window() -> None:
    # Qwen/Qwen2.5-1.5B config.json: 28 layers, 12 heads, 2 KV heads, hidden 1536 (128 dims), and
    # "sliding_window": 32768 with "use_sliding_window": false: no layer slides.
    cfg = {
        "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "hidden_size": 1536,
        "sliding_window": 32768, "use_sliding_window": False, "max_window_layers": 21, "torch_dtype": "bfloat16",
    }
    shape = shape_from_config(cfg)
    # 28 x 2 x 128 x 2 x 2 = 28,672 B (the design's figure).
    assert shape.bytes_per_token == 28_672
    assert shape.sliding_layers == 0


def test_deepseek_v3_mla() -> None:
    # deepseek-ai/DeepSeek-V3 config.json: 61 layers, 128 heads (and 128 KV heads, which MLA does not store),
    # kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128.
    cfg = {
        "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "hidden_size": 7168,
        "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "torch_dtype": "bfloat16",
    }
    shape = shape_from_config(cfg)
    # One latent of 512 + 64 = 576 elements per layer per token, no V: 61 x 576 x 2 B = 70,272 B.
    # (Per-head K/V would be 61 x 128 x 192... many times that; the latent is what vLLM caches.)
    assert shape.attention == "mla"
    assert shape.bytes_per_token == 70_272
    # fp8 halves it: 61 x 576 x 1 = 35,136 B.
    assert shape.with_cache_dtype("fp8").bytes_per_token == 35_136
    # MLA's latent is replicated on every TP rank, not split: each of 8 ranks holds all 70,272 B.
    assert shape.per_rank_bytes_per_token(8) == 70_272
    assert MODELS["deepseek-v3"].bytes_per_token == 70_272


def test_mistral_7b_v01_sliding_window() -> None:
    # mistralai/Mistral-7B-v0.1 config.json: 32 layers, 32 heads, 8 KV heads, hidden 4096, sliding_window 4096 on every layer.
    cfg = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, "sliding_window": 4096}
    shape = shape_from_config(cfg)
    # One attention type: one group of 32 layers; a cached token costs 32 x 8 x 128 x 2 x 2 = 131,072 B.
    assert (shape.kv_groups, shape.sliding_layers, shape.bytes_per_token) == (1, 32, 131_072)
    # A running 10,000-token request keeps only its window: ceil(4095/16) + 1 = 257 blocks = 4,112 tokens per layer,
    # 4,112 x 131,072 B = 538,968,064 B, against 10,000 tokens (625 blocks) x 131,072 = 1,310,720,000 B without a window.
    assert shape.resident_bytes(10_000) == 4_112 * 131_072
    # A prompt shorter than the window keeps all of it: 1,000 tokens = 63 blocks = 1,008 tokens.
    assert shape.resident_bytes(1_000) == 1_008 * 131_072


def test_gemma3_27b_hybrid_groups() -> None:
    # google/gemma-3-27b-it text_config: 62 layers, 32 heads, 16 KV heads, head_dim 128, sliding_window 1024,
    # sliding_window_pattern 6: layers 6, 12, ..., 60 (1-based) are full: 10 full, 52 sliding.
    cfg = {"text_config": {
        "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
        "hidden_size": 5376, "sliding_window": 1024, "sliding_window_pattern": 6, "model_type": "gemma3_text",
    }, "torch_dtype": "bfloat16"}
    shape = shape_from_config(cfg)
    assert (shape.full_layers, shape.sliding_layers) == (10, 52)
    # vLLM groups by the smaller count (52 >= 1.5 x 10): groups of 10 layers; 1 full group + ceil(52/10) = 6 sliding
    # groups (the last padded with 8 layers) = 7 groups. One layer: 16 x 128 x 2 x 2 = 8,192 B.
    assert (shape.group_size, shape.kv_groups) == (10, 7)
    # A cached token holds a block in every group: 7 x 10 x 8,192 = 573,440 B (62 x 8,192 = 507,904 B unpadded).
    assert shape.bytes_per_token == 573_440
    # Resident for a running 8,192-token request (512 blocks): full layers keep all 8,192 tokens, sliding ones
    # ceil(1023/16) + 1 = 65 blocks = 1,040 tokens: 10 x 8,192 x 8,192 + 52 x 1,040 x 8,192 = 1,114,112,000 B.
    assert shape.resident_bytes(8_192) == 10 * 8_192 * 8_192 + 52 * 1_040 * 8_192


def test_gemma2_alternates_and_layer_types_list_each_layer() -> None:
    # google/gemma-2-9b: 42 layers alternating sliding (even, 0-based) and full, 8 KV heads x 256, window 4096.
    g2 = shape_from_config({
        "model_type": "gemma2", "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 256, "hidden_size": 3584, "sliding_window": 4096,
    })
    # 21 of each, within 1.5x: groups of 21, 2 groups; 2 x 21 x (8 x 256 x 2 x 2 = 8,192) = 344,064 B = every layer.
    assert (g2.sliding_layers, g2.kv_groups, g2.bytes_per_token) == (21, 2, 344_064)
    listed = shape_from_config({
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64, "hidden_size": 256,
        "sliding_window": 128, "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    })
    # 3 sliding, 1 full: groups of 1 -> 4 groups of one layer, 4 x 1 x 64 x 2 x 2 = 1,024 B.
    assert (listed.sliding_layers, listed.kv_groups, listed.bytes_per_token) == (3, 4, 1_024)


def test_kv_cache_dtype() -> None:
    llama = MODELS["llama-3.1-8b"]
    # fp8 stores 1 byte per element: 131,072 / 2 = 65,536 B; auto and bfloat16 keep 2 bytes.
    assert llama.with_cache_dtype("fp8").bytes_per_token == 65_536
    assert llama.with_cache_dtype("auto").bytes_per_token == 131_072
    assert llama.with_cache_dtype("bfloat16").bytes_per_token == 131_072
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of"):
        llama.with_cache_dtype("int3")


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        ({"num_attention_heads": 8, "hidden_size": 512}, "num_hidden_layers"),
        ({"num_hidden_layers": 2, "hidden_size": 512}, "num_attention_heads"),
        ({"num_hidden_layers": 2, "num_attention_heads": 8}, "hidden_size"),
        ({"num_hidden_layers": 2, "kv_lora_rank": 512}, "qk_rope_head_dim"),
    ],
)
def test_missing_fields_are_named(cfg: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"field {field} is missing"):
        shape_from_config(cfg)
