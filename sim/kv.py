"""KV-cache sizing: bytes per token of a model, and tokens that fit in a memory budget."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim import jsontext, textfile

GIB = 1024**3

_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "float8": 1, "int8": 1}


@dataclass(frozen=True, slots=True)
class KvShape:
    """The part of a model's shape that decides its KV-cache size."""

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2

    @property
    def bytes_per_token(self) -> int:
        # K and V, for every layer and KV head.
        return self.layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes


# Shapes from each model's published config.json (num_hidden_layers,
# num_key_value_heads, hidden_size / num_attention_heads), bf16.
MODELS: dict[str, KvShape] = {
    m.name: m
    for m in (
        KvShape("qwen2.5-0.5b", 24, 2, 64),
        KvShape("qwen2.5-1.5b", 28, 2, 128),
        KvShape("qwen2.5-3b", 36, 2, 128),
        KvShape("qwen2.5-7b", 28, 4, 128),
        KvShape("qwen2.5-14b", 48, 8, 128),
        KvShape("qwen2.5-32b", 64, 8, 128),
        KvShape("qwen2.5-72b", 80, 8, 128),
        KvShape("llama-3.2-1b", 16, 8, 64),
        KvShape("llama-3.2-3b", 28, 8, 128),
        KvShape("llama-3.1-8b", 32, 8, 128),
        KvShape("llama-3.1-70b", 80, 8, 128),
        KvShape("mistral-7b", 32, 8, 128),
        KvShape("mixtral-8x7b", 32, 8, 128),
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


def shape_from_config(config: dict[str, Any], name: str = "config.json") -> KvShape:
    """The KV shape from a Hugging Face ``config.json`` (also reads ``text_config``)."""
    cfg = config.get("text_config", config)
    try:
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        raise ValueError(f"{name}: not a transformer config (missing or bad {exc})") from None
    for field, value, most in (
        ("num_hidden_layers", layers, MAX_LAYERS), ("num_key_value_heads", kv_heads, MAX_HEADS), ("head_dim", head_dim, MAX_HEAD_DIM),
    ):
        if not 1 <= value <= most:
            raise ValueError(f"{name}: {field} must be from 1 to {most:,}, got {value:,}")
    dtype = str(cfg.get("torch_dtype") or config.get("torch_dtype") or "bfloat16").removeprefix("torch.")
    return KvShape(name, layers, kv_heads, head_dim, _DTYPE_BYTES.get(dtype, 2))


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
