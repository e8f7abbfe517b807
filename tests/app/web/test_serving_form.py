"""The sidebar's serving fields (requests in flight, a rate, vLLM's token budget and sequence limit) over a real
uvicorn: their bounds are ``Serving``'s, a bad value is named beside its field, and a run that overlaps requests is
played a scheduler step at a time."""

from __future__ import annotations

import re

import httpx
import pytest

from sim.sched.serving import Serving
from tests.app.web.test_model_fields import inputs, schema_bounds

SERVING_FIELDS = ("concurrency", "rate", "max_num_batched_tokens", "max_num_seqs")


def run(url: str, **fields: str) -> httpx.Response:
    return httpx.post(url + "/ui/run", data={"preset": "seed-lab", **fields}, headers={"Origin": url}, timeout=60)


def field_error(html: str, name: str) -> str | None:
    found = re.search(rf'id="f-{name.replace("_", "-")}-error">([^<]*)<', html)
    return found.group(1) if found else None


def test_the_serving_fields_show_their_models_bounds(live_server: str) -> None:
    shown = inputs(httpx.get(live_server + "/", timeout=30).text)
    for name in SERVING_FIELDS:
        low, high, _ = schema_bounds(Serving, name)
        assert (shown[name].get("min"), shown[name].get("max")) == (low, high), name
        assert shown[name].get("value") == ""  # empty: one request at a time, vLLM's scheduler defaults
    # What an empty field stands for is said in it: 1 in flight, and the SchedulerConfig defaults.
    assert shown["concurrency"].get("placeholder") == "1"
    assert shown["max_num_batched_tokens"].get("placeholder") == "8192"
    assert shown["max_num_seqs"].get("placeholder") == "1024"


@pytest.mark.parametrize(
    ("fields", "where", "says"),
    [
        ({"concurrency": "0"}, "concurrency", "greater than or equal to 1"),
        ({"concurrency": "4097"}, "concurrency", "less than or equal to 4096"),
        ({"rate": "0"}, "rate", "greater than or equal to 0.001"),
        ({"max_num_seqs": "70000"}, "max_num_seqs", "less than or equal to 65536"),
        # Fine alone, not together: said beside the first field the message names.
        ({"concurrency": "4", "rate": "2"}, "concurrency", "give concurrency or rate, not both"),
        ({"max_num_batched_tokens": "64", "max_num_seqs": "128"}, "max_num_batched_tokens", "must be at least max_num_seqs"),
    ],
)
def test_a_bad_serving_value_is_named_beside_its_field(live_server: str, fields: dict[str, str], where: str, says: str) -> None:
    response = run(live_server, **fields)
    assert response.status_code == 422
    error = field_error(response.text, where)
    assert error is not None and says in error, (where, error)
    assert 'aria-invalid="true"' in response.text


def test_requests_in_flight_play_a_scheduler_step_at_a_time(live_server: str) -> None:
    assert 'data-unit="step"' in run(live_server, concurrency="4").text
    assert 'data-unit="step"' in run(live_server, rate="3").text
    # One in flight (empty or 1) plays as the page always has, request by request with the sequential engine; a
    # scheduler flag alone is served by the stepped engine, one request at a time.
    for fields in ({}, {"concurrency": "1"}, {"max_num_batched_tokens": "2048"}):
        assert 'data-unit="request"' in run(live_server, **fields).text, fields
