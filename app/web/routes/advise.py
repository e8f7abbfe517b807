"""The sizing advisor on the page and over the API: ``POST /api/advise`` answers as ``kvscope advise --json``; the page's
panel starts a search, polls its progress and shows the ranked table and the Pareto chart."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.scenario_input import ScenarioInput
from app.web.advise_jobs import Jobs
from app.web.context import Web
from app.web.guard import upload_route
from app.web.inputs import InputErrors, check, errors_of, strict_json
from app.web.json_response import JSONResponse
from app.web.panel_input import Problem, config_shape, form_values, sidebar_scenario, upload_text
from app.web.workers import Busy, report
from sim.advise.candidate import TIERS, Target, field_choices
from sim.advise.prices import GPU_MEMORY_GIB, Deployment, Prices
from sim.advise.search import Space, advise, advise_cost
from sim.advise.workloads import ScenarioWorkload, TraceWorkload, Workload
from sim.blocks.kv import KV_CACHE_DTYPES
from sim.bounds.budget import Budget, OverBudget
from sim.calibration.measurements import MAX_TTFT_MS
from sim.sched.replay_serving import MAX_SPEEDUP, MIN_SPEEDUP
from sim.sched.serving import Serving
from sim.traces.reader import BUNDLED_TRACES
from sim.workloads.scenario import Scenario

MAX_WEB_POINTS = 12  # sizes per bought tier: a search of a few hundred candidates at most


class AdviseInput(BaseModel):
    """``kvscope advise``'s flags as one object; the scenario as ``/api/simulate`` takes it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    scenario: ScenarioInput = Field(default_factory=ScenarioInput, description="the workload (as for /api/simulate)")
    trace: Literal[tuple(BUNDLED_TRACES)] | None = Field(default=None, description="a bundled trace instead of the scenario")  # type: ignore[valid-type]
    p50_ms: float | None = Field(default=None, gt=0, le=MAX_TTFT_MS, description="TTFT p50 target, ms", examples=[100])
    p90_ms: float | None = Field(default=None, gt=0, le=MAX_TTFT_MS, description="TTFT p90 target, ms")
    hit_ratio: float | None = Field(default=None, ge=0, le=1, description="a floor on the prefix hit ratio")
    pass_: int | None = Field(default=None, alias="pass", ge=1, le=100, description="put the target on this pass only", examples=[2])
    buy: list[Literal[TIERS]] = Field(default=["gpu"], min_length=1, description="tiers whose size may change")  # type: ignore[valid-type]
    points: int = Field(default=6, ge=2, le=MAX_WEB_POINTS, description="sizes tried per bought tier")
    policies: list[str] = Field(default_factory=list, max_length=16, description="offload policies (default: every one)")
    backends: list[str] = Field(default_factory=list, max_length=8, description="offload backends (default: the scenario's own)")
    prices: Prices | None = Field(default=None, description="$ per GPU-hour and per GiB-hour; none: rank by memory")
    deployment: Deployment = Field(default_factory=Deployment)
    kv_cache_dtype: Literal[tuple(KV_CACHE_DTYPES)] = "auto"  # type: ignore[valid-type]
    top: int = Field(default=10, ge=1, le=50)
    serving: Serving | None = Field(
        default=None, description="serve the candidates under load, as /api/simulate's serving fields (e.g. "
        '{"rate": 1}): TTFT counts queueing, GPU sizes start at the working set in flight, rows give the rate they sustain',
    )
    timed: bool = Field(default=False, description="with trace: requests arrive at its timestamps (under load)")
    speedup: float | None = Field(default=None, ge=MIN_SPEEDUP, le=MAX_SPEEDUP, description="with timed: the gaps divided by this")


def _target(body: AdviseInput) -> Target:
    try:
        return Target(body.p50_ms, body.p90_ms, body.pass_, body.hit_ratio)
    except ValueError as exc:
        raise Problem("p50_ms", str(exc)) from None


def _workload(body: AdviseInput, scenario: Scenario) -> Workload:
    if body.kv_cache_dtype != "auto":
        scenario = scenario.model_copy(update={"kv_bytes_per_token": scenario.kv_shape.with_cache_dtype(body.kv_cache_dtype).bytes_per_token})
    if body.speedup is not None and not body.timed:
        raise Problem("speedup", "speedup: needs timed")
    if body.timed and body.trace is None:
        raise Problem("timed", "timed: needs a trace (the timestamps are the trace's)")
    serving = body.serving if body.serving is not None and body.serving.stepped else Serving() if body.timed else None
    if body.trace is not None:
        return TraceWorkload(body.trace, scenario.model, scenario.bytes_per_token, serving=serving,
                             speedup=(body.speedup or 1.0) if body.timed else None)
    return ScenarioWorkload(scenario, serving)


def _search(body: AdviseInput, workload: Workload, budget: Budget, model_id: str | None = None) -> dict[str, Any]:
    """The search, in a worker process, once its estimate fits the budget; its ValueErrors name the setting at fault
    (``buy: ...``), and so does a search over the budget (``points``, the first thing to lower). The commands start
    ``model_id`` (an uploaded config's ``_name_or_path``), else the model's Hugging Face id."""
    try:
        space = Space(tuple(body.buy), body.points, None, tuple(body.policies), tuple(body.backends))
        budget.check(workload.working_set_cost(), "scenario", "a smaller workload")  # measured before the grid
        budget.check(advise_cost(workload, space, body.deployment, body.top), "points", "fewer points, tiers, policies or a smaller workload")
        advice = advise(workload, _target(body), space, body.deployment, body.prices, None, report, body.top, body.kv_cache_dtype,
                        model_id)
    except OverBudget as exc:
        raise Problem(exc.field, str(exc)) from None
    except ValueError as exc:
        message = str(exc)
        field = message.split(":")[0] if ":" in message.split(" ")[0] else ""
        raise Problem(field, message) from None
    return {**advice.to_dict(), "kv_bytes_per_token": workload.bytes_per_token, "priced": body.prices is not None, "buy": list(body.buy)}


