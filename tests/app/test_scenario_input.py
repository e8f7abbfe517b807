"""A preset overridden field by field: the one resolution the CLI and the API share."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.cli.scenario_flags import FLAGS
from app.scenario_input import OVERRIDE_FIELDS, ScenarioInput, resolve
from sim.workloads.presets import PRESETS, UnknownPreset


def test_every_cli_flag_is_an_override_field_and_back() -> None:
    # --save-unfull-chunk (is_flag) and --storage-tier (repeated) are click options of their own, not in FLAGS.
    assert {field for _, field, _, _ in FLAGS} | {"save_unfull_chunk", "storage_tiers"} == set(OVERRIDE_FIELDS)


def test_overrides_replace_preset_fields_and_none_keeps_them() -> None:
    scenario = resolve("seed-lab", {"docs": 3, "doc_tokens": None})
    assert scenario.docs == 3
    assert scenario.doc_tokens == PRESETS["seed-lab"]["doc_tokens"]


def test_cpu_tokens_replace_the_presets_gigabytes() -> None:
    # seed-lab sizes its CPU tier as 1.5 GB (56,173 tokens); given in tokens, the GB figure must not win.
    scenario = resolve("seed-lab", {"cpu_tokens": 10_000})
    assert scenario.cpu_capacity_tokens == 10_000


def test_no_cpu_drops_every_offload_tier() -> None:
    scenario = resolve("three-tiers", {}, no_cpu=True)
    assert scenario.run_names == ["gpu"]


def test_unknown_preset_and_unknown_field_are_refused() -> None:
    with pytest.raises(UnknownPreset):
        resolve("seed-labb", {})
    with pytest.raises(TypeError, match="gpu_blocks"):
        resolve("seed-lab", {"gpu_blocks": 3})


def test_input_fields_carry_the_scenario_bounds() -> None:
    with pytest.raises(ValidationError) as info:
        ScenarioInput(docs=20_000)
    err = info.value.errors()[0]
    assert err["loc"] == ("docs",)
    assert "10000" in err["msg"]  # Scenario's MAX_DOCS


def test_input_names_an_unknown_preset_and_extra_fields() -> None:
    with pytest.raises(ValidationError) as info:
        ScenarioInput(preset="nope", gpu_blocks=3)
    locs = {e["loc"] for e in info.value.errors()}
    assert locs == {("preset",), ("gpu_blocks",)}


def test_input_resolves_like_the_cli_flags() -> None:
    given = ScenarioInput(docs=4, passes="forward,3/1/2", no_cpu=True).to_scenario()
    assert given == resolve("seed-lab", {"docs": 4, "passes": "forward,3/1/2"}, no_cpu=True)
    assert [p.order for p in given.passes] == ["forward", "list"]
