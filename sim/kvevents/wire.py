"""vLLM's KV event wire format: msgpack of msgspec structs, decoded (current and older layouts) and encoded.

Field for field as vLLM 0.33 defines them (vllm/distributed/kv_events.py:31-149):

- ``KVEventBatch(ts, events, data_parallel_rank=None)`` is ``array_like`` (a
  msgpack array) with ``omit_defaults``: a trailing ``None`` rank is absent;
- the events are a tagged union (``tag=True``: the tag is the class name).
  In vLLM 0.33 the event classes are *not* ``array_like``: each event is a
  map with ``"type"`` set to ``BlockStored``, ``BlockRemoved`` or
  ``AllBlocksCleared``; defaulted fields equal to their default are omitted.
  Older vLLM (and the example subscriber, examples/online_serving/
  kv_events_subscriber.py) made events ``array_like`` too: ``["BlockStored",
  hashes, parent, tokens, block_size, lora_id, medium]``, with later fields
  missing. Both layouts are decoded; the emulator writes vLLM 0.33's.
- a block hash is ``bytes | int`` (``ExternalBlockHash``,
  vllm/v1/core/kv_cache_utils.py:57: sha256 bytes, or their low 64 bits as an
  int when ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``, the default);
- ``medium`` is ``"GPU"``, ``"CPU"`` or ``"STORAGE"``; ``None`` (older vLLM) is GPU.

A batch that the typed decoders refuse is decoded event by event, so one
unknown tag or one malformed event costs only that event, and is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

BlockHash = bytes | int

MEDIUM_GPU, MEDIUM_CPU, MEDIUM_STORAGE = "GPU", "CPU", "STORAGE"


class _Event(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """vLLM's ``KVCacheEvent``: a map tagged with its class name."""


class BlockStored(_Event):
    """Blocks now cached, in prefix order: the first one's parent is ``parent_block_hash``, each next one's the block before."""

    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(_Event):
    """Blocks no longer cached (on the GPU, one event per evicted block)."""

    block_hashes: list[BlockHash]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(_Event):
    """The GPU prefix cache was reset (vLLM's ``reset_prefix_cache``, block_pool.py:907)."""


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[KvEvent]
    data_parallel_rank: int | None = None


# Older vLLM: the same events as arrays, tag first; fields that version did not have are absent at the end.
class _LegacyEvent(msgspec.Struct, array_like=True, gc=False, tag=True):
    pass


class _LegacyStored(_LegacyEvent, tag="BlockStored"):
    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None


class _LegacyRemoved(_LegacyEvent, tag="BlockRemoved"):
    block_hashes: list[BlockHash]
    medium: str | None = None


class _LegacyCleared(_LegacyEvent, tag="AllBlocksCleared"):
    pass


class _LegacyBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[_LegacyStored | _LegacyRemoved | _LegacyCleared]
    data_parallel_rank: int | None = None


class _RawBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


_decode_batch = msgspec.msgpack.Decoder(KVEventBatch).decode
_decode_legacy = msgspec.msgpack.Decoder(_LegacyBatch).decode
_decode_raw = msgspec.msgpack.Decoder(_RawBatch).decode
_encode = msgspec.msgpack.Encoder().encode


@dataclass(slots=True)
class Decoded:
    """A batch as decoded: its events in order, and what could not be read (one line per skipped event)."""

    ts: float
    events: list[KvEvent]
    data_parallel_rank: int | None = None
    problems: list[str] = field(default_factory=list)


class MalformedBatch(ValueError):
    """A payload that is not a KV event batch at all (not msgpack, or not ``[ts, events, ...]``)."""


def decode(payload: bytes) -> Decoded:
    """One ``KVEventBatch`` payload; ``MalformedBatch`` when it is no batch, skipped events listed in ``problems``."""
    try:
        batch = _decode_batch(payload)
        return Decoded(batch.ts, batch.events, batch.data_parallel_rank)
    except msgspec.DecodeError:
        pass
    try:
        legacy = _decode_legacy(payload)
        return Decoded(legacy.ts, [_from_legacy(e) for e in legacy.events], legacy.data_parallel_rank)
    except msgspec.DecodeError:
        pass
    try:
        raw = _decode_raw(payload)
    except msgspec.DecodeError as exc:
        raise MalformedBatch(f"not a KV event batch: {exc}") from None
    out = Decoded(raw.ts, [], raw.data_parallel_rank)
    for i, item in enumerate(raw.events):
        event, problem = _one_event(item)
        if event is not None:
            out.events.append(event)
        else:
            out.problems.append(f"event {i}: {problem}")
    return out


def _one_event(item: Any) -> tuple[KvEvent | None, str]:
    tag = item.get("type") if isinstance(item, dict) else item[0] if isinstance(item, list) and item else None
    if tag not in ("BlockStored", "BlockRemoved", "AllBlocksCleared"):
        return None, f"unknown event tag {tag!r}"
    try:
        if isinstance(item, dict):
            return msgspec.convert(item, KvEvent), ""  # type: ignore[arg-type]
        legacy = msgspec.convert(item, _LegacyStored | _LegacyRemoved | _LegacyCleared)  # type: ignore[arg-type]
        return _from_legacy(legacy), ""
    except msgspec.ValidationError as exc:
        return None, f"{tag}: {exc}"


def _from_legacy(e: _LegacyStored | _LegacyRemoved | _LegacyCleared) -> KvEvent:
    if isinstance(e, _LegacyStored):
        return BlockStored(e.block_hashes, e.parent_block_hash, e.token_ids, e.block_size, e.lora_id, e.medium, e.lora_name)
    if isinstance(e, _LegacyRemoved):
        return BlockRemoved(e.block_hashes, e.medium)
    return AllBlocksCleared()


def encode(events: list[KvEvent], ts: float, data_parallel_rank: int | None = 0) -> bytes:
    """A batch as vLLM 0.33 sends it (its publisher sets the rank, kv_events.py:402)."""
    return _encode(KVEventBatch(ts, events, data_parallel_rank))


def medium_of(event: BlockStored | BlockRemoved) -> str:
    """The event's medium; ``None`` (vLLM before media were named) is the GPU."""
    return event.medium or MEDIUM_GPU


def hash_label(block_hash: BlockHash) -> str:
    """A block hash as text: 16 hex digits of an int, or the first 16 hex digits of bytes."""
    if isinstance(block_hash, int):
        return f"{block_hash & 0xFFFF_FFFF_FFFF_FFFF:016x}"
    return block_hash.hex()[:16]