def panel_context() -> dict[str, Any]:
    """The choices the panel's form offers, from their one definitions."""
    return {
        "tiers": TIERS, "policies": field_choices("cpu_policy"), "gpu_types": list(GPU_MEMORY_GIB), "kv_dtypes": list(KV_CACHE_DTYPES),
        "traces": list(BUNDLED_TRACES), "max_points": MAX_WEB_POINTS,
        "advise_model": AdviseInput, "prices_model": Prices, "deployment_model": Deployment,  # bounds and starting values
    }


def router(*, web: Web) -> APIRouter:
    routes = APIRouter(tags=["analysis"])
    templates = web.templates
    jobs = Jobs()

    def render(request: Request, name: str, status_code: int = 200, headers: dict[str, str] | None = None, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, context, status_code=status_code, headers=headers)

    def problem(request: Request, exc: Problem, status_code: int = 422) -> HTMLResponse:
        return render(request, "analysis/problem.html", status_code=status_code, message=str(exc), field=exc.field)

    @routes.post("/api/advise", summary="The cheapest tier sizes that meet a TTFT target", response_class=JSONResponse)
    async def advise_route(body: Annotated[AdviseInput, strict_json(AdviseInput)]) -> Response:
        """``kvscope advise --json``: ``candidates``, ``meets`` (ranked, with tier sizes in tokens and GiB, predicted
        p50/p90, hit ratios per tier, $/hour), ``closest`` when none meets, ``pareto``, ``warnings``, ``notes``,
        ``commands``. Every candidate is simulated, so a large space takes seconds: the search runs in the server's
        workers within its search budget (over it: 422 at ``points``; busy or past the deadline: 503)."""
        budget = web.workers.budget
        try:
            workload = _workload(body, check(body.scenario))
            return await web.workers.run_json(_search, body, workload, budget.per_search, seconds=budget.search_seconds)
        except InputErrors as exc:
            raise exc.for_body() from None
        except Problem as exc:
            raise exc.for_body() from None

    @routes.post("/ui/analysis/advise", response_class=HTMLResponse, include_in_schema=False)
    @upload_route
    async def advise_panel(request: Request) -> HTMLResponse:
        form = await request.form()
        values = form_values(form)
        try:
            scenario = sidebar_scenario(values)
            body = _panel_input(values)
            upload = await upload_text(form.get("advise_config"), "advise_config")  # type: ignore[arg-type]
            model_id = None
            if upload is not None:
                shape = config_shape(upload, "advise_config")
                scenario = scenario.model_copy(update={"kv_bytes_per_token": shape.bytes_per_token})
                model_id = shape.hf_id
            workload = _workload(body, scenario)
            _target(body)
            budget = web.workers.budget
            job_id = jobs.start(web.workers, _search, body, workload, budget.per_search, model_id,
                                seconds=budget.search_seconds)
        except Problem as exc:
            return problem(request, exc)
        except Busy as exc:
            return render(request, "analysis/problem.html", status_code=503, headers={"Retry-After": str(exc.retry_after_s)}, message=str(exc), field="")
        return render(request, "analysis/advise_progress.html", job_id=job_id, job=jobs.get(job_id))

    @routes.get("/ui/analysis/advise/{job_id}", response_class=HTMLResponse, include_in_schema=False)
    def advise_poll(request: Request, job_id: str) -> HTMLResponse:
        job = jobs.get(job_id)
        if job is None:
            raise HTTPException(404, "no such search (finished long ago, or never started)")
        if not job.finished.is_set():
            return render(request, "analysis/advise_progress.html", job_id=job_id, job=job)
        if job.error is not None:
            return problem(request, Problem(f"advise_{job.error_field}" if job.error_field else "", job.error))  # the panel's name
        return render(request, "analysis/advise.html", advice=job.result)

    return routes


# The panel's fields, each one AdviseInput field (prefixed so as not to clash with the sidebar's).
_PANEL_FIELDS = ("p50_ms", "p90_ms", "hit_ratio", "pass", "points", "kv_cache_dtype", "trace")
_PRICE_FIELDS = ("gpu_hour", "dram_gib_hour", "nvme_gib_hour")
_DEPLOYMENT_FIELDS = ("gpu_type", "gpus", "tp", "gpu_memory_utilization", "weights_gib")


def _panel_input(values: dict[str, str]) -> AdviseInput:
    def given(name: str) -> str | None:
        raw = values.get(f"advise_{name}", "").strip()
        return raw or None

    data: dict[str, Any] = {k: v for k in _PANEL_FIELDS if (v := given(k)) is not None}
    data["buy"] = [t for t in TIERS if values.get(f"advise_buy_{t}")] or ["gpu"]
    prices = {k: v for k in _PRICE_FIELDS if (v := given(k)) is not None}
    if prices:
        data["prices"] = prices
    data["deployment"] = {k: v for k in _DEPLOYMENT_FIELDS if (v := given(k)) is not None}
    if (policy := given("policy")) is not None:
        data["policies"] = [policy]
    try:
        return AdviseInput.model_validate(data)
    except ValidationError as exc:
        err = errors_of(exc)[0]
        loc = [str(p) for p in err["loc"]]
        name = loc[-1] if loc and loc[0] in ("prices", "deployment") and len(loc) > 1 else (loc[0] if loc else "")
        if loc and loc[0] == "prices" and len(loc) == 1:
            name = "gpu_hour"
        raise Problem(f"advise_{name}", f"{name}: {err['msg']}") from None
