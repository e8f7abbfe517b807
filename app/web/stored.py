"""What the dashboard opens from a link: a kept run (``/?run=ID``) or a scenario named field by field (``/?scenario=``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.runs.recording import result_of
from app.runs.store import NoSuchRun, Run, RunStore, StoreError, check_id
from app.runs.watch_replay import UPSTREAM
from app.scenario_input import SimulateInput, resolve
from app.web import run_view, scenario_form
from app.web.routes.calibrate import CostsChoice, costs_choice
from app.web.routes.live import live_view
from app.web.routes.replay import kept_replay
from app.web.scenario_form import FormView
from sim.sched.serving import Serving
from sim.workloads.presets import PRESETS
from sim.workloads.scenario import Scenario

DEFAULT_PRESET = "seed-lab"


class NotOpened(Exception):
    """The link names no run that can be opened; ``status`` is the page's HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Opened:
    id: int
    view: run_view.RunView | None  # None: not a simulation the lanes can play; the Runs area shows it
    form: FormView | None = None
    costs: CostsChoice | None = None
    live: dict[str, Any] | None = None  # a kept live run's partial context: the live panel replays it
    watch: dict[str, Any] | None = None  # a kept proxy run, as the watch panel's upstream: the panel replays it
    replay: bool = False  # a kept trace replay: the replay panel shows its stored result


def open_run(store: RunStore, raw_id: str) -> Opened:
    try:
        run_id = check_id(raw_id)
        run = store.get(run_id)
    except NoSuchRun as exc:
        raise NotOpened(404, f"{exc}: it was deleted, or was kept by another kvscope database") from None
    except StoreError as exc:
        raise NotOpened(422, f"run: {exc}") from None
    if run.info.kind == "proxy" and run.info.event_count:
        return _proxy(run)
    if run.info.kind == "watch" and run.info.record_count:
        # A kept `kvscope watch`: its KV events, as the watch panel shows an upstream's (app.runs.watch_replay).
        return Opened(run_id, None, watch={"name": UPSTREAM, "kv_events": True, "stream": f"/api/runs/{run_id}/events",
                                           "kept_run": run_id, "kind": "kvscope watch"})
    if run.info.kind == "replay" and kept_replay(store, run_id) is not None:
        return Opened(run_id, None, replay=True)
    if run.info.kind not in ("simulate", "live") or run.scenario is None:
        return Opened(run_id, None)
    try:
        scenario = Scenario.model_validate(run.scenario)
    except ValidationError:
        return Opened(run_id, None)
    if run.info.kind == "live":
        return _live(run_id, run, scenario)
    result = result_of(store, run)
    if not isinstance(result, dict) or not any(r["requests"] for r in result.get("runs", [])):
        return Opened(run_id, None)
    note = None
    if not run.info.event_count:
        note = (f"Run {run_id} was kept without its step events (by /api/simulate, or imported): the chart, log and "
                "table replay its stored requests; the lanes have nothing to show.")
    elif run.info.status != "done":
        note = f"Run {run_id} was {run.info.status} before its end: it replays as far as it got."
    serving = _serving(run)
    view = run_view.build(scenario, result, stored_run=run_id, stored_note=note, serving=serving)
    values = {**scenario_form.values_of(scenario), **scenario_form.serving_values(serving)}
    return Opened(run_id, view, scenario_form.view(DEFAULT_PRESET, values), costs_of(scenario, f"run {run_id}'s"))


def _serving(run: Run) -> Serving | None:
    """How a kept simulation was served, when the stepped engine served it (None: one request at a time, or a
    setting this kvscope no longer accepts)."""
    given = (run.source or {}).get("serving")
    if not isinstance(given, dict):
        return None
    try:
        return Serving.model_validate(given)
    except ValidationError:
        return None


def _live(run_id: int, run: Run, scenario: Scenario) -> Opened:
    """A kept live run with its stream's events plays again in the live panel; one without (``kvscope live``'s)
    opens in the Runs area."""
    targets = (run.source or {}).get("targets")
    if not run.info.event_count or not isinstance(targets, list):
        return Opened(run_id, None)
    live = live_view(
        run_id, scenario, [str(t) for t in targets],
        events=f"/api/runs/{run_id}/events", records=f"/api/runs/{run_id}/export",
    )
    return Opened(run_id, None, live={**live, "kept_run": run_id})


def _proxy(run: Run) -> Opened:
    """A kept proxy run plays again in the watch panel, from its stored events, as the upstream it watched."""
    source = run.source or {}
    upstream = {"name": str(source.get("upstream") or "upstream"), "kv_events": bool(source.get("kv_events")),
                "stream": f"/api/runs/{run.id}/events", "kept_run": run.id, "kind": "proxy recording"}
    return Opened(run.id, None, watch=upstream)


def costs_of(scenario: Scenario, label: str) -> CostsChoice | None:
    return None if scenario.costs is None else costs_choice(scenario.costs, label)


def scenario_input(preset: str, query: Mapping[str, str]) -> SimulateInput:
    """The body ``/?scenario=PRESET&field=value...`` names, how it is served too (raises ``ValidationError`` naming
    the field)."""
    data: dict[str, Any] = {
        k: v for k, v in query.items() if k in SimulateInput.model_fields and k not in ("preset", "scenario") and v.strip()
    }
    if "costs" in data:
        data["costs"] = scenario_form.json_value(data["costs"])
    return SimulateInput(preset=preset, **data)


def form_of(preset: str, query: Mapping[str, str], errors: list[dict[str, Any]] | None = None) -> FormView:
    """The form with the preset's values, overridden by the link's."""
    base = preset if preset in PRESETS else DEFAULT_PRESET
    values = {**scenario_form.values_of(resolve(base, {})), **{k: v for k, v in query.items() if k in scenario_form.FIELD_NAMES}}
    return scenario_form.view(base, values, errors)

