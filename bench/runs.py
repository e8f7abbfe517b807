"""The runs database's cost: saving a simulation (whole, and streamed request by request) against the same
simulation unsaved, and listing 10,000 runs; with the seed lab's simulation time as the anchor of the same run."""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.runs.recording import StreamRecorder, save_simulation
from app.runs.store import NewRun, RunStore
from app.web.routes.simulate import recorded, stream_events, unpickled
from app.web.sse import message
from sim.calibration.calibrate import seed_scenario
from sim.costs.model import default_costs
from sim.simulation.run import simulate
from sim.workloads.scenario import Scenario

REPEATS = 15  # the machine is shared: min of many, paired, is what holds still


def _times(fn: Callable[[], Any], n: int = REPEATS, clock: Callable[[], float] = time.process_time) -> list[float]:
    """Seconds per call. By default CPU seconds of this process (SQLite's writes included): steadier than wall time
    on a shared machine, where other people's work lengthens wall time but not ours."""
    out = []
    for _ in range(n):
        started = clock()
        fn()
        out.append(clock() - started)
    return out


def _wall(fn: Callable[[], Any]) -> list[float]:
    """Wall seconds per call: what a user waits."""
    return _times(fn, clock=time.perf_counter)


def _paired(plain: Callable[[], Any], saved: Callable[[], Any], clock: Callable[[], float] = time.process_time) -> dict[str, Any]:
    """Both, alternated so that a busy spell on the machine hits both alike; min and median of each (CPU ms) and
    their ratios (saved / unsaved: 1.10 is 10% slower)."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(REPEATS):
        a += _times(plain, 1, clock)
        b += _times(saved, 1, clock)
    return {
        "unsaved_cpu_ms": {"min": round(min(a) * 1000, 2), "median": round(statistics.median(a) * 1000, 2)},
        "saved_cpu_ms": {"min": round(min(b) * 1000, 2), "median": round(statistics.median(b) * 1000, 2)},
        "ratio_min": round(min(b) / min(a), 3),
        "ratio_median": round(statistics.median(b) / statistics.median(a), 3),
    }


def _save_alone(store: RunStore, scenario: Scenario) -> dict[str, Any]:
    """The save by itself (a result already made), over the simulation that made it: what keeping the run adds, free
    of the simulation's own spread on a shared machine (which the paired ratio above carries)."""
    sim_s = _times(lambda: simulate(scenario))
    result = simulate(scenario)
    save_s = _times(lambda: save_simulation(store, scenario, result))
    return {
        "save_cpu_ms": {"min": round(min(save_s) * 1000, 2), "median": round(statistics.median(save_s) * 1000, 2)},
        "over_simulate_min": round(min(save_s) / min(sim_s), 3),
        "over_simulate_median": round(statistics.median(save_s) / statistics.median(sim_s), 3),
    }


def _sent(batches: list[bytes], recorder: StreamRecorder | None) -> None:
    """What the event loop does for the SSE route (app.web.routes.simulate.send): the worker's events unpickled, each
    made a message of the text the worker encoded, the recorder keeping it (its commits on the commit thread) or not."""
    async def send() -> None:  # recorded awaits its last commits on the loop, as the route does
        async for event in recorded(unpickled(batches), recorder, None):
            message(event)

    asyncio.run(send())
    if recorder is not None:
        recorder.finish("done")


def _streamed(scenario: Scenario, recorder: StreamRecorder | None) -> None:
    """The whole stream in one process: the worker's part (simulate, encode: stream_events) and the loop's."""
    _sent(stream_events(scenario, True), recorder)


def _listing(tmp: Path) -> dict[str, Any]:
    store = RunStore(tmp / "list.db")
    summary = {"scenario": "10 docs x 5,011 tok · GPU 21,520 tok · CPU 1.5 GiB · forward,forward,reverse", "requests": 60,
               "configs": ["gpu", "gpu+cpu"], "best_speedup": {"pass": 2, "baseline": "gpu", "candidate": "gpu+cpu", "p50_speedup": 11.747}}
    started = time.perf_counter()
    for i in range(10_000):
        store.save(NewRun("simulate", name=f"run {i}", summary=summary))
    fill_s = time.perf_counter() - started
    assert len(json.loads(store.list_json(limit=10_000))) == 10_000
    ms = lambda xs: {"min": round(min(xs) * 1000, 1), "median": round(statistics.median(xs) * 1000, 1)}  # noqa: E731
    return {
        "save_10000_runs_one_by_one_s": round(fill_s, 2),
        # What GET /api/runs?limit=10000 does: the JSON array, made by SQLite.
        "list_10000_json_wall_ms": ms(_wall(lambda: store.list_json(limit=10_000))),
        "list_10000_json_cpu_ms": ms(_times(lambda: store.list_json(limit=10_000))),
        # Python objects (the CLI and the page, which list 50).
        "list_10000_objects_wall_ms": ms(_wall(lambda: store.list(limit=10_000))),
    }


def run() -> dict[str, Any]:
    default_costs()  # the one-off seed fit is not part of any figure
    seed = seed_scenario()
    big = seed.replace(docs=200, passes="forward,reverse,random@1")
    anchor = _times(lambda: simulate(seed), 20)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        store = RunStore(tmp / "runs.db")
        figures: dict[str, Any] = {
            "anchor_seed_lab_simulate_ms": {"min": round(min(anchor) * 1000, 2), "median": round(statistics.median(anchor) * 1000, 2)},
        }
        for name, scenario in (("seed_lab", seed), ("docs_200", big)):
            figures[f"simulate_and_save_{name}"] = _paired(
                lambda s=scenario: simulate(s), lambda s=scenario: save_simulation(store, s, simulate(s))
            )
            figures[f"save_alone_{name}"] = _save_alone(store, scenario)
            # The whole stream's CPU (this process's: the commit thread's included), kept against unkept.
            figures[f"stream_and_keep_{name}"] = _paired(
                lambda s=scenario: _streamed(s, None), lambda s=scenario: _streamed(s, StreamRecorder(store, s))
            )
            # The event loop's share alone (its thread's CPU; the worker's events made beforehand): what keeping
            # costs the loop that also answers /healthz and every other open stream.
            # Its recorder is opened beforehand, as the route opens it, in a thread, before the stream starts.
            batches = stream_events(scenario, True)
            recorders = [StreamRecorder(store, scenario) for _ in range(REPEATS)]
            figures[f"stream_and_keep_{name}_event_loop"] = _paired(
                lambda b=batches: _sent(b, None), lambda b=batches: _sent(b, recorders.pop()), clock=time.thread_time
            )
        listing = _listing(tmp)
        figures.update(listing)
        figures["list_10000_json_over_anchor"] = round(
            listing["list_10000_json_cpu_ms"]["median"] / figures["anchor_seed_lab_simulate_ms"]["median"], 2
        )
        store.close()
    return figures
