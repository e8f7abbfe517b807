"""Analysis and planning on the page and over the API: measurement files, capacity curves, eviction what-ifs, sizing.

HTML routes under ``/ui/analysis`` answer the page's HTMX forms with partials
under ``templates/analysis/``; charts are drawn by ``static/js/analysis.js``
from the data the partials carry. JSON routes under ``/api`` give the same
answers as the CLI's ``--json``: ``analyze``, ``capacity``, ``policies``,
``size``. The curves and what-ifs use the scenario of the page's sidebar form.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.runs.recording import keep, run_headers, save_rows
from app.scenario_input import ScenarioInput, with_serving
from app.web import scenario_form
from app.web.context import Web
from app.web.guard import upload_route
from app.web.inputs import InputErrors, check, errors_of, strict_json
from app.web.json_response import JSONResponse
from app.web.model_fields import bounds
from app.web.panel_input import Problem, config_shape, form_values, sidebar_scenario, upload_text, uploaded_files
from app.web.routes.advise import panel_context as advise_panel_context
from app.web.versus_view import versus_view
from sim.analysis.capacity import CurveTooLarge, Served, cpu_curve, gpu_curve, load_curve_cost
from sim.analysis.whatif import compare
from sim.blocks.kv import DEFAULT_MODEL, MODELS, KvShape, model_shape, sizing
from sim.bounds.budget import Budget, OverBudget
from sim.calibration import measurements
from sim.calibration.longdocqa_files import Failure, parse_run
from sim.calibration.longdocqa_files import Run as LongDocQaRun
from sim.calibration.measurements import Measurement, MeasurementError
from sim.calibration.readers import Kind, MeasurementSet, Repeat, read_measurements
from sim.calibration.versus import measured_vs_predicted, scenario_for
from sim.sched.limit import step_limit
from sim.sched.serving import Serving
from sim.workloads.estimate import policies_cost, simulation_cost
from sim.workloads.questions import REPEAT_MODES
from sim.workloads.scenario import MAX_DOC_TOKENS, MAX_DOCS, Scenario

MAX_WEB_POINTS = 200  # one curve request stays within a few seconds
MAX_CHART_REQUESTS = 20_000  # points sent to the per-request chart
M = TypeVar("M", bound=BaseModel)


# -- inputs ------------------------------------------------------------------


class CapacityInput(with_serving(ScenarioInput)):  # type: ignore[misc]
    """A scenario (as for ``/api/simulate``, its serving fields too) and the curve to draw over it: ``kvscope
    capacity``'s flags."""

    tier: Literal["gpu", "cpu"] = Field(default="gpu", description="whose capacity to vary")
    points: int = Field(default=40, ge=1, le=MAX_WEB_POINTS, description="capacities on the grid")


class CapacityForm(BaseModel):
    """The page's curve fields (the sidebar's scenario comes with them): CapacityInput's tier and points, as the page names them."""

    model_config = ConfigDict(extra="ignore")

    curve_tier: Literal["gpu", "cpu"] = Field(default=CapacityInput.model_fields["tier"].default, description="whose capacity to vary")
    curve_points: int = Field(
        default=CapacityInput.model_fields["points"].default, ge=bounds(CapacityInput, "points")[0], le=MAX_WEB_POINTS,
        description="capacities on the grid",
    )


