"""KV-cache sizing: bytes per token of a model (GQA, MLA, sliding-window and hybrid layers, fp8), and tokens that fit in a budget."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from sim.bounds import jsontext, textfile

GIB = 1024**3

_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "float8": 1, "int8": 1}

# vLLM's --kv-cache-dtype values this sizing understands (vllm/config/cache.py:44 CacheDType): "auto" keeps the
# model's dtype; the fp8 variants store one byte per element. The *_ds_mla and turboquant layouts pack
# differently and are left out rather than sized wrongly.
KV_CACHE_DTYPES: dict[str, int | None] = {
    "auto": None, "float16": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}


@dataclass(frozen=True, slots=True)
class KvShape:
    """The part of a model's shape that decides its KV-cache size.

    ``attention="mla"`` is DeepSeek's latent KV: per layer one vector of
    ``kv_lora_rank + qk_rope_head_dim`` elements per token, no per-head K and V
    (vLLM: one KV "head", ``head_size_v = 0``: vllm/config/model.py:1674 and
    vllm/v1/kv_cache_interface.py:747). ``sliding_layers`` of the ``layers``
    attend over the last ``sliding_window`` tokens only.
    """

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    attention: Literal["gqa", "mla"] = "gqa"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    sliding_window: int | None = None
    sliding_layers: int = 0
    hf_id: str | None = None  # the Hugging Face id ``vllm serve`` loads it by (None: not known)

    @property
    def layer_bytes_per_token(self) -> int:
        """One layer's KV of one token: K and V of every KV head, or MLA's one latent."""
        if self.attention == "mla":
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.dtype_bytes
        return self.kv_heads * self.head_dim * 2 * self.dtype_bytes

    @property
    def full_layers(self) -> int:
        return self.layers - self.sliding_layers

    @property
    def group_size(self) -> int:
        """Layers per vLLM KV cache group (vllm/v1/core/kv_cache_planning.py:517-528).

        One attention type: every layer in one group. Hybrid: the fewest layers
        of any type, or the most when the counts are within 1.5x of each other.
        """
        counts = [c for c in (self.full_layers, self.sliding_layers) if c]
        if len(counts) == 1:
            return counts[0]
        return max(counts) if max(counts) < min(counts) * 1.5 else min(counts)

    @property
    def kv_groups(self) -> int:
        """vLLM's KV cache groups: each type's layers split into groups of ``group_size``, the last padded."""
        return sum(-(-c // self.group_size) for c in (self.full_layers, self.sliding_layers) if c)

    @property
    def bytes_per_token(self) -> int:
        """What a cached token costs: a block in every KV cache group, each group ``group_size`` layers.

        Every group draws block ids from one pool whose block costs
        ``group_size`` layers' pages (vllm/v1/core/kv_cache_planning.py:460-473,
        one page size for all groups), so a token held by all groups costs
        ``kv_groups x group_size`` layers, padding layers included; for a model
        with one attention type that is simply every layer. vLLM's native CPU
        offload sizes its tier the same way: a request's chunks are summed over
        the groups (vllm/v1/kv_offload/cpu/common.py:60-74), so a hybrid model's
        offload bytes hold ``1 / kv_groups`` of the tokens a one-group model's would.
        """
        return self.kv_groups * self.group_size * self.layer_bytes_per_token

    def resident_bytes(self, tokens: int, block_size: int = 16) -> int:
        """KV one running request of ``tokens`` tokens holds: every token on full layers, the window's blocks on sliding ones.

        A sliding layer keeps ``sliding_window - 1`` tokens plus the block the
        window starts in (vllm/v1/kv_cache_interface.py:916-944); counted here
        in whole blocks, as vLLM allocates them.
        """
        blocks = -(-tokens // block_size)
        full = self.full_layers * blocks * block_size * self.layer_bytes_per_token
        if not self.sliding_layers or self.sliding_window is None:
            return full
        window_blocks = min(blocks, -(-(self.sliding_window - 1) // block_size) + 1)
        return full + self.sliding_layers * window_blocks * block_size * self.layer_bytes_per_token

    def per_rank_bytes_per_token(self, tp: int) -> int:
        """One tensor-parallel rank's share: KV heads split over ranks (at least one each); MLA's latent is replicated.

        vllm/config/model.py:1663-1684: ``max(1, kv_heads // tp)`` heads per GPU; MLA counts one.
        """
        if self.attention == "mla":
            return self.bytes_per_token
        heads = max(1, self.kv_heads // tp)
        return self.kv_groups * self.group_size * heads * self.head_dim * 2 * self.dtype_bytes

    def with_cache_dtype(self, kv_cache_dtype: str) -> KvShape:
        """The shape under vLLM's ``--kv-cache-dtype`` (``auto`` keeps the model's dtype)."""
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, got {kv_cache_dtype!r}")
        size = KV_CACHE_DTYPES[kv_cache_dtype]
        return self if size is None else replace(self, dtype_bytes=size)

    @property
    def description(self) -> str:
        """How ``bytes_per_token`` is made, for a reader checking it."""
        if self.attention == "mla":
            per_layer = f"({self.kv_lora_rank} latent + {self.qk_rope_head_dim} rope) x {self.dtype_bytes} B"
        else:
            per_layer = f"{self.kv_heads} KV heads x {self.head_dim} head dim x 2 (K,V) x {self.dtype_bytes} B"
        layers = f"{self.layers} layers"
        if self.kv_groups > 1:
            layers = f"{self.kv_groups} KV groups x {self.group_size} layers ({self.full_layers} full, {self.sliding_layers} sliding)"
        return f"{layers} x {per_layer} = {self.bytes_per_token:,} B/token"


# Shapes from each model's published config.json (num_hidden_layers,
# num_key_value_heads, hidden_size / num_attention_heads), bf16, with the Hugging Face id of that config's repository
# (the instruction-tuned release, as served; its base model has the same shape).
MODELS: dict[str, KvShape] = {
    m.name: m
    for m in (
        KvShape("qwen2.5-0.5b", 24, 2, 64, hf_id="Qwen/Qwen2.5-0.5B-Instruct"),
        KvShape("qwen2.5-1.5b", 28, 2, 128, hf_id="Qwen/Qwen2.5-1.5B-Instruct"),
        KvShape("qwen2.5-3b", 36, 2, 128, hf_id="Qwen/Qwen2.5-3B-Instruct"),
        KvShape("qwen2.5-7b", 28, 4, 128, hf_id="Qwen/Qwen2.5-7B-Instruct"),
        KvShape("qwen2.5-14b", 48, 8, 128, hf_id="Qwen/Qwen2.5-14B-Instruct"),
        KvShape("qwen2.5-32b", 64, 8, 128, hf_id="Qwen/Qwen2.5-32B-Instruct"),
        KvShape("qwen2.5-72b", 80, 8, 128, hf_id="Qwen/Qwen2.5-72B-Instruct"),
        KvShape("llama-3.2-1b", 16, 8, 64, hf_id="meta-llama/Llama-3.2-1B-Instruct"),
        KvShape("llama-3.2-3b", 28, 8, 128, hf_id="meta-llama/Llama-3.2-3B-Instruct"),
        KvShape("llama-3.1-8b", 32, 8, 128, hf_id="meta-llama/Llama-3.1-8B-Instruct"),
        KvShape("llama-3.1-70b", 80, 8, 128, hf_id="meta-llama/Llama-3.1-70B-Instruct"),
        KvShape("mistral-7b", 32, 8, 128, hf_id="mistralai/Mistral-7B-Instruct-v0.3"),
        KvShape("mixtral-8x7b", 32, 8, 128, hf_id="mistralai/Mixtral-8x7B-Instruct-v0.1"),
        # DeepSeek-V3: 61 layers of MLA, kv_lora_rank 512 + qk_rope_head_dim 64.
        KvShape("deepseek-v3", 61, 1, 576, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, hf_id="deepseek-ai/DeepSeek-V3"),
        # Gemma 3 27B: 62 layers, every 6th full, the rest a 1,024-token window; 16 KV heads x 128.
        KvShape("gemma-3-27b", 62, 16, 128, sliding_window=1024, sliding_layers=52, hf_id="google/gemma-3-27b-it"),
    )
}
DEFAULT_MODEL = "qwen2.5-1.5b"


class UnknownModel(ValueError):
    pass


def model_shape(name: str) -> KvShape:
    """The KV shape of a model in the table; the error lists the known names."""
    try:
        return MODELS[name.lower()]
    except KeyError:
        raise UnknownModel(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


# Bounds of a config.json's shape, far above any published model's (Llama 3.1 405B: 126 layers, 8 KV heads, 128 dims).
MAX_LAYERS = 1_000
MAX_HEADS = 1_024
MAX_HEAD_DIM = 65_536
MAX_WINDOW = 1 << 30  # tokens; far past any context length a config ships


def _shown(value: int) -> str:
    """A count as an error shows it: int(1e308) is 309 digits, shown as the file has it."""
    if abs(value) < 10**15:
        return f"{value:,}"
    try:
        return f"{float(value):g}"
    except OverflowError:
        return "over 1e+308"


def _field(cfg: dict[str, Any], key: str, name: str) -> int:
    """``cfg[key]`` as a whole number: a JSON integer, or a float with no fraction; anything else is named."""
    try:
        value = cfg[key]
    except KeyError:
        raise ValueError(f"{name}: not a transformer config: the field {key} is missing") from None
    # int() would cut 28.5 to 28 without a word; a list or a text is named as well.
    whole = type(value) is int or (type(value) is float and value.is_integer())
    if not whole:
        raise ValueError(f"{name}: {key} must be a whole number, got {repr(value)[:80]}")
    return int(value)


def _sliding_layers(cfg: dict[str, Any], layers: int) -> int:
    """How many layers use a sliding window, from the ways configs say it.

    ``layer_types`` (newer Gemma, Qwen3-Next...) lists each layer; Gemma 3's
    ``sliding_window_pattern`` N makes every Nth layer full; Gemma 2 alternates
    (even layers sliding); otherwise a ``sliding_window`` applies to every layer
    unless ``use_sliding_window`` is false (Qwen2.5 ships a window it does not use).
    """
    if cfg.get("sliding_window") in (None, 0) or cfg.get("use_sliding_window") is False:
        return 0
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types[:layers] if "sliding" in str(t))
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:
        return sum(1 for i in range(layers) if (i + 1) % pattern)
    if cfg.get("model_type") == "gemma2":
        return sum(1 for i in range(layers) if i % 2 == 0)
    return layers


def shape_from_config(config: dict[str, Any], name: str = "config.json") -> KvShape:
    """The KV shape from a Hugging Face ``config.json`` (also reads ``text_config``): GQA, MLA, sliding windows; its
    ``_name_or_path`` (where ``transformers`` saved it from), when it has one, is the id to serve it by."""
    if not isinstance(config, dict):
        raise ValueError(f"{name}: not a transformer config: a JSON object is expected")
    return replace(_shape(config, name), hf_id=_name_or_path(config))


def _name_or_path(config: dict[str, Any]) -> str | None:
    value = config.get("_name_or_path")
    return value.strip() if isinstance(value, str) and value.strip() else None


def _shape(config: dict[str, Any], name: str) -> KvShape:
    """The shape's fields read from the config, each checked against its bound."""
    cfg = config.get("text_config", config)
    if not isinstance(cfg, dict):
        raise ValueError(f"{name}: text_config must be a JSON object")
    layers = _field(cfg, "num_hidden_layers", name)
    dtype = str(cfg.get("torch_dtype") or config.get("torch_dtype") or cfg.get("dtype") or "bfloat16").removeprefix("torch.")
    dtype_bytes = _DTYPE_BYTES.get(dtype, 2)
    if cfg.get("kv_lora_rank"):
        # vLLM treats a config with kv_lora_rank as MLA (vllm/config/model.py:2072).
        rank, rope = _field(cfg, "kv_lora_rank", name), _field(cfg, "qk_rope_head_dim", name)
        for field, value in (("num_hidden_layers", layers), ("kv_lora_rank", rank), ("qk_rope_head_dim", rope)):
            if not 1 <= value <= (MAX_LAYERS if field == "num_hidden_layers" else MAX_HEAD_DIM):
                raise ValueError(f"{name}: {field} must be from 1 to {MAX_LAYERS if field == 'num_hidden_layers' else MAX_HEAD_DIM:,}, got {_shown(value)}")
        return KvShape(name, layers, 1, rank + rope, dtype_bytes, "mla", rank, rope)
    heads = _field(cfg, "num_attention_heads", name)
    kv_heads = _field(cfg, "num_key_value_heads", name) if cfg.get("num_key_value_heads") else heads
    if cfg.get("head_dim"):
        head_dim = _field(cfg, "head_dim", name)
    else:
        if heads <= 0:
            raise ValueError(f"{name}: num_attention_heads must be at least 1, got {heads}")
        head_dim = _field(cfg, "hidden_size", name) // heads
    for field, value, most in (
        ("num_hidden_layers", layers, MAX_LAYERS), ("num_key_value_heads", kv_heads, MAX_HEADS), ("head_dim", head_dim, MAX_HEAD_DIM),
    ):
        if not 1 <= value <= most:
            raise ValueError(f"{name}: {field} must be from 1 to {most:,}, got {_shown(value)}")
    sliding = _sliding_layers(cfg, layers)
    window = _field(cfg, "sliding_window", name) if sliding else None
    if window is not None and not 1 <= window <= MAX_WINDOW:  # a window of no tokens (or fewer) keeps nothing to attend to
        raise ValueError(f"{name}: sliding_window must be from 1 to {MAX_WINDOW:,}, got {_shown(window)}")
    return KvShape(name, layers, kv_heads, head_dim, dtype_bytes, sliding_window=window, sliding_layers=sliding)


