"""A scenario as a user gives it (a preset overridden field by field), resolved into a ``Scenario`` for the CLI and the API.

``resolve`` is the one place where a preset, the overrides, ``no_cpu`` and a
cost model become a ``Scenario``; the CLI maps its errors to exit 2 naming the
flag, the API to 422 naming the body field. ``ScenarioInput`` is the API body:
every override field carries the same bounds as ``Scenario``'s, so a single
bad field is rejected with its name and limit before anything is simulated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from annotated_types import Len
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, create_model, field_validator
from pydantic.fields import FieldInfo

from sim.costs.model import CostModel
from sim.sched.serving import Serving
from sim.workloads.presets import PRESETS, preset_fields
from sim.workloads.scenario import MAX_DOCS, MAX_PASSES, MAX_PASSES_TEXT, PassSpec, Scenario, StorageTier

# The scenario fields a preset provides and a flag (``--doc-tokens``) or body field (``doc_tokens``) overrides.
OVERRIDE_FIELDS: tuple[str, ...] = (
    "docs",
    "doc_tokens",
    "question_tokens",
    "questions",
    "output_tokens",
    "shared_prefix_tokens",
    "gpu_tokens",
    "cpu_gb",
    "cpu_tokens",
    "disk_gb",
    "disk_tokens",
    "block_size",
    "chunk_size",
    "passes",
    "granularity",
    "model",
    "kv_bytes_per_token",
    "free_order",
    "seed",
    "save_unfull_chunk",
    "gpu_policy",
    "cpu_policy",
    "cpu_backend",
    "blocks_per_chunk",
    "store_threshold",
    "offload_prompt_only",
    "storage_tiers",
)

# Offload-tier sizes: giving one unit replaces the preset's size in the other.
_SIZE_PAIRS = (("cpu_tokens", "cpu_gb"), ("disk_tokens", "disk_gb"))
_OFFLOAD_FIELDS = ("cpu_gb", "cpu_tokens", "disk_gb", "disk_tokens")


def resolve(
    preset: str, overrides: Mapping[str, Any], no_cpu: bool = False, costs: CostModel | None = None
) -> Scenario:
    """The preset's fields, overridden by every override that is not None.

    Raises ``sim.workloads.presets.UnknownPreset`` for an unknown preset and pydantic's
    ``ValidationError`` (locations are ``Scenario`` field names) for bad values.
    """
    fields = preset_fields(preset)
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = set(given) - set(OVERRIDE_FIELDS)
    if unknown:
        raise TypeError(f"not scenario overrides: {', '.join(sorted(unknown))}")
    for chosen, replaced in _SIZE_PAIRS:
        if chosen in given:
            fields.pop(replaced, None)
    fields.update(given)
    if no_cpu:
        fields.update(dict.fromkeys(_OFFLOAD_FIELDS), storage_tiers=[])
    if costs is not None:
        fields["costs"] = costs
    return Scenario(**fields)


def _optional(name: str) -> tuple[Any, FieldInfo]:
    """A ``Scenario`` field as an optional override: same bounds and description, default None."""
    source = Scenario.model_fields[name]
    info = FieldInfo.merge_field_infos(source, default=None, default_factory=None)
    return source.annotation | None, info


_override_fields: dict[str, Any] = {
    name: _optional(name) for name in OVERRIDE_FIELDS if name not in ("passes", "storage_tiers", "question_tokens")
}
_override_fields["question_tokens"] = (
    str | int | Annotated[list[int], Len(max_length=MAX_DOCS)] | None,
    Field(
        default=None, description="tokens of the question after each document, or one length per document: 13 or '13,40,7'",
        examples=[13],
    ),
)
_override_fields["storage_tiers"] = (
    str | list[StorageTier | str] | None,
    Field(
        default=None,
        description="tiers behind the CPU, in lookup order: 'remote:8:lru:0.01,far:50000t' "
        "(NAME:SIZE[:POLICY[:LOAD_MS_PER_TOKEN]][:admission=N], SIZE in GiB or tokens with a t) or tier objects",
        examples=["remote:8:lru:0.01"],
    ),
)
# Lengths are checked before any text is parsed: a 10 MB passes string is refused at once.
_PassText = Annotated[str, StringConstraints(max_length=MAX_PASSES_TEXT)]
_override_fields["passes"] = (
    _PassText | Annotated[list[PassSpec | _PassText], Len(max_length=MAX_PASSES)] | None,
    Field(
        default=None,
        description="pass orders: 'forward,forward,reverse', or a list of 'forward', 'reverse', 'random@SEED', "
        "'zipf@SEED', '3/1/2' or pass objects",
        examples=["forward,forward,reverse"],
    ),
)
_Overrides = create_model("_Overrides", __config__=ConfigDict(extra="forbid", allow_inf_nan=False), **_override_fields)


class ScenarioInput(_Overrides):  # type: ignore[misc, valid-type]
    """The CLI's scenario flags as one object: ``--doc-tokens 4000`` is ``{"doc_tokens": 4000}``."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    preset: str = Field(default="seed-lab", description=f"starting point: {', '.join(PRESETS)}", examples=["seed-lab"])
    no_cpu: bool = Field(default=False, description="run the GPU tier alone (--no-cpu)")
    costs: CostModel | None = Field(default=None, description="cost constants; default: the fit to the seed table")

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str) -> str:
        if value not in PRESETS:
            raise ValueError(f"unknown preset {value!r}; known: {', '.join(PRESETS)}")
        return value

    def overrides(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in OVERRIDE_FIELDS}

    def to_scenario(self) -> Scenario:
        """Raises pydantic's ``ValidationError`` when the fields are fine alone but not together."""
        return resolve(self.preset, self.overrides(), self.no_cpu, self.costs)


def with_serving(base: type[BaseModel], serving: type[Serving] = Serving) -> Any:
    """``base`` with every field of ``serving`` (``Serving`` or a subclass) beside its own, and ``serving()``: an API
    body takes the serving settings by the names ``sim.sched.serving`` defines, with their limits and help."""

    def serving_of(self: BaseModel) -> Serving:
        """The body's serving settings; raises pydantic's ``ValidationError`` when its fields do not combine."""
        return serving(**{name: getattr(self, name) for name in serving.model_fields})

    fields: dict[str, Any] = {name: (info.annotation, info) for name, info in serving.model_fields.items()}
    model = create_model(f"_{base.__name__}Served", __base__=base, **fields)
    model.serving = serving_of
    return model


class SimulateInput(with_serving(ScenarioInput)):  # type: ignore[misc]
    """``/api/simulate``'s body: the scenario, and how it is served (``--concurrency 4`` is ``{"concurrency": 4}``,
    ``--max-num-batched-tokens 2048`` is ``{"max_num_batched_tokens": 2048}``); none of these: one request at a time."""
