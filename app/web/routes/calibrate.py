"""Calibrating the cost model on the page and over the API, and the costs the sidebar's scenario runs with.

``POST /ui/analysis/calibrate`` fits an uploaded measurement file as ``kvscope calibrate`` does (a file without
hit-token columns, or a table of cells, is re-simulated with the sidebar's scenario) and shows the constants, R^2,
the per-cell errors, the profile to download and "Use these costs". ``POST /ui/analysis/profile`` reads a saved
profile and uses it at once. ``/ui/costs`` draws the sidebar's costs line, whose hidden ``costs`` field (the
constants as JSON) every post of the sidebar's form then carries. ``POST /api/calibrate`` is ``calibrate --json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, File, Request, UploadFile
from fastapi.responses import HTMLResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile as StarletteUpload

from app.costs_profile import profile_name, profile_text
from app.runs.recording import keep, run_headers, save_rows
from app.scenario_input import ScenarioInput
from app.web.context import Web
from app.web.guard import upload_route
from app.web.inputs import InputErrors, check, errors_of
from app.web.json_response import JSONResponse
from app.web.panel_input import Problem, form_values, sidebar_scenario, upload_text, uploaded_files
from app.web.workers import Workers
from sim.bounds.budget import OverBudget
from sim.calibration import measurements
from sim.calibration.calibrate import SAMPLE_COEFFICIENTS, Calibration, calibrate_text, parse_profile
from sim.calibration.measurements import MeasurementError
from sim.costs.model import CostModel
from sim.numeric.identify import Identifiability
from sim.workloads.estimate import simulation_cost
from sim.workloads.scenario import Scenario

MAX_LABEL_CHARS = 160


@dataclass(frozen=True, slots=True)
class CostsChoice:
    """Costs the sidebar's scenario runs with instead of the server's: the constants as the form posts them, and
    where they came from."""

    json: str
    label: str


@dataclass(frozen=True, slots=True)
class Constant:
    name: str
    value: float
    meaning: str
    undetermined: bool = False  # the data says nothing about it: left at 0, or the disk cost derived from the CPU's
    std_error: float | None = None  # one standard error, when the fit determines the constant
    confounded: tuple[str, ...] | None = None  # the data fix only its combination with these (not determined)


@dataclass(frozen=True, slots=True)
class CalibrationView:
    """What the panel shows of a fit, and what it offers: the profile to download, the costs to use."""

    name: str
    calibration: Calibration
    constants: list[Constant]
    profile_text: str
    download_name: str
    costs: CostsChoice

    @property
    def identifiability_warnings(self) -> list[str]:
        identified = self.calibration.identifiability
        return identified.warnings() if identified is not None else []

    @property
    def fitted(self) -> str:
        c = self.calibration
        return f"{c.requests:,} requests" if c.requests else f"{len(c.cells)} cells"


def constants(costs: CostModel, undetermined: tuple[str, ...] = (), identified: Identifiability | None = None) -> list[Constant]:
    fields = CostModel.model_fields
    out = []
    for n in SAMPLE_COEFFICIENTS:
        se = identified.std_errors.get(n) if identified is not None else None
        confounded = identified.confounded.get(n) if identified is not None else None
        out.append(Constant(n, getattr(costs, n), fields[n].description or "", n in undetermined, se, confounded))
    return out


def costs_choice(costs: CostModel, label: str, named: bool = False) -> CostsChoice:
    """``named``: the constants' ``source`` becomes the label too, so that a run made with them says where they came from."""
    label = label[:MAX_LABEL_CHARS]
    return CostsChoice((costs.model_copy(update={"source": label}) if named else costs).model_dump_json(), label)


def calibration_view(name: str, calibration: Calibration) -> CalibrationView:
    label = f"calibrated from {name} (R² {calibration.r2:.4f})"
    return CalibrationView(
        name=name,
        calibration=calibration,
        constants=constants(calibration.costs, calibration.undetermined, calibration.identifiability),
        profile_text=profile_text(calibration.profile()),
        download_name=profile_name(name),
        costs=costs_choice(calibration.costs, label, named=True),
    )


async def _required_upload(file: Any, field: str, missing: str) -> tuple[str, str]:
    """(name, text) of the file uploaded as ``field``; ``missing`` says what to choose when there is none."""
    upload = await upload_text(file if isinstance(file, StarletteUpload) else None, field)
    if upload is None:
        raise Problem(field, missing)
    return upload


async def _calibrate(workers: Workers, name: str, text: str, scenario: Scenario) -> Calibration:
    """The CLI's fit on a worker (re-simulating a large scenario takes a while); errors name the file."""
    try:
        workers.budget.per_request.check(simulation_cost(scenario, records=False), "scenario")
    except OverBudget as exc:
        raise Problem("scenario", f"re-simulating the run's scenario: {exc}") from None
    try:
        return await workers.run(calibrate_text, text, scenario, name.endswith(".jsonl"), name)
    except MeasurementError as exc:
        raise Problem("file", f"{name}: {exc}") from None
    except ValueError as exc:  # e.g. the data cannot tell two costs apart
        raise Problem("file", f"{name}: cannot fit the cost model ({exc})") from None


