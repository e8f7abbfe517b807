"""``/metrics`` in the Prometheus text format, with vLLM v1's metric names, labels and help texts.

Counters carry the ``_total`` suffix as ``prometheus_client`` writes them;
every series has vLLM's ``model_name`` and ``engine`` labels, except
``vllm:cache_config_info``, whose labels are the cache settings (the way vLLM
exposes an info metric as a gauge set to 1), the CPU tier among them as vLLM
labels KV offloading (``kv_offloading_size`` in GiB, ``kv_offloading_backend``
lmcache; "None" and vLLM's default "native" without one).
"""

from __future__ import annotations

from app.emulator.backend import TTFT_BUCKETS_S, Backend


def _labels(pairs: dict[str, str]) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in pairs.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value))


def render(backend: Backend) -> str:
    cfg, c = backend.config, backend.counters
    # vLLM labels every series with the (first) served model name.
    model = cfg.served_names[0]
    series = _labels({"engine": "0", "model_name": model})
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, value: float) -> None:
        lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{series} {_number(value)}"))

    lines += [
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        "vllm:cache_config_info"
        + _labels(
            {
                "block_size": str(cfg.block_size),
                "cache_dtype": "auto",
                "enable_prefix_caching": "True",
                "engine": "0",
                "kv_offloading_backend": "lmcache" if cfg.cpu_gb is not None else "native",
                "kv_offloading_size": "None" if cfg.cpu_gb is None else repr(float(cfg.cpu_gb)),
                "num_cpu_blocks": "None",
                "num_gpu_blocks": str(cfg.num_gpu_blocks),
                "prefix_caching_hash_algo": "builtin",
            }
        )
        + " 1.0",
    ]
    # vllm/v1/metrics/loggers.py 527-544, 620-623: the scheduler's gauges, as of its last step.
    metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", backend.running)
    metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", backend.waiting)
    metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", backend.kv_cache_usage)
    # loggers.py 738-741: a counter, so prometheus_client writes it with _total.
    metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", c.preemptions)
    metric(
        "vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
        c.prefix_cache_queries,
    )
    metric("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", c.prefix_cache_hits)
    # vllm/v1/metrics/loggers.py creates these whether or not a KV connector is configured: 0 without one.
    metric(
        "vllm:external_prefix_cache_queries_total", "counter",
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
        c.external_prefix_cache_queries,
    )
    metric(
        "vllm:external_prefix_cache_hits_total", "counter",
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
        c.external_prefix_cache_hits,
    )
    metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", c.prompt_tokens)
    metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", c.generation_tokens)
    lines += [
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        "vllm:request_success_total"
        + _labels({"engine": "0", "finished_reason": "length", "model_name": model})
        + f" {_number(c.finished)}",
    ]
    name = "vllm:time_to_first_token_seconds"
    lines += [f"# HELP {name} Histogram of time to first token in seconds.", f"# TYPE {name} histogram"]
    for bound, count in zip(TTFT_BUCKETS_S, c.ttft_bucket_counts):
        le = _labels({"engine": "0", "le": repr(bound), "model_name": model})
        lines.append(f"{name}_bucket{le} {_number(count)}")
    lines.append(f"{name}_bucket" + _labels({"engine": "0", "le": "+Inf", "model_name": model}) + f" {_number(c.ttft_count)}")
    lines.append(f"{name}_count{series} {_number(c.ttft_count)}")
    lines.append(f"{name}_sum{series} {_number(c.ttft_sum_s)}")
    return "\n".join(lines) + "\n"