def load_config(path: str | Path) -> KvShape:
    path = Path(path)
    try:
        config = jsontext.loads(textfile.read_text(path))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read a JSON config ({exc})") from None
    return shape_from_config(config, path.name)


def tokens_in(gib: float, bytes_per_token: int) -> int:
    """How many tokens of KV fit in ``gib`` GiB (LMCache's ``max_local_cpu_size`` unit)."""
    return int(gib * GIB) // bytes_per_token


def gib_for(tokens: int, bytes_per_token: int) -> float:
    return tokens * bytes_per_token / GIB


def sizing(
    shape: KvShape, docs: int, doc_tokens: int, chunk_size: int = 256, gpu_memory_gib: float | None = None
) -> dict[str, Any]:
    """What a deployment needs: KV bytes per token, the CPU memory for ``docs`` documents, the GPU tokens a budget holds.

    LMCache stores only full chunks (``save_unfull_chunk`` off), so a
    document's CPU footprint is its whole chunks.
    """
    stored_tokens = docs * (doc_tokens // chunk_size) * chunk_size
    report: dict[str, Any] = {
        "model": shape.name,
        "layers": shape.layers,
        "kv_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "dtype_bytes": shape.dtype_bytes,
        "kv_bytes_per_token": shape.bytes_per_token,
        "attention": shape.attention,
        "kv_groups": shape.kv_groups,
        "docs": docs,
        "doc_tokens": doc_tokens,
        "chunk_size": chunk_size,
        "tokens": docs * doc_tokens,
        "gib_for_tokens": round(gib_for(docs * doc_tokens, shape.bytes_per_token), 4),
        "cpu_stored_tokens": stored_tokens,
        "cpu_gib_needed": round(gib_for(stored_tokens, shape.bytes_per_token), 4),
    }
    if gpu_memory_gib is not None:
        report["gpu_memory_gib"] = gpu_memory_gib
        report["gpu_kv_tokens"] = tokens_in(gpu_memory_gib, shape.bytes_per_token)
    return report
