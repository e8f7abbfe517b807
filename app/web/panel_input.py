"""What a page panel's form posts: an uploaded text file, the sidebar's scenario, and the ``Problem`` a panel shows."""

from __future__ import annotations

from typing import Any

from fastapi import UploadFile
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile as StarletteUpload

from app.web import scenario_form
from app.web.inputs import InputErrors, check, errors_of
from sim.blocks.kv import KvShape, shape_from_config
from sim.bounds import jsontext, textfile
from sim.workloads.scenario import Scenario

MAX_UPLOAD_BYTES = 16 * 2**20  # a per-request file of ~100,000 requests


class Problem(Exception):
    """Bad input for a panel: ``field`` (a form field's name, or "" for the whole input) and why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    def __reduce__(self) -> tuple[type[Problem], tuple[str, str]]:
        return type(self), (self.field, str(self))  # raised in a worker process, re-raised in the server

    def for_body(self) -> RequestValidationError:
        return RequestValidationError([{"type": "value_error", "loc": ("body", self.field) if self.field else ("body",), "msg": str(self)}])


async def upload_text(file: UploadFile | None, field: str) -> tuple[str, str] | None:
    """(name, text) of an uploaded file, or None when none was chosen."""
    if file is None or not file.filename:
        return None
    data = await file.read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        raise Problem(field, f"{file.filename}: larger than the limit of {MAX_UPLOAD_BYTES // 2**20} MiB")
    try:
        return file.filename, textfile.decode(data)  # as the CLI reads a file: BOM dropped, UTF-16 and binary named
    except textfile.FileProblem as exc:
        raise Problem(field, f"{file.filename}: {exc}") from None


async def uploaded_files(*files: Any) -> list[tuple[str, bytes]]:
    """(name, bytes as uploaded) of each chosen file, read again from its start: what a kept run records of it."""
    out = []
    for file in files:
        if isinstance(file, StarletteUpload) and file.filename:  # FastAPI's UploadFile is one too
            await file.seek(0)
            out.append((file.filename, await file.read(MAX_UPLOAD_BYTES + 1)))
    return out


def config_shape(upload: tuple[str, str], field: str) -> KvShape:
    """The KV shape of an uploaded ``config.json``, or a ``Problem`` at ``field`` naming the file and what is wrong."""
    name, text = upload
    try:
        config = jsontext.loads(text)
    except ValueError as exc:
        raise Problem(field, f"{name}: {exc}") from None
    try:
        return shape_from_config(config, name)
    except (ValueError, AttributeError) as exc:
        raise Problem(field, str(exc) if isinstance(exc, ValueError) else f"{name}: not a JSON object") from None


def form_values(form: Any) -> dict[str, str]:
    return {k: v for k, v in form.items() if isinstance(v, str)}


def sidebar_scenario(values: dict[str, str]) -> Scenario:
    """The sidebar form's scenario; its errors name the sidebar's fields."""
    try:
        return check(scenario_form.parse(values))
    except ValidationError as exc:
        errors = errors_of(exc)
    except InputErrors as exc:
        errors = exc.errors
    detail = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'scenario'}: {e['msg']}" for e in errors)
    raise Problem("scenario", f"the scenario in the sidebar cannot be simulated ({detail})")