async def _keep(
    web: Web, calibration: Calibration, upload: tuple[str, str], scenario: Scenario, files: list[tuple[str, bytes]]
) -> tuple[int | None, str | None]:
    """Keep the calibration as a run: the file's rows (a table of cells has none), the fit, the fitted constants."""
    try:
        rows = measurements.parse_text(upload[1], jsonl=upload[0].endswith(".jsonl") or upload[1].lstrip().startswith("{"))
    except MeasurementError:
        rows = []  # a p50/mean table: kept as the file and the fit
    profile = calibration.profile()
    return await run_in_threadpool(
        keep, lambda: save_rows(web.runs, "calibration", files, rows, result=profile, costs=profile["costs"], scenario=scenario)
    )


def router(*, web: Web) -> APIRouter:
    routes = APIRouter(tags=["analysis"])
    templates = web.templates

    def render(request: Request, name: str, status_code: int = 200, headers: dict[str, str] | None = None, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, context, status_code=status_code, headers=headers)

    def problem(request: Request, exc: Problem, headers: dict[str, str] | None = None) -> HTMLResponse:
        return render(request, "analysis/problem.html", status_code=422, headers=headers, message=str(exc), field=exc.field)

    # -- the page --------------------------------------------------------------

    @routes.post("/ui/analysis/calibrate", response_class=HTMLResponse, include_in_schema=False)
    @upload_route
    async def calibrate_panel(request: Request) -> HTMLResponse:
        form = await request.form()
        try:
            upload = await _required_upload(form.get("file"), "file", "choose a measurement file")
            scenario = sidebar_scenario(form_values(form))
            calibration = await _calibrate(web.workers, *upload, scenario)
        except Problem as exc:
            return problem(request, exc)
        run_id, _ = await _keep(web, calibration, upload, scenario, await uploaded_files(form.get("file")))
        return render(request, "analysis/calibration.html", view=calibration_view(upload[0], calibration), run_id=run_id)

    @routes.post("/ui/analysis/profile", response_class=HTMLResponse, include_in_schema=False)
    @upload_route
    async def profile_panel(request: Request) -> HTMLResponse:
        """A saved profile: shown, and put in the sidebar's form at once."""
        form = await request.form()
        try:
            name, text = await _required_upload(form.get("profile"), "profile", "choose a cost profile (JSON, as kvscope calibrate saves it)")
            try:
                costs, fit = parse_profile(text, name)
            except ValueError as exc:
                raise Problem("profile", str(exc)) from None
        except Problem as exc:
            return problem(request, exc)
        r2 = fit.get("r2")
        label = f"profile {name}" + (f" (R² {r2:.4f})" if isinstance(r2, int | float) else "")
        return render(request, "analysis/profile.html", file_name=name, fit=fit, constants=constants(costs), costs=costs_choice(costs, label, named=True))

    @routes.get("/ui/costs", response_class=HTMLResponse, include_in_schema=False)
    def default_costs_line(request: Request) -> HTMLResponse:
        """The sidebar's costs line without costs of its own: the server's are used."""
        return render(request, "partials/costs.html")

    @routes.post("/ui/costs", response_class=HTMLResponse, include_in_schema=False)
    async def costs_line(request: Request) -> HTMLResponse:
        """The sidebar's costs line carrying the posted constants ("Use these costs")."""
        values = form_values(await request.form())
        try:
            costs = CostModel.model_validate_json(values.get("costs", ""))
        except ValidationError as exc:
            detail = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'costs'}: {e['msg']}" for e in errors_of(exc))
            # Shown beside the button; the sidebar keeps the costs it had.
            return problem(request, Problem("costs", f"not cost constants ({detail})"),
                           headers={"HX-Retarget": "#calibrate-use-status", "HX-Reswap": "innerHTML"})
        label = values.get("label", "").strip() or "custom"
        return render(request, "partials/costs.html", costs=costs_choice(costs, label))

    # -- the API ---------------------------------------------------------------

    @routes.post("/api/calibrate", summary="Fit the cost model to a measurement file", response_class=JSONResponse)
    @upload_route
    async def calibrate_route(
        request: Request,
        file: Annotated[UploadFile, File(description="a per-request measurement file (CSV or JSONL), a long_doc_qa round CSV, or a table of p50_ms and mean_ms per cell")],
    ) -> JSONResponse:
        """``kvscope calibrate FILE --json``: the cost profile (``costs`` and ``fit``) that ``simulate --costs`` and
        ``serve --costs`` read. The other form fields are the scenario the run used, as ``/api/simulate``'s body
        names them (``preset``, ``docs``, ``passes``, ...): a file without hit-token columns, and a table, are fitted
        by re-simulating it. A bad line or field is a 422 naming it."""
        fields = {k: v for k, v in form_values(await request.form()).items() if k != "file"}
        try:
            if "costs" in fields:
                raise Problem("costs", "costs are what calibration fits; give the measurements as file")
            try:
                scenario = check(ScenarioInput(**fields))
            except ValidationError as exc:
                raise InputErrors(errors_of(exc)) from None
            upload = await _required_upload(file, "file", "no file was uploaded")
            calibration = await _calibrate(web.workers, *upload, scenario)
        except InputErrors as exc:
            raise exc.for_body() from None
        except Problem as exc:
            raise exc.for_body() from None
        kept = run_headers(*await _keep(web, calibration, upload, scenario, await uploaded_files(file)))
        return JSONResponse(calibration.profile(), headers=kept)

    return routes