class SizeInput(BaseModel):
    """``kvscope size``'s flags: a known model, documents to hold, a GPU memory budget."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(default=DEFAULT_MODEL, description=f"a known model: {', '.join(MODELS)}")
    docs: int = Field(default=Scenario.model_fields["docs"].default, ge=1, le=MAX_DOCS, description="documents to hold")
    doc_tokens: int = Field(default=Scenario.model_fields["doc_tokens"].default, ge=1, le=MAX_DOC_TOKENS, description="tokens per document")
    chunk_size: int = Field(
        default=Scenario.model_fields["chunk_size"].default, ge=1, le=bounds(Scenario, "chunk_size")[1],
        description="CPU chunk size (only full chunks are stored)",
    )
    gpu_memory_gib: float | None = Field(default=None, gt=0, le=100_000, description="GPU memory left for KV cache, GiB")


class LongDocQaForm(BaseModel):
    """The flags of the long_doc_qa run whose two files were uploaded (its own names, as the page's form posts them)."""

    model_config = ConfigDict(extra="ignore")  # the form also carries the sidebar's scenario

    repeat_mode: Literal[REPEAT_MODES] = Field(default="random", description="its --repeat-mode")  # type: ignore[valid-type]
    shuffle_seed: int = Field(default=Repeat().seed, ge=0, le=2**31, description="its --shuffle-seed")
    hit_miss_ratio: str | None = Field(default=None, max_length=40, description="its --hit-miss-ratio, e.g. 3:1")
    document_length: int = Field(default=Repeat().doc_tokens, ge=1, le=MAX_DOC_TOKENS, description="its --document-length, tokens")
    run_config: str = Field(default="gpu+cpu", max_length=80, description="the server it measured (gpu, gpu+cpu)")


def _measurement_set(name: str, text: str) -> MeasurementSet:
    """An uploaded file of either kind (kvscope's or a long_doc_qa round, told apart by its columns)."""
    try:
        if name.endswith(".jsonl"):
            return MeasurementSet(measurements.parse_text(text, jsonl=True), "kvscope")
        return read_measurements(text if "\n" in text else text + "\n", name=name)
    except MeasurementError as exc:
        raise Problem("file", f"{name}: {exc}") from None


def _analysis(found: MeasurementSet, baseline: str) -> dict[str, Any]:
    """``kvscope analyze --json`` of an uploaded file's measurements (in a worker process)."""
    return {**measurements.analyze(found.rows, baseline), "failures": found.failures_json()}


def _curve_checked(budget: Budget, scenario: Scenario, tier: str, points: int, serving: Serving | None = None) -> None:
    """A curve over the budget is a Problem at ``points`` (the first thing to lower)."""
    try:
        load = Served(serving) if serving is not None and serving.stepped else Served()
        budget.check(load_curve_cost(scenario, tier, points, load), "points", "fewer points or a smaller scenario")
    except OverBudget as exc:
        raise Problem("points", str(exc)) from None


def _curve(scenario: Scenario, tier: str, points: int, serving: Serving | None = None, work_steps: int = 0) -> dict[str, Any]:
    """The curve (in a worker process); under load each point is served step by step, all within ``work_steps``."""
    load = Served(serving, step_limit(work_steps, serving)) if serving is not None and serving.stepped else Served()
    try:
        return (gpu_curve if tier == "gpu" else cpu_curve)(scenario, points, load=load)
    except CurveTooLarge as exc:
        raise Problem("points", str(exc)) from None
    except OverBudget as exc:  # a run under load past the work budget: its message names the rate
        raise Problem(exc.field, str(exc)) from None
    except ValueError as exc:  # what the stepped engine cannot serve
        raise Problem("", str(exc)) from None


def _versus(found: MeasurementSet, given: Scenario) -> dict[str, Any]:
    """``sim.calibration.versus`` in a worker process; a file that does not fit the scenario is a Problem at ``file``."""
    try:
        return measured_vs_predicted(found, given)
    except MeasurementError as exc:
        raise Problem("file", f"measured against predicted: {exc}") from None


async def versus_checked(web: Web, found: MeasurementSet, given: Scenario) -> dict[str, Any]:
    """The comparison, once the scenario it simulates is within the web's budget."""
    scenario, _, _ = scenario_for(found, given)
    try:
        web.workers.budget.per_request.check(simulation_cost(scenario, explain=False), "file", "a smaller file or scenario")
    except OverBudget as exc:
        raise Problem(exc.field, str(exc)) from None
    return await web.workers.run(_versus, found, given)


# -- views -------------------------------------------------------------------


def measurements_view(rows: list[Measurement], baseline: str, failures: list[Failure] | None = None) -> dict[str, Any]:
    """The seed-style table of the rows, the failed requests left out of it, and the per-request series for the chart."""
    report = measurements.analyze(rows, baseline)
    configs = list(dict.fromkeys(r.config for r in rows))
    shown = rows[:MAX_CHART_REQUESTS]
    # Each configuration's requests numbered from 0 in file order, as the page and the CLI number requests everywhere
    # (a run's seq): the configurations overlaid, not end to end.
    mine = {c: [r for r in shown if r.config == c] for c in configs}
    series = [
        {
            "config": c,
            "x": list(range(len(mine[c]))),
            "ttft_ms": [r.ttft_ms for r in mine[c]],
            "info": [[r.pass_, r.order, r.doc] for r in mine[c]],
        }
        for c in configs
    ]
    return {
        "report": report,
        "configs": configs,
        "baseline": baseline,
        "requests": len(rows),
        "failures": [f.to_dict() for f in failures or []],
        "chart": {"series": series, "truncated": len(rows) > len(shown)},
    }


def router(*, web: Web) -> APIRouter:
    routes = APIRouter(tags=["analysis"])
    templates = web.templates

    def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, context, status_code=status_code)

    def problem(request: Request, exc: Problem) -> HTMLResponse:
        return render(request, "analysis/problem.html", status_code=422, message=str(exc), field=exc.field)

    # -- the page --------------------------------------------------------------

    @routes.get("/ui/analysis", response_class=HTMLResponse, include_in_schema=False)
    def area(request: Request) -> HTMLResponse:
        return render(
            request, "analysis/panel.html", models=list(MODELS), default_model=DEFAULT_MODEL, repeat_modes=REPEAT_MODES,
            capacity_model=CapacityForm, ldq_model=LongDocQaForm,
            **advise_panel_context(),
        )

    @routes.post("/ui/analysis/measurements", response_class=HTMLResponse, include_in_schema=False)
    @upload_route
    async def measurements_panel(request: Request) -> HTMLResponse:
        form = await request.form()
        values = form_values(form)
        try:
            rows: list[Measurement] = []
            failures: list[Failure] = []
            kind: Kind = "long_doc_qa"
            upload = await upload_text(form.get("file"), "file")  # type: ignore[arg-type]
            if upload is not None:
                found = await web.workers.run(_measurement_set, *upload)
                kind = found.kind
                rows += found.rows
                failures += found.failures
            warmup = await upload_text(form.get("warmup"), "warmup")  # type: ignore[arg-type]
            query = await upload_text(form.get("query"), "query")  # type: ignore[arg-type]
            if (warmup is None) != (query is None):
                raise Problem("query" if query is None else "warmup", "a long_doc_qa run needs both warmup_round.csv and query_round.csv")
            if warmup is not None and query is not None:
                run = await web.workers.run(_long_doc_qa_run, values, warmup, query)
                rows += run.rows
                failures += run.failures
            if not rows:
                raise Problem("file", "choose a measurement file, or a long_doc_qa run's two files")
        except Problem as exc:
            return problem(request, exc)
        baseline = values.get("baseline", "").strip() or "gpu"
        files = await uploaded_files(form.get("file"), form.get("warmup"), form.get("query"))
        run_id, _ = keep(lambda: save_rows(web.runs, "analysis", files, rows, failures=[f.to_dict() for f in failures]))
        view = await web.workers.run(measurements_view, rows, baseline, failures)
        versus, versus_problem = None, None
        try:  # beside the file's statistics, not instead of them: a file the scenario does not fit is still analysed
            versus = versus_view(await versus_checked(web, MeasurementSet(rows, kind, failures), sidebar_scenario(values)))
        except Problem as exc:
            versus_problem = str(exc)
        return render(request, "analysis/measurements.html", view=view, run_id=run_id, versus=versus, versus_problem=versus_problem)

    @routes.post("/ui/analysis/capacity", response_class=HTMLResponse, include_in_schema=False)
    async def capacity_panel(request: Request) -> HTMLResponse:
        values = form_values(await request.form())
        try:
            scenario = sidebar_scenario(values)
            fields = _validated(CapacityForm, {k: values[k].strip() for k in CapacityForm.model_fields if values.get(k, "").strip()})
            tier, points = fields.curve_tier, fields.curve_points
            if tier == "cpu" and scenario.cpu_capacity_tokens is None:
                raise Problem("curve_tier", "the scenario has no CPU tier: give it a CPU size in the sidebar")
            _curve_checked(web.workers.budget.per_request, scenario, tier, points)
            curve = await web.workers.run(_curve, scenario, tier, points)
        except Problem as exc:
            return problem(request, exc)
        return render(request, "analysis/capacity.html", curve=curve, chart=_chart(curve))

    @routes.post("/ui/analysis/policies", response_class=HTMLResponse, include_in_schema=False)
    async def policies_panel(request: Request) -> HTMLResponse:
        try:
            scenario = sidebar_scenario(form_values(await request.form()))
            _policies_checked(web.workers.budget.per_request, scenario)
        except Problem as exc:
            return problem(request, exc)
        return render(request, "analysis/policies.html", result=await web.workers.run(compare, scenario))

    @routes.post("/ui/analysis/size", response_class=HTMLResponse, include_in_schema=False)
    @upload_route
    async def size_panel(request: Request) -> HTMLResponse:
        form = await request.form()
        values = form_values(form)
        try:
            upload = await upload_text(form.get("config"), "config")  # type: ignore[arg-type]
            shape = _shape(values.get("model", DEFAULT_MODEL), upload)
            body = _size_input(values)
        except Problem as exc:
            return problem(request, exc)
        return render(request, "analysis/size.html", size=sizing(shape, body.docs, body.doc_tokens, body.chunk_size, body.gpu_memory_gib))

    # -- the API ---------------------------------------------------------------

    @routes.post("/api/analyze", summary="Analyze a measurement file", response_class=JSONResponse)
    @upload_route
    async def analyze_route(
        file: Annotated[UploadFile, File(description="a per-request measurement file, CSV or JSONL, or a long_doc_qa round CSV")],
        baseline: Annotated[str, Form(description="configuration the speed-ups are measured against")] = "gpu",
    ) -> JSONResponse:
        """``kvscope analyze FILE --json``: ``cells`` (n, p50, mean, p90 per configuration and pass), ``speedups``
        against the baseline, ``pass_speedups`` against each configuration's first pass. A bad line is a 422 naming
        it; nothing of a bad file is kept."""
        try:
            upload = await upload_text(file, "file")
            if upload is None:
                raise Problem("file", "no file was uploaded")
            found = await web.workers.run(_measurement_set, *upload)
        except Problem as exc:
            raise exc.for_body() from None
        report = await web.workers.run(_analysis, found, baseline)
        files = await uploaded_files(file)
        kept = run_headers(*keep(lambda: save_rows(web.runs, "analysis", files, found.rows, failures=found.failures_json())))
        return JSONResponse(report, headers=kept)

    @routes.post("/api/compare", summary="A measurement file beside the prediction", response_class=JSONResponse)
    @upload_route
    async def compare_route(
        request: Request,
        file: Annotated[UploadFile, File(description="a per-request measurement file (CSV or JSONL) or a long_doc_qa round CSV")],
    ) -> JSONResponse:
        """Measured against predicted: per configuration of the scenario, every request and every pass (p50, mean,
        p90, p99) measured beside predicted, with the error (predicted minus measured, in ms and in % of measured).
        ``file`` is a measurement file (kvscope's CSV or JSONL, or a long_doc_qa round); the other form fields are
        a scenario as ``/api/simulate``'s body names them (``preset``, ``cpu_gb``, ``costs`` as JSON, ...). The
        file's own documents, prompt length and passes are simulated where it names them (``scenario_source``:
        ``file``), with that scenario's tiers, sizes and costs; else the scenario itself (``given``). A file whose
        requests do not fit the scenario is a 422 naming the first that does not."""
        form = await request.form()
        fields = {k: v for k, v in form_values(form).items() if k != "file"}
        try:
            try:
                if "costs" in fields:
                    fields["costs"] = scenario_form.json_value(fields["costs"])
                given = check(ScenarioInput(**fields))
            except ValidationError as exc:
                raise InputErrors(errors_of(exc)) from None
            upload = await upload_text(file, "file")
            if upload is None:
                raise Problem("file", "no file was uploaded")
            found = await web.workers.run(_measurement_set, *upload)
            return JSONResponse(await versus_checked(web, found, given))
        except InputErrors as exc:
            raise exc.for_body() from None
        except Problem as exc:
            raise exc.for_body() from None

    @routes.post("/api/capacity", summary="Capacity curves of a scenario", response_class=JSONResponse)
    async def capacity_route(body: Annotated[CapacityInput, strict_json(CapacityInput)]) -> JSONResponse:
        """``kvscope capacity --json``: per capacity and pass, hit tokens and predicted TTFT; ``marks`` holds the
        scenario's own capacity and the thresholds of ``kvscope sweep``. With ``/api/simulate``'s serving fields
        (``concurrency``, ``rate``, vLLM's scheduler flags) every point is served by vLLM's scheduler loop."""
        try:
            scenario = check(body)
            if body.tier == "cpu" and scenario.cpu_capacity_tokens is None:
                raise Problem("tier", "the scenario has no CPU tier (no_cpu, or no cpu_gb / cpu_tokens)")
            try:
                serving = body.serving()
            except ValidationError as exc:
                raise InputErrors(errors_of(exc)) from None
            budget = web.workers.budget.per_request
            _curve_checked(budget, scenario, body.tier, body.points, serving)
            return await web.workers.run_json(_curve, scenario, body.tier, body.points, serving, budget.work_steps)
        except InputErrors as exc:
            raise exc.for_body() from None
        except Problem as exc:
            raise exc.for_body() from None

    @routes.post("/api/policies", summary="Every eviction policy on a scenario", response_class=JSONResponse)
    async def policies_route(body: Annotated[ScenarioInput, strict_json(ScenarioInput)]) -> JSONResponse:
        """``kvscope policies --json``: the GPU tier alone under each GPU policy, and the CPU tier under each
        policy its backend offers; per policy, pass summaries and totals (``current`` marks the scenario's policy)."""
        try:
            scenario = check(body)
            _policies_checked(web.workers.budget.per_request, scenario)
        except InputErrors as exc:
            raise exc.for_body() from None
        except Problem as exc:
            raise exc.for_body() from None
        return await web.workers.run_json(compare, scenario)

    @routes.post("/api/size", summary="Size a CPU tier and a GPU KV cache", response_class=JSONResponse)
    def size_route(body: Annotated[SizeInput, strict_json(SizeInput)]) -> JSONResponse:
        """``kvscope size --json``: KV bytes per token, the CPU memory for the documents, the GPU tokens a budget holds."""
        try:
            shape = _shape(body.model, None)
        except Problem as exc:
            raise exc.for_body() from None
        return JSONResponse(sizing(shape, body.docs, body.doc_tokens, body.chunk_size, body.gpu_memory_gib))

    return routes


