"""A file imported as a run over HTTP, under the budget a simulation has: the upload spilled to disk as it arrives,
read and checked in one of the workers (the queue, a deadline: ``import_seconds``, and the memory cap), then kept
with its rows streamed from disk into SQLite off the event loop. The server holds a chunk of the upload at a time,
never its rows."""

from __future__ import annotations

import tempfile
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from app.runs import importer
from app.web.context import Web
from app.web.panel_input import MAX_UPLOAD_BYTES, Problem

CHUNK_BYTES = 2**20


async def import_upload(web: Web, upload: UploadFile, field: str = "file") -> int:
    """The kept run's id; ``Problem`` (naming ``field``) for a file that cannot be imported or would pass the memory
    budget, ``StoreFull`` past the database's bounds, the workers' ``Busy`` or ``TimedOut``."""
    name = upload.filename or "upload"
    budget = web.workers.budget
    with tempfile.TemporaryDirectory(prefix="kvscope-import-") as folder:
        path = Path(folder) / "upload"
        size = 0
        with open(path, "wb") as out:
            while chunk := await upload.read(CHUNK_BYTES):
                size += len(chunk)
                if size > MAX_UPLOAD_BYTES:
                    raise Problem(field, f"{name}: larger than the limit of {MAX_UPLOAD_BYTES // 2**20} MiB")
                out.write(chunk)
        if (need := importer.peak_bytes(size)) > budget.memory:
            raise Problem(field, f"{name}: reading its {size:,} bytes takes about {need // 2**20:,} MiB, over this "
                                 f"server's memory budget of {budget.memory // 2**20:,} MiB (kvscope serve --budget memory=...)")
        try:
            prepared = await web.workers.run(importer.prepare_file, str(path), name, folder, web.runs.max_records,
                                             seconds=budget.import_seconds)
        except importer.ImportProblem as exc:
            raise Problem(field, str(exc)) from None
        return await run_in_threadpool(importer.save, web.runs, prepared)
