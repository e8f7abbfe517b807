"""``POST /api/advise`` under load, over a real uvicorn: it answers as ``kvscope advise --json`` with the same serving
settings, and refuses bad ones naming the field."""

from __future__ import annotations

import json

import httpx
from click.testing import CliRunner

from app.cli.advise import command
from live_servers import serve_process


def test_the_api_under_load_answers_as_the_cli() -> None:
    cli = CliRunner().invoke(command, ["--preset", "seed-lab", "--no-cpu", "--p90-ms", "800", "--rate", "1", "--top", "2",
                                       "--points", "6", "--workers", "1", "--json"])
    assert cli.exit_code == 0, cli.output
    want = json.loads(cli.output[cli.output.index("{"):])
    with serve_process() as (url, _):
        got = httpx.post(f"{url}/api/advise", json={"scenario": {"no_cpu": True}, "p90_ms": 800, "serving": {"rate": 1},
                                                     "top": 2, "points": 6}, timeout=120)
        assert got.status_code == 200, got.text[:500]
        data = got.json()
        for key in ("candidates", "meets", "closest", "load", "commands"):
            assert data[key] == want[key], key
        assert data["load"]["rate_per_s"] == 1 and "sustained_per_s" in data["meets"][0]
        for body, named in (({"serving": {"rate": -1}}, "rate"), ({"timed": True}, "timed"),
                            ({"serving": {"rate": 1, "concurrency": 2}}, "not both")):
            bad = httpx.post(f"{url}/api/advise", json={"p90_ms": 800, **body}, timeout=60)
            assert bad.status_code == 422, bad.text[:300]
            assert named in bad.text
