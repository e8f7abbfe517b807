"""``read_measurements``: kvscope's files and LMCache long_doc_qa's rounds, old and new, through every door.

long_doc_qa's rounds are written here from their documented columns (see
``sim/workloads/longdocqa.py``): ``prompt_id, request_start, ttft, request_end,
ttft_time`` (seconds; ``ttft`` 0.0 when a request produced no output), and in
newer versions also ``successful`` (False with ``ttft`` -1 for a failed
request) and ``is_miss``. pandas writes booleans as ``True`` / ``False``.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from app.cli import main
from sim.calibration import measurements
from sim.calibration.measurements import MeasurementError
from sim.calibration.readers import Repeat, kind_of, read_measurements

OLD = ("prompt_id", "request_start", "ttft", "request_end", "ttft_time")
NEW = ("prompt_id", "request_start", "ttft", "request_end", "successful", "is_miss", "ttft_time")


def write_round(path: Path, ttfts_s: list[float], columns: tuple[str, ...] = OLD, misses: set[int] = frozenset()) -> Path:
    """One round, one request after another; a ttft of -1 is a failed request (successful False in the new format)."""
    lines, start = [",".join(columns)], 0.0
    for i, ttft in enumerate(ttfts_s):
        end = start + max(ttft, 0) + 0.5
        values = {
            "prompt_id": i, "request_start": f"{start:.6f}", "ttft": ttft, "request_end": f"{end:.6f}",
            "successful": "False" if ttft == -1 else "True", "is_miss": "True" if i in misses else "False",
            "ttft_time": f"{start + ttft:.6f}",
        }
        lines.append(",".join(str(values[c]) for c in columns))
        start = end
    path.write_text("\n".join(lines) + "\n")
    return path


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_the_format_is_told_by_the_columns() -> None:
    assert kind_of(",".join(OLD) + "\n0,0,0.5,1,0.5\n") == "long_doc_qa"
    assert kind_of(",".join(reversed(NEW)) + "\n") == "long_doc_qa"  # by name, in any order
    assert kind_of(",".join(measurements.REQUIRED) + "\n") == "kvscope"
    assert kind_of('{"config": "gpu"}\n') == "kvscope"
    assert kind_of("a,b,c\n") is None
    with pytest.raises(MeasurementError, match="neither a kvscope measurement file .* nor a long_doc_qa round"):
        read_measurements("a,b\n1,2\n", name="x.csv")


def test_an_old_run_reads_the_same_from_its_folder_either_file_or_the_pair(tmp_path: Path) -> None:
    run_dir = tmp_path / "lmcache"
    run_dir.mkdir()
    write_round(run_dir / "warmup_round.csv", [0.5, 0.7])
    write_round(run_dir / "query_round.csv", [0.05, 0.04, 0.06, 0.03])
    repeat = Repeat("tile", 2)
    from_folder = read_measurements(run_dir, repeat=repeat)
    assert from_folder.kind == "long_doc_qa" and not from_folder.failures
    # The folder's name "lmcache" reads as gpu+cpu; pass 1 is the warmup, pass 2 tile*2 (docs 0, 1, 0, 1).
    assert [(r.config, r.pass_, r.seq, r.doc, r.ttft_ms) for r in from_folder.rows] == [
        ("gpu+cpu", 1, 0, 0, 500.0), ("gpu+cpu", 1, 1, 1, 700.0),
        ("gpu+cpu", 2, 2, 0, 50.0), ("gpu+cpu", 2, 3, 1, 40.0), ("gpu+cpu", 2, 4, 0, 60.0), ("gpu+cpu", 2, 5, 1, 30.0),
    ]
    for one in ("warmup_round.csv", "query_round.csv"):
        assert read_measurements(run_dir / one, repeat=repeat).rows == from_folder.rows  # the sibling is found


def test_failed_requests_are_counted_and_left_out_of_the_statistics(tmp_path: Path) -> None:
    write_round(tmp_path / "warmup_round.csv", [0.5, 0.7, 0.6], NEW)
    # Query prompt 2 failed (ttft -1, successful False); prompt 4 is a forced miss that succeeded.
    write_round(tmp_path / "query_round.csv", [0.05, 0.04, -1, 0.06, 0.65, 0.03], NEW, misses={4})
    found = read_measurements(tmp_path / "query_round.csv")
    assert [(f.pass_, f.prompt_id, f.line) for f in found.failures] == [(2, 2, 4)]  # line 4: header + prompts 0, 1, 2
    assert "successful is False" in found.failures[0].reason
    query = [r for r in found.rows if r.pass_ == 2]
    assert [r.seq for r in query] == [3, 4, 6, 7, 8]  # seq 5 (prompt 2) is the failure: numbering is kept
    # Mean over the five that succeeded: (50 + 40 + 60 + 650 + 30) / 5 = 166 ms; p50 of 30, 40, 50, 60, 650 = 50.
    cell = next(c for c in measurements.analyze(found.rows)["cells"] if c["pass"] == 2)
    assert (cell["n"], cell["mean_ms"], cell["p50_ms"]) == (5, 166.0, 50.0)


def test_an_old_round_with_a_request_that_produced_no_output_is_a_failure(tmp_path: Path) -> None:
    write_round(tmp_path / "warmup_round.csv", [0.5, 0.0, 0.6])
    found = read_measurements(tmp_path / "warmup_round.csv")
    assert [(f.prompt_id, f.reason) for f in found.failures] == [
        (1, "ttft is 0.0, which long_doc_qa writes when a request produced no output")
    ]
    assert [r.ttft_ms for r in found.rows] == [500.0, 600.0]


def test_a_round_where_everything_failed_is_refused(tmp_path: Path) -> None:
    write_round(tmp_path / "warmup_round.csv", [-1, -1], NEW)
    with pytest.raises(MeasurementError, match="every one of its 2 requests failed"):
        read_measurements(tmp_path / "warmup_round.csv")


def test_analyze_takes_a_long_doc_qa_file_as_its_file_and_shows_the_failures(tmp_path: Path) -> None:
    write_round(tmp_path / "warmup_round.csv", [0.5, 0.7], NEW)
    write_round(tmp_path / "query_round.csv", [0.05, -1, 0.07, 0.03], NEW)
    code, out = run("analyze", str(tmp_path / "query_round.csv"), "--repeat-mode", "interleave", "--json")
    assert code == 0, out
    report = json.loads(out)
    # Query round without prompt 1: 50, 70, 30 ms -> mean 50, and the warmup 500, 700 -> mean 600: gain 12x.
    assert [(c["pass"], c["order"], c["n"], c["mean_ms"]) for c in report["cells"]] == [(1, "forward", 2, 600.0), (2, "interleave*2", 3, 50.0)]
    assert report["pass_speedups"][0]["mean_speedup"] == 12.0
    assert [(f["pass"], f["prompt_id"]) for f in report["failures"]] == [(2, 1)]
    code, out = run("analyze", str(tmp_path / "query_round.csv"))
    assert code == 0 and "failed requests, left out of the statistics: 1" in out and "prompt_id 1" in out


def test_analyze_says_which_baseline_it_needs_and_honours_one_given(tmp_path: Path) -> None:
    for name, query in (("plain", 0.5), ("offload", 0.05)):
        (tmp_path / name).mkdir()
        write_round(tmp_path / name / "warmup_round.csv", [0.5, 0.5])
        write_round(tmp_path / name / "query_round.csv", [query] * 4)
    args = ["analyze", "--long-doc-qa", str(tmp_path / "plain"), "--long-doc-qa", str(tmp_path / "offload"), "--repeat-mode", "tile"]
    code, out = run(*args)
    assert code == 0 and "none is named 'gpu'" in out and "one of: plain, offload" in out
    code, out = run(*args, "--baseline", "plain", "--json")
    speedups = {s["pass"]: s for s in json.loads(out)["speedups"]}
    assert speedups[2]["candidate"] == "offload" and speedups[2]["p50_speedup"] == 10.0  # 500 / 50 ms


def test_the_api_reads_an_uploaded_round_and_reports_its_failures(live_server: str, tmp_path: Path) -> None:
    path = write_round(tmp_path / "warmup_round.csv", [0.4, -1, 0.6], NEW)
    answer = httpx.post(f"{live_server}/api/analyze", files={"file": ("warmup_round.csv", path.read_bytes())}, timeout=60)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [(c["pass"], c["n"], c["mean_ms"]) for c in body["cells"]] == [(1, 2, 500.0)]
    assert [(f["prompt_id"], f["line"]) for f in body["failures"]] == [(1, 3)]