def _policies_checked(budget: Budget, scenario: Scenario) -> None:
    try:
        budget.check(policies_cost(scenario))
    except OverBudget as exc:
        raise Problem(exc.field, str(exc)) from None


def _long_doc_qa_run(values: dict[str, str], warmup: tuple[str, str], query: tuple[str, str]) -> LongDocQaRun:
    names = LongDocQaForm.model_fields
    flags = _validated(LongDocQaForm, {k: values[k].strip() for k in names if values.get(k, "").strip()})
    try:
        return parse_run(
            warmup, query, flags.repeat_mode, flags.run_config,
            shuffle_seed=flags.shuffle_seed, hit_miss_ratio=flags.hit_miss_ratio, doc_tokens=flags.document_length,
        )
    except MeasurementError as exc:
        raise Problem("query" if "query" in str(exc) else "warmup", str(exc)) from None


def _shape(model: str, config: tuple[str, str] | None) -> KvShape:
    if config is not None:
        return config_shape(config, "config")
    try:
        return model_shape(model)
    except ValueError as exc:
        raise Problem("model", str(exc)) from None


def _size_input(values: dict[str, str]) -> SizeInput:
    fields = {k: values[k].strip() for k in ("docs", "doc_tokens", "chunk_size", "gpu_memory_gib") if values.get(k, "").strip()}
    return _validated(SizeInput, fields)


