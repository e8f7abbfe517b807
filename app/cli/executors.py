"""Where many simulations run side by side: local processes (``--workers``) or a Ray cluster (``--ray ADDRESS``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

import click


def workers_option(noun: str) -> Callable[[Any], Any]:
    """``--workers N`` and ``--ray ADDRESS``, as every command that fans simulations out takes them."""
    def decorate(f: Any) -> Any:
        f = click.option("--ray", "ray_address", default=None, help=f"run {noun} on a Ray cluster: ADDRESS or auto")(f)
        return click.option("--workers", type=click.IntRange(min=1), default=None, help="local processes (default: every core)")(f)
    return decorate


def _executor(workers: int, ray_address: str | None) -> Any | None:
    if ray_address is not None:
        try:
            import ray
            from ray.util.multiprocessing import Pool
        except ImportError:
            raise click.BadParameter("Ray is not installed: pip install 'kvscope[cluster]'", param_hint="--ray") from None
        if not ray.is_initialized():
            ray.init(address=ray_address, include_dashboard=False, log_to_driver=False)
        return Pool()
    if workers <= 1:
        return None
    return ProcessPoolExecutor(max_workers=workers)


@contextmanager
def executor(workers: int | None, ray_address: str | None) -> Iterator[Any | None]:
    """A process pool of ``workers`` (default: every core; None for one: in this process), or Ray's pool on the
    cluster at ``ray_address``; shut down on the way out."""
    pool = _executor(workers or os.cpu_count() or 1, ray_address)
    try:
        yield pool
    finally:
        if pool is not None:
            (pool.shutdown if hasattr(pool, "shutdown") else pool.close)()


def progress(command: str, noun: str) -> Callable[[int, int], None]:
    """Prints ``COMMAND: done/total NOUN simulated`` on stderr some 20 times over a long run, and at its end."""
    def report(done: int, total: int) -> None:
        if done == total or done % max(1, total // 20) == 0:
            click.echo(f"{command}: {done}/{total} {noun} simulated", err=True)
    return report
