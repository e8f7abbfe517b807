"""Each limit and starting value a page's input shows is its pydantic model's: read back from the served panels and
checked against the model's JSON schema (pydantic's own rendering of the bounds, not the code that writes the HTML);
no template writes a number of its own; the live timeout is one limit for the CLI, the API and the page."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from app.live.session import MAX_TIMEOUT_S
from app.web.routes.advise import AdviseInput
from app.web.routes.analysis import CapacityForm, LongDocQaForm
from app.web.routes.live import LiveRunInput
from app.web.routes.replay import ReplayForm
from live_servers import ROOT

TEMPLATES = ROOT / "templates"


class Inputs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.by_name: dict[str, dict[str, str | None]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "input" and found.get("type") == "number" and found.get("name"):
            self.by_name[str(found["name"])] = found


def inputs(html: str) -> dict[str, dict[str, str | None]]:
    parser = Inputs()
    parser.feed(html)
    return parser.by_name


def schema_bounds(model: type, name: str) -> tuple[str | None, str | None, str | None]:
    """(minimum, maximum, starting value) as pydantic's JSON schema states them; an optional field's bounds sit in
    the branch of its anyOf that is a number."""
    prop = model.model_json_schema(by_alias=False)["properties"][name]
    branch = next((b for b in prop.get("anyOf", [prop]) if b.get("type") in ("integer", "number")), prop)
    low = branch.get("minimum", branch.get("exclusiveMinimum"))
    high = branch.get("maximum", branch.get("exclusiveMaximum"))
    start = prop.get("default")
    if start is None and prop.get("examples"):
        start = prop["examples"][0]
    text = lambda v: None if v is None else (str(int(v)) if float(v).is_integer() else str(v))  # noqa: E731
    return text(low), text(high), text(start)


@pytest.mark.parametrize(
    ("path", "model", "fields"),
    [
        ("/ui/replay", ReplayForm, {"block_size": "block_size", "gpu_blocks": "gpu_blocks", "cpu_blocks": "cpu_blocks", "chunk_blocks": "chunk_blocks"}),
        ("/ui/analysis", CapacityForm, {"curve_points": "curve_points"}),
        ("/ui/analysis", LongDocQaForm, {"shuffle_seed": "shuffle_seed", "document_length": "document_length"}),
        ("/ui/analysis", AdviseInput, {"advise_p50_ms": "p50_ms", "advise_hit_ratio": "hit_ratio", "advise_pass": "pass_", "advise_points": "points"}),
    ],
)
def test_a_panel_shows_its_models_bounds(live_server: str, path: str, model: type, fields: dict[str, str]) -> None:
    shown = inputs(httpx.get(live_server + path, timeout=30).text)
    for html_name, field in fields.items():
        low, high, start = schema_bounds(model, field)
        attrs = shown[html_name]
        assert (attrs.get("min"), attrs.get("max")) == (low, high), html_name
        if field != "block_size":  # empty: the trace format's own block size
            assert attrs.get("value") == start, html_name


def test_the_live_panel_takes_the_stream_limit_and_the_models_bounds(live_server_factory) -> None:  # noqa: ANN001
    with live_server_factory("--target", "gpu=http://127.0.0.1:9") as url:
        shown = inputs(httpx.get(url + "/ui/live/panel", timeout=30).text)
    low, high, start = schema_bounds(LiveRunInput, "concurrency")
    assert (shown["concurrency"].get("min"), shown["concurrency"].get("max"), shown["concurrency"].get("value")) == (low, high, start)
    # Live runs are streamed: the stream's document limit (200, app.web.inputs) is below the scenario's own.
    assert shown["docs"].get("max") == "200"


def test_no_template_writes_a_bound_of_its_own() -> None:
    # Numbers in min, max and value of a number input come from the models; the only literal values left are a
    # checkbox's "1" and the playback speeds (requests per second, a choice of the page, no model's field).
    literal = re.compile(r'<input[^>]*type="number"[^>]*\b(min|max|value)="\d')
    offenders = [f"{p.relative_to(TEMPLATES)}: {m.group(0)[:80]}" for p in TEMPLATES.rglob("*.html") for m in literal.finditer(p.read_text())]
    assert offenders == []


def test_the_live_timeout_is_one_limit() -> None:
    # The CLI allowed an hour, the web 600 s: now both take the session's one limit.
    from app.cli.live import command as live

    option = next(p for p in live.params if p.name == "timeout_s")
    assert option.type.max == MAX_TIMEOUT_S == 3600
    assert LiveRunInput(targets=["gpu"], timeout_s=3600).timeout_s == 3600
    with pytest.raises(ValueError, match="3600"):
        LiveRunInput(targets=["gpu"], timeout_s=3601)


def test_a_panel_field_past_its_models_limit_is_named(live_server: str) -> None:
    # The page's curve points are checked by their model (CapacityForm): past its maximum, the panel's problem names
    # the field and the limit.
    high = schema_bounds(CapacityForm, "curve_points")[1]
    response = httpx.post(
        f"{live_server}/ui/analysis/capacity", data={"curve_points": str(int(high) + 1)}, headers={"Origin": live_server}, timeout=30
    )
    assert response.status_code == 422
    assert 'data-field="curve_points"' in response.text
    assert f"less than or equal to {high}" in response.text
