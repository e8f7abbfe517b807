"""The scheduler's settings: vLLM's defaults by where they come from, and each bad value refused with its field named."""

from __future__ import annotations

import pytest

from sim.sched.config import CLASS_DEFAULTS, SchedulerConfig, serve_batch_defaults


def test_defaults_are_vllm_serve_on_an_80_gib_gpu() -> None:
    # arg_utils.py 2984-2996: an H100 (80 GiB, not an A100) gets 8,192 tokens and 1,024 sequences under vllm serve;
    # the other fields keep the class defaults (config/scheduler.py 79, 134, 190).
    c = SchedulerConfig()
    assert (c.max_num_batched_tokens, c.max_num_seqs) == (8192, 1024)
    assert (c.long_prefill_token_threshold, c.enable_chunked_prefill, c.scheduler_reserve_full_isl) == (0, True, True)
    assert c.async_scheduling is False and c.max_model_len is None


def test_serve_defaults_by_gpu_memory_and_the_class_defaults() -> None:
    # arg_utils.py 2973-3005: >= 160 GiB 16,384/1,024; >= 70 GiB 8,192/1,024; else 2,048/256.
    assert serve_batch_defaults(192) == (16384, 1024)
    assert serve_batch_defaults(160) == (16384, 1024)
    assert serve_batch_defaults(80) == (8192, 1024)
    assert serve_batch_defaults(69.9) == (2048, 256)
    assert serve_batch_defaults(24) == (2048, 256)
    # config/scheduler.py 41-43.
    assert (CLASS_DEFAULTS.max_num_batched_tokens, CLASS_DEFAULTS.max_num_seqs) == (2048, 128)
    assert SchedulerConfig().with_serve_defaults(24).max_num_batched_tokens == 2048


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens must be at least 1"),
        ({"max_num_seqs": 0}, "max_num_seqs must be at least 1"),
        ({"max_num_batched_tokens": 100, "max_num_seqs": 101}, r"max_num_batched_tokens \(100\) must be at least max_num_seqs \(101\)"),
        ({"long_prefill_token_threshold": -1}, "long_prefill_token_threshold must be at least 0"),
        ({"long_prefill_token_threshold": 5000, "max_model_len": 4096}, r"long_prefill_token_threshold \(5000\) must be at most max_model_len \(4096\)"),
        ({"enable_chunked_prefill": False, "max_num_batched_tokens": 2048, "max_model_len": 4096},
         r"max_num_batched_tokens \(2048\) must be at least max_model_len \(4096\) without chunked prefill"),
        ({"max_model_len": 1}, "max_model_len must be at least 2"),
    ],
)
def test_bad_values_name_the_field_and_the_limit(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SchedulerConfig(**fields)  # type: ignore[arg-type]


def test_serve_defaults_refuse_negative_memory() -> None:
    with pytest.raises(ValueError, match="gpu_memory_gib must be at least 0"):
        serve_batch_defaults(-1)
