"""Timing helpers shared by the benchmarks: several runs, min and median, and the ratio to an anchor of the same run."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def runs(fn: Callable[[], Any], repeats: int) -> list[float]:
    """Wall seconds of ``repeats`` calls of ``fn``."""
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def command_runs(argv: Sequence[str], repeats: int, env: dict[str, str] | None = None) -> list[float]:
    """Wall seconds of ``repeats`` runs of a command, output discarded; a failing command fails the benchmark."""
    return runs(lambda: subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env), repeats)


def command_with_rss(argv: Sequence[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds and peak resident memory (MiB, the kernel's ``ru_maxrss``) of one run of a command."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return seconds, usage.ru_maxrss / 1024


def spread(seconds: Sequence[float], digits: int = 4) -> dict[str, float]:
    return {"min_s": round(min(seconds), digits), "median_s": round(statistics.median(seconds), digits)}


def figure(seconds: Sequence[float], anchor: Sequence[float], anchor_name: str, target_s: float | None = None) -> dict[str, Any]:
    """A timing beside its anchor's, with ratios of the minima and of the medians."""
    out: dict[str, Any] = spread(seconds)
    out["runs"] = len(seconds)
    out["anchor"] = {"what": anchor_name, **spread(anchor)}
    out["ratio_to_anchor_min"] = round(min(seconds) / min(anchor), 2)
    out["ratio_to_anchor_median"] = round(statistics.median(seconds) / statistics.median(anchor), 2)
    if target_s is not None:
        out["target_s"] = target_s
        out["meets_target_median"] = statistics.median(seconds) < target_s
    return out


def byte_compiled() -> dict[str, str]:
    """Write kvscope's (and the bench's) bytecode before timing a command, as installing the wheel does (pip
    compiles every module). Run with ``PYTHONDONTWRITEBYTECODE`` set and no bytecode written, each start compiled
    every imported module from source again: about 45 ms a ``kvscope curve`` that no installed kvscope pays."""
    import compileall

    import app
    import bench
    import sim

    for package in (app, sim, bench):
        compileall.compile_dir(Path(package.__file__).parent, quiet=1)
    return {"bytecode": "written beforehand, as a wheel install does"}
