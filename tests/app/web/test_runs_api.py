"""Kept runs over HTTP, against a real ``kvscope serve`` with a database of its own (a temporary file)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from live_servers import run_kvscope

from sim.calibration import measurements

ServerFactory = Callable[..., AbstractContextManager[str]]


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs") / "runs.db"


@pytest.fixture(scope="module")
def url(db_path: Path, live_server_factory: ServerFactory) -> Iterator[str]:
    with live_server_factory("--db", str(db_path)) as base:
        yield base


def sse(response: httpx.Response) -> list[dict]:
    return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]


def test_a_simulation_is_kept_and_read_back(url: str) -> None:
    body = {"docs": 6, "passes": "forward,forward"}
    answer = httpx.post(f"{url}/api/simulate", json=body, timeout=60)
    run_id = int(answer.headers["X-Kvscope-Run"])
    run = httpx.get(f"{url}/api/runs/{run_id}").json()
    # What is kept is what was answered, and its scenario reads back as the one asked for.
    assert run["kind"] == "simulate" and run["status"] == "done"
    assert run["result"] == answer.json()
    assert (run["scenario"]["docs"], [p["order"] for p in run["scenario"]["passes"]]) == (6, ["forward", "forward"])
    assert run["url"] == f"/?run={run_id}"
    assert run_id in [r["id"] for r in httpx.get(f"{url}/api/runs").json()]


def test_the_export_is_the_simulate_out_file(url: str, tmp_path: Path) -> None:
    answer = httpx.post(f"{url}/api/simulate", json={"docs": 4}, timeout=60)
    run_id = answer.headers["X-Kvscope-Run"]
    exported = httpx.get(f"{url}/api/runs/{run_id}/export", params={"format": "csv"})
    assert exported.headers["content-disposition"] == f'attachment; filename="kvscope-run-{run_id}.csv"'
    # `simulate --out` writes the same scenario's requests as a measurement file: the same bytes.
    out = tmp_path / "run.csv"
    assert run_kvscope(["simulate", "--docs", "4", "--out", str(out)]).returncode == 0
    assert exported.text == out.read_text()
    jsonl = httpx.get(f"{url}/api/runs/{run_id}/export", params={"format": "jsonl"}).text
    assert measurements.parse_text(jsonl, jsonl=True) == measurements.parse_text(exported.text)


def test_a_streamed_run_keeps_the_events_it_sent_and_replays_them(url: str) -> None:
    with httpx.stream("POST", f"{url}/api/simulate/stream", json={"docs": 3, "passes": "forward,reverse"}, timeout=60) as r:
        run_id = r.headers["X-Kvscope-Run"]
        sent = sse(r)
    with httpx.stream("GET", f"{url}/api/runs/{run_id}/events", timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        again = sse(r)
    assert again == sent and sent[-1]["type"] == "done"
    run = httpx.get(f"{url}/api/runs/{run_id}").json()
    assert run["status"] == "done"
    # 3 documents x 2 passes x 2 configurations: 12 requests.
    assert run["summary"]["requests"] == 12


def test_a_run_kept_without_events_replays_what_its_result_holds(url: str) -> None:
    run_id = httpx.post(f"{url}/api/simulate", json={"docs": 2, "passes": "forward"}, timeout=60).headers["X-Kvscope-Run"]
    with httpx.stream("GET", f"{url}/api/runs/{run_id}/events", timeout=60) as r:
        kinds = [e["type"] for e in sse(r)]
    # Per configuration: run; per request: request, ttft; then pass and done. 2 configurations x 2 requests.
    assert kinds.count("run") == 2 and kinds.count("request") == 4 and kinds.count("ttft") == 4
    assert kinds.count("pass") == 2 and kinds.count("done") == 2 and "evict" not in kinds


def test_two_runs_compared(url: str) -> None:
    a = httpx.post(f"{url}/api/simulate", json={"passes": "forward,forward"}, timeout=60).headers["X-Kvscope-Run"]
    b = httpx.post(f"{url}/api/simulate", json={"passes": "forward,forward", "cpu_gb": 0.5}, timeout=60).headers["X-Kvscope-Run"]
    diff = httpx.get(f"{url}/api/runs/{a}/diff/{b}").json()
    assert diff["scenario"] == [{"field": "cpu_gb", "a": 1.5, "b": 0.5}] and diff["costs"] == []
    cells = {(p["config"], p["pass"]): p for p in diff["passes"]}
    # Without a CPU tier nothing changes; with 0.5 GiB (18,724 tokens: fewer than the 48,640 pass 2 needs, and LRU
    # evicts each chunk before its re-read) pass 2 of gpu+cpu loses its CPU hits: README's 49.5 ms becomes 601.6 ms.
    assert not cells[("gpu", 2)]["differs"] and cells[("gpu", 2)]["p50_ms"]["change"] == 1.0
    two = cells[("gpu+cpu", 2)]
    assert two["differs"] and two["cpu_hit_tokens"] == {"a": 48_640, "b": 0, "change": 0.0}
    assert (round(two["p50_ms"]["a"], 1), round(two["p50_ms"]["b"], 1)) == (49.5, 601.6)
    assert [s["config"] for s in diff["ttft"]["a"]] == ["gpu", "gpu+cpu"] and len(diff["ttft"]["b"][1]["x"]) == 20


def test_a_watch_cannot_be_compared_422_naming_it(url: str, db_path: Path) -> None:
    from app.runs.store import NewRun, RunStore

    a = httpx.post(f"{url}/api/simulate", json={"docs": 2}, timeout=60).headers["X-Kvscope-Run"]
    store = RunStore(db_path)  # a second writer on the server's file, as `kvscope watch` beside `kvscope serve` is
    # A kept `kvscope watch`: its records are KV event lines, no request whose TTFT could be set beside run a's.
    watch = store.save(NewRun("watch", name="KV events"), records=[{"seq": 0, "ts": 1.0, "event": {"type": "AllBlocksCleared"}}])
    store.close()
    refused = httpx.get(f"{url}/api/runs/{a}/diff/{watch}")
    assert refused.status_code == 422
    assert refused.json()["detail"] == [
        {"type": "value_error", "loc": ["path", "b"], "msg": f"run {watch} (watch) cannot be compared: it keeps KV events, not requests"}
    ]
    page = httpx.get(f"{url}/ui/runs/compare", params={"pick": [a, watch]})
    assert page.status_code == 422 and f"run {watch} (watch) cannot be compared" in page.text
    # No measurement file of it either: an empty one would read as a run without requests. Its recording is jsonl.
    refused = httpx.get(f"{url}/api/runs/{watch}/export", params={"format": "csv"})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["query", "format"]
    assert "keeps KV events, not requests: jsonl gives its recording" in refused.json()["detail"][0]["msg"]
    recording = httpx.get(f"{url}/api/runs/{watch}/export", params={"format": "jsonl"})
    assert recording.status_code == 200 and json.loads(recording.text) == {"seq": 0, "ts": 1.0, "event": {"type": "AllBlocksCleared"}}
    # Its line in the Runs area counts its KV events (it has no requests).
    row = httpx.get(f"{url}/ui/runs").text.split(f'data-run="{watch}"')[1].split("</tr>")[0]
    assert "1&nbsp;KV&nbsp;events" in row


def test_delete_then_404(url: str) -> None:
    run_id = httpx.post(f"{url}/api/simulate", json={"docs": 2}, timeout=60).headers["X-Kvscope-Run"]
    assert httpx.delete(f"{url}/api/runs/{run_id}").status_code == 204
    for path in ("", "/events", "/export", f"/diff/{run_id}"):
        missing = httpx.get(f"{url}/api/runs/{run_id}{path}")
        assert missing.status_code == 404 and missing.json()["detail"] == f"no run {run_id}"
    assert httpx.delete(f"{url}/api/runs/{run_id}").status_code == 404


@pytest.mark.parametrize("bad", ["abc", "1%20OR%201=1", "1;DROP%20TABLE%20runs", "-1", "0", "99999999999999999999", "1.5"])
def test_hostile_ids_get_422_naming_the_id(url: str, bad: str) -> None:
    for method, path in (("GET", f"/api/runs/{bad}"), ("DELETE", f"/api/runs/{bad}"), ("GET", f"/api/runs/1/diff/{bad}")):
        answer = httpx.request(method, f"{url}{path}")
        assert answer.status_code == 422, (method, path, answer.text)
        assert answer.json()["detail"][0]["loc"][0] == "path"
    assert httpx.get(f"{url}/api/runs").status_code == 200  # the table is still there


def test_list_bounds_and_kind(url: str) -> None:
    assert httpx.get(f"{url}/api/runs", params={"limit": 0}).status_code == 422
    assert httpx.get(f"{url}/api/runs", params={"limit": 10_001}).status_code == 422
    bad = httpx.get(f"{url}/api/runs", params={"kind": "x' OR '1'='1"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "kind"]
    assert all(r["kind"] == "simulate" for r in httpx.get(f"{url}/api/runs", params={"kind": "simulate"}).json())


def test_import_a_measurement_file_and_a_simulate_json(url: str, tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    assert run_kvscope(["simulate", "--docs", "3", "--out", str(out)]).returncode == 0
    answer = httpx.post(f"{url}/api/runs/import", files={"file": ("mine.csv", out.read_bytes(), "text/csv")})
    assert answer.status_code == 201
    run = httpx.get(f"{url}{answer.json()['url'].replace('/?run=', '/api/runs/')}").json()
    assert run["kind"] == "import" and run["name"] == "mine.csv" and run["summary"]["requests"] == 18
    assert run["uploads"][0]["content_kept"] is True
    result = run_kvscope(["simulate", "--docs", "3", "--json"]).stdout
    answer = httpx.post(f"{url}/api/runs/import", files={"file": ("sim.json", result.encode(), "application/json")})
    assert answer.status_code == 201
    kept = httpx.get(f"{url}/api/runs/{answer.json()['id']}").json()
    assert kept["kind"] == "simulate" and kept["result"] == json.loads(result)


def test_a_run_the_server_kept_and_exported_is_imported_back_whatever_its_size(url: str) -> None:
    # 3,000 one-token documents x 3 passes x 2 runs: 18,000 request records, an export of several MB. The upload
    # routes take up to 16 MiB; the import routes were held to the 2 MiB of a JSON body and refused it (413).
    answer = httpx.post(f"{url}/api/simulate", params={"explain": "false"}, json={"docs": 3000, "doc_tokens": 1, "question_tokens": 0}, timeout=60)
    assert answer.status_code == 200, answer.text[:300]
    exported = httpx.get(f"{url}/api/runs/{answer.headers['X-Kvscope-Run']}/export", params={"format": "json"}, timeout=60).content
    assert len(exported) > 2 * 2**20
    imported = httpx.post(f"{url}/api/runs/import", files={"file": ("run.json", exported, "application/json")}, timeout=60)
    assert imported.status_code == 201, imported.text[:300]
    kept = httpx.get(f"{url}/api/runs/{imported.json()['id']}", timeout=60).json()
    assert kept["result"] == answer.json()
    page = httpx.post(f"{url}/ui/runs/import", files={"file": ("run.json", exported, "application/json")}, timeout=60)
    assert page.status_code == 200, page.text[:300]


def test_a_bad_import_is_422_naming_the_line_and_keeps_nothing(url: str) -> None:
    before = len(httpx.get(f"{url}/api/runs", params={"limit": 10_000}).json())
    bad = "config,pass,order,seq,doc,prompt_tokens,ttft_ms\ngpu,1,forward,0,0,5024,fast\n"
    answer = httpx.post(f"{url}/api/runs/import", files={"file": ("bad.csv", bad.encode(), "text/csv")})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "file"]
    assert "bad.csv: line 2: column ttft_ms" in answer.json()["detail"][0]["msg"]
    assert len(httpx.get(f"{url}/api/runs", params={"limit": 10_000}).json()) == before


def test_analyses_replays_and_calibrations_are_kept(url: str, tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    assert run_kvscope(["simulate", "--docs", "3", "--out", str(out)]).returncode == 0
    analysed = httpx.post(f"{url}/api/analyze", files={"file": ("lab.csv", out.read_bytes(), "text/csv")})
    kept = httpx.get(f"{url}/api/runs/{analysed.headers['X-Kvscope-Run']}").json()
    assert kept["kind"] == "analysis" and kept["records"] == 18 and kept["uploads"][0]["name"] == "lab.csv"
    calibrated = httpx.post(f"{url}/api/calibrate", files={"file": ("lab.csv", out.read_bytes(), "text/csv")}, timeout=60)
    kept = httpx.get(f"{url}/api/runs/{calibrated.headers['X-Kvscope-Run']}").json()
    assert kept["kind"] == "calibration" and kept["costs"] == calibrated.json()["costs"] and kept["records"] == 18
    replayed = httpx.post(f"{url}/api/replay", data={"gpu_blocks": "2000"}, timeout=60)
    kept = httpx.get(f"{url}/api/runs/{replayed.headers['X-Kvscope-Run']}").json()
    # The bundled trace's identity is its sha256 (sim/data/traces/README.md).
    assert kept["kind"] == "replay" and kept["source"]["trace"]["sha256"] == replayed.json()["trace"]["sha256"]
    assert kept["summary"]["requests"] == 3_993


def test_an_analysis_keeps_its_failed_requests_and_shows_them(url: str, db_path: Path) -> None:
    # A long_doc_qa query round (new columns) whose prompt 1 failed: successful False, ttft -1.
    header = "prompt_id,request_start,ttft,request_end,successful,is_miss,ttft_time"
    query = "\n".join([header, "0,0.0,0.05,0.55,True,False,0.05", "1,0.6,-1,1.1,False,False,-0.4",
                       "2,1.2,0.07,1.77,True,False,1.27"]) + "\n"
    analysed = httpx.post(f"{url}/api/analyze", files={"file": ("query_round.csv", query.encode(), "text/csv")})
    assert analysed.status_code == 200, analysed.text
    kept = httpx.get(f"{url}/api/runs/{analysed.headers['X-Kvscope-Run']}").json()
    # Two requests succeeded (prompts 0 and 2); the one that failed is kept beside them, as the answer gave it.
    assert kept["records"] == 2 and kept["summary"]["failed"] == 1
    assert kept["source"]["failures"] == analysed.json()["failures"]
    assert [(f["prompt_id"], f["line"]) for f in kept["source"]["failures"]] == [(1, 3)]  # line 3: header, prompt 0, 1
    shown = run_kvscope(["runs", "--db", str(db_path), "show", analysed.headers["X-Kvscope-Run"]])
    assert shown.returncode == 0, shown.stderr
    assert "failed requests, left out of the statistics: 1" in shown.stdout
    assert "prompt_id 1 (query_round.csv line 3): successful is False" in shown.stdout
    assert '"failures"' not in shown.stdout  # listed once, as lines, not again in the source's JSON


def test_the_page_and_the_cli_name_the_disk_tier_alike(url: str, db_path: Path) -> None:
    # The run below, with the disk tier in the nvme tier's place: a tier gets a column once a pass loads from it, and
    # the disk serves pass 2 (6 x 4,864 = 29,184 tokens). The runs page's table and `kvscope runs show` both head that
    # column by the tier's display name, capitalised as GPU and CPU are, from one definition (sim.engine.events.TIER_LABELS).
    body = {"docs": 6, "cpu_gb": None, "cpu_tokens": 10_000, "gpu_tokens": 12_000, "disk_tokens": 100_000,
            "passes": "forward,forward"}
    run = httpx.post(f"{url}/api/simulate", json=body, timeout=60).headers["X-Kvscope-Run"]
    page = httpx.get(f"{url}/ui/runs/compare", params={"a": run}, timeout=30).text
    assert '<th scope="col" data-tier="disk">Disk hit tok</th>' in page
    assert '<td class="num" data-tier="disk">29,184</td>' in page
    shown = run_kvscope(["runs", "--db", str(db_path), "show", run])
    assert shown.returncode == 0, shown.stderr
    header = next(line for line in shown.stdout.splitlines() if line.startswith("config"))
    assert "CPU hit tok  Disk hit tok  computed tok" in header


def test_the_compare_table_has_a_column_per_tier_behind_the_cpu(url: str) -> None:
    # As tests/app/cli/test_runs_cli.py derives it: six seed documents read forward twice, GPU and CPU too small for a cycle
    # of six; an nvme tier of 100,000 tokens serves pass 2 whole (6 x 4,864 = 29,184), one of 5,000 nothing.
    ids = []
    for nvme in ("100000t", "5000t"):
        body = {"docs": 6, "cpu_gb": None, "cpu_tokens": 10_000, "gpu_tokens": 12_000, "passes": "forward,forward",
                "storage_tiers": [f"nvme:{nvme}"]}
        ids.append(int(httpx.post(f"{url}/api/simulate", json=body, timeout=60).headers["X-Kvscope-Run"]))
    a, b = ids
    one = httpx.get(f"{url}/ui/runs/compare", params={"a": a}, timeout=30).text
    assert '<th scope="col" data-tier="nvme">nvme hit tok</th>' in one
    assert '<td class="num" data-tier="nvme">29,184</td>' in one
    two = httpx.get(f"{url}/ui/runs/compare", params={"a": a, "b": b}, timeout=30).text
    assert '<th scope="col" data-tier="nvme">nvme hit tok a / b</th>' in two
    assert '<td class="num changed" data-tier="nvme">29,184 / 0</td>' in two
    assert httpx.get(f"{url}/api/runs/{a}/diff/{b}", timeout=30).json()["tiers"] == ["cpu", "nvme"]
