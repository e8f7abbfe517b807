"""The scheduler's settings: vLLM 0.33.0's ``SchedulerConfig`` fields that kvscope models, their defaults and checks."""

from __future__ import annotations

from dataclasses import dataclass, replace

# vLLM 0.33.0 ``vllm/config/scheduler.py`` 41-43: the class's own defaults ("mainly for convenience when testing").
CLASS_MAX_NUM_BATCHED_TOKENS = 2048
CLASS_MAX_NUM_SEQS = 128

# What ``vllm serve`` (usage context OPENAI_API_SERVER) picks when the flags are not given, by the GPU's memory:
# ``vllm/engine/arg_utils.py`` 2973-3005 (``get_batch_defaults``): (least GiB, max_num_batched_tokens, max_num_seqs),
# largest first. An A100 or a GB10 stays on the small tier whatever its memory (2984-2988).
SERVE_DEFAULTS_BY_GPU_GIB = ((160, 16384, 1024), (70, 8192, 1024), (0, 2048, 256))


def serve_batch_defaults(gpu_memory_gib: float) -> tuple[int, int]:
    """``vllm serve``'s (max_num_batched_tokens, max_num_seqs) on a GPU of this much memory (not an A100 or GB10)."""
    for least, tokens, seqs in SERVE_DEFAULTS_BY_GPU_GIB:
        if gpu_memory_gib >= least:
            return tokens, seqs
    raise ValueError(f"gpu_memory_gib must be at least 0, got {gpu_memory_gib}")


_SERVE_H100_TOKENS, _SERVE_H100_SEQS = serve_batch_defaults(80)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """vLLM's scheduler settings, by vLLM's own names (``vllm serve --max-num-batched-tokens`` ...).

    Defaults: ``max_num_batched_tokens`` and ``max_num_seqs`` are what
    ``vllm serve`` picks on an 80 GiB GPU such as an H100 (8,192 and 1,024,
    ``arg_utils.py`` 2984-2996); ``serve_batch_defaults`` gives the other
    tiers (2,048 and 256 below 70 GiB) and ``CLASS_MAX_NUM_*`` the class's own
    (2,048 and 128). The 8,192 default keeps the seed lab's 5,024-token
    prompts to one step each, so its TTFTs stay today's cost model's; under a
    2,048 budget each prompt takes three steps and pays the per-step fixed
    cost three times. The rest are the class defaults, which ``arg_utils.py``
    passes through (618, 716): ``long_prefill_token_threshold`` 0 (no cap,
    ``config/scheduler.py`` 79), chunked prefill on (134), the whole prompt
    must fit before a request is admitted (``scheduler_reserve_full_isl``,
    190). ``async_scheduling``: ``vllm serve`` resolves vLLM's None to True
    unless something is incompatible (``config/vllm.py`` 1685-1719). kvscope
    defaults to the synchronous loop (``EngineCore.step``: schedule, execute,
    ``update_from_output``), whose figures its default ones are; True runs
    ``step_with_batch_queue``'s (``sim.sched.stepped``), which one request at
    a time gives the same steps. ``max_model_len`` None: no cap (vLLM takes
    it from the model).
    """

    max_num_batched_tokens: int = _SERVE_H100_TOKENS
    max_num_seqs: int = _SERVE_H100_SEQS
    long_prefill_token_threshold: int = 0
    enable_chunked_prefill: bool = True
    scheduler_reserve_full_isl: bool = True
    async_scheduling: bool = False
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        # vLLM's own checks: ``config/scheduler.py`` 48 and 62 (ge=1), 79 (ge=0), 317-360 (verify_max_model_len).
        if self.max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be at least 1, got {self.max_num_batched_tokens}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be at least 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least max_num_seqs "
                f"({self.max_num_seqs})"
            )
        if self.long_prefill_token_threshold < 0:
            raise ValueError(f"long_prefill_token_threshold must be at least 0, got {self.long_prefill_token_threshold}")
        if self.max_model_len is not None:
            if self.max_model_len < 2:
                raise ValueError(f"max_model_len must be at least 2, got {self.max_model_len}")
            if self.long_prefill_token_threshold > self.max_model_len:
                raise ValueError(
                    f"long_prefill_token_threshold ({self.long_prefill_token_threshold}) must be at most "
                    f"max_model_len ({self.max_model_len})"
                )
            if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
                raise ValueError(
                    f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least max_model_len "
                    f"({self.max_model_len}) without chunked prefill"
                )

    def with_serve_defaults(self, gpu_memory_gib: float) -> SchedulerConfig:
        """This config with ``vllm serve``'s batch defaults for a GPU of ``gpu_memory_gib``."""
        tokens, seqs = serve_batch_defaults(gpu_memory_gib)
        return replace(self, max_num_batched_tokens=tokens, max_num_seqs=seqs)


CLASS_DEFAULTS = SchedulerConfig(max_num_batched_tokens=CLASS_MAX_NUM_BATCHED_TOKENS, max_num_seqs=CLASS_MAX_NUM_SEQS)
