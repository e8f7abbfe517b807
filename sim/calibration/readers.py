"""One door for measurement files: kvscope's per-request CSV/JSONL and LMCache long_doc_qa's rounds, told apart by
their columns.

``read_measurements(text_or_path)`` is what every command and upload that
accepts measurements calls. A kvscope file has ``config, pass, ..., ttft_ms``
(``sim.calibration.measurements``); a long_doc_qa round has ``prompt_id`` and ``ttft`` in
seconds (``sim.workloads.longdocqa``). Given a path to one round, the other round is
read too when it lies beside it (``warmup_round.csv`` and
``query_round.csv``), and a folder holding both is read as the pair. Failed
requests of a long_doc_qa run are returned as ``failures``, never as rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sim.bounds import textfile
from sim.calibration.longdocqa_files import QUERY_FILE, WARMUP_FILE, Failure, is_round, parse_run
from sim.calibration.measurements import Measurement, MeasurementError, parse_text

Kind = Literal["kvscope", "long_doc_qa"]


@dataclass(frozen=True, slots=True)
class Repeat:
    """How a long_doc_qa run ordered its query round (its flags), when known."""

    mode: str | None = None
    count: int | None = None
    seed: int = 0
    hit_miss_ratio: str | None = None
    docs: int | None = None
    doc_tokens: int = 20_000


@dataclass(slots=True)
class MeasurementSet:
    """Rows for the statistics, the failed requests left out of them, and the format they came in."""

    rows: list[Measurement]
    kind: Kind
    failures: list[Failure] = field(default_factory=list)
    in_flight: int = 1  # the most requests the measured server had at once (long_doc_qa's request times say it)

    def failures_json(self) -> list[dict[str, Any]]:
        return [f.to_dict() for f in self.failures]


def _first_line(text: str) -> str:
    return text.lstrip("\ufeff").lstrip().split("\n", 1)[0]


def kind_of(text: str) -> Kind | None:
    """kvscope's or long_doc_qa's, from the first line (JSONL or a CSV header); None when neither."""
    head = _first_line(text)
    if head.startswith("{"):
        return "kvscope"
    # Split by hand: the csv module refuses an overlong field, and a header never quotes a comma.
    names = [h.strip().strip('"') for h in head.split(",")]
    if is_round(names):
        return "long_doc_qa"
    if "ttft_ms" in names:
        return "kvscope"
    return None


def _round_pass(name: str) -> int:
    """A lone round file's pass: the warmup is pass 1, anything else the query round (pass 2)."""
    return 1 if "warmup" in Path(name).name.lower() else 2


def read_measurements(
    text_or_path: str | Path, *, name: str | None = None, config: str | None = None, repeat: Repeat | None = None
) -> MeasurementSet:
    """Read measurements from a path (a file or a long_doc_qa folder) or from a file's text.

    A ``str`` holding a newline is text, anything else a path. ``name`` is the
    file name of a text (it tells a warmup round from a query round); ``config``
    names a long_doc_qa run's configuration (default: its folder's name, or
    ``long_doc_qa``). Raises ``MeasurementError`` naming the file and line.
    """
    repeat = repeat or Repeat()
    if isinstance(text_or_path, str) and "\n" in text_or_path:
        return _from_text(text_or_path, name or "the file", config, repeat, sibling=None)
    path = Path(text_or_path)
    if path.is_dir():
        warmup, query = path / WARMUP_FILE, path / QUERY_FILE
        if not (warmup.is_file() and query.is_file()):
            raise MeasurementError(f"a folder is read as a long_doc_qa run and needs {WARMUP_FILE} and {QUERY_FILE}")
        return _pair(_text(warmup), _text(query), warmup.name, query.name, config or path.resolve().name, repeat)
    text = _text(path, named=False)
    other = path.with_name(QUERY_FILE if _round_pass(path.name) == 1 else WARMUP_FILE)
    sibling = other if other != path and other.is_file() else None
    return _from_text(text, path.name, config or path.resolve().parent.name, repeat, sibling, jsonl=path.suffix == ".jsonl", caller_names=True)


def _text(path: Path, named: bool = True) -> str:
    """The file's text; an error names the file unless it is the one the caller gave (who names it already)."""
    try:
        return textfile.read_text(path)
    except textfile.FileProblem as exc:
        raise MeasurementError(f"{path.name}: {exc}" if named else str(exc)) from None


def _from_text(
    text: str, name: str, config: str | None, repeat: Repeat, sibling: Path | None, jsonl: bool = False, caller_names: bool = False
) -> MeasurementSet:
    """``caller_names``: the caller names the file in its message already (a path it gave), so this one does not."""
    kind = "kvscope" if jsonl else kind_of(text)
    if kind == "kvscope":
        return MeasurementSet(parse_text(text, jsonl=jsonl or _first_line(text).startswith("{")), "kvscope")
    if kind is None:
        raise MeasurementError(
            f"{'' if caller_names else name + ' '}line 1: neither a kvscope measurement file (config, pass, order, seq, doc, prompt_tokens, "
            "ttft_ms) nor a long_doc_qa round (prompt_id, request_start, ttft, request_end)"
        )
    config = config or "long_doc_qa"
    if sibling is not None:
        other = _text(sibling)
        if _round_pass(name) == 1:
            return _pair(text, other, name, sibling.name, config, repeat)
        return _pair(other, text, sibling.name, name, config, repeat)
    if _round_pass(name) == 1:
        return _pair(text, None, name, None, config, repeat)
    return _pair(None, text, None, name, config, repeat)


def _pair(
    warmup: str | None, query: str | None, warmup_name: str | None, query_name: str | None, config: str, repeat: Repeat
) -> MeasurementSet:
    run = parse_run(
        (warmup_name or WARMUP_FILE, warmup) if warmup is not None else None,
        (query_name or QUERY_FILE, query) if query is not None else None,
        repeat.mode, config, repeat.docs, repeat.count, repeat.seed, repeat.hit_miss_ratio, repeat.doc_tokens,
    )
    return MeasurementSet(run.rows, "long_doc_qa", run.failures, run.in_flight)
