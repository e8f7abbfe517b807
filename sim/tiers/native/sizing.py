"""How many offload blocks vLLM's CPU tier holds: ``--kv-offloading-size`` GiB over page-aligned block bytes."""

from __future__ import annotations

GIB = 1 << 30  # config/vllm.py 1173-1175: cpu_bytes_to_use = kv_offloading_size * (1 << 30)
# cpu/spec.py 48, cpu/shared_offload_region.py 105: each offload block's bytes round up to mmap.PAGESIZE
# (4 KiB on x86-64 Linux; the page size of the machine vLLM runs on, not of this one).
PAGE_BYTES = 4096


def block_bytes(bytes_per_token: int, chunk_tokens: int) -> int:
    """Bytes of one offload block across every worker, page-aligned (cpu/spec.py 111-130).

    ``worker_kv_bytes_per_block`` times ``world_size`` is the model's KV bytes
    of one GPU block when the heads are split evenly over the workers, so the
    total (``cpu_bytes_to_use`` is summed over the workers, ``config/cache.py``
    383-387) buys the same number of blocks whatever the tensor-parallel size.
    MLA's single-copy layout (``replicated_layout``, 110-113) is not modelled.
    """
    raw = bytes_per_token * chunk_tokens
    return -(-raw // PAGE_BYTES) * PAGE_BYTES


def offload_blocks(gib: float, bytes_per_token: int, chunk_tokens: int) -> int:
    """``num_chunks`` (cpu/spec.py 123): the whole offload blocks ``gib`` GiB holds."""
    return int(gib * GIB) // block_bytes(bytes_per_token, chunk_tokens)