def _validated(model: type[M], fields: dict[str, str]) -> M:
    """The panel's fields as its model; the first error is a Problem at its field, with the model's limit."""
    try:
        return model(**fields)
    except ValidationError as exc:
        err = errors_of(exc)[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        raise Problem(name, f"{name}: {err['msg']}") from None


def _chart(curve: dict[str, Any]) -> dict[str, Any]:
    """What the capacity chart draws: x per point (tokens for the GPU, GiB for the CPU), hits and mean TTFT per pass."""
    gib = curve["tier"] == "cpu"
    lines = []
    for c in curve["curves"]:
        xs = [p["capacity_gib"] if gib else p["capacity_tokens"] for p in c["points"]]
        for i, first in enumerate(c["points"][0]["passes"]):
            hits_key = "cpu_hit_tokens" if gib else "gpu_hit_tokens"
            lines.append(
                {
                    "granularity": c["granularity"],
                    "pass": first["pass"],
                    "order": first["order"],
                    "x": xs,
                    "hits": [p["passes"][i][hits_key] for p in c["points"]],
                    "mean_ms": [p["passes"][i]["mean_ms"] for p in c["points"]],
                }
            )
    marks = [
        {**m, "x": round(m["capacity_tokens"] * curve["scenario"]["kv_bytes_per_token"] / 2**30, 6) if gib else m["capacity_tokens"]}
        for m in curve["marks"]
    ]
    return {"tier": curve["tier"], "x_title": "CPU tier, GiB" if gib else "GPU KV cache, tokens", "lines": lines, "marks": marks}
