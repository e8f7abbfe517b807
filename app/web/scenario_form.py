"""The dashboard's scenario form: which fields it shows, their values (a preset's, or what was typed) and their errors.

The form posts strings; ``parse`` turns the non-empty ones into a
``SimulateInput``, the same body ``POST /api/simulate`` takes, so the page and
the API validate alike. Bounds shown on the inputs come from the model that
holds the field: ``Scenario`` for the workload and tiers, ``Serving`` for how
requests are served (requests in flight, a rate, vLLM's scheduler flags).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

from pydantic import BaseModel

from app.scenario_input import SimulateInput, resolve
from app.web.model_fields import bounds
from sim.blocks.kv import MODELS
from sim.bounds import jsontext
from sim.sched.config import SchedulerConfig
from sim.sched.serving import Serving
from sim.simulation.run import scenario_summary
from sim.workloads.presets import DESCRIPTIONS, PRESETS
from sim.workloads.scenario import Scenario


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    label: str
    hint: str
    kind: str = "number"  # number | text | select
    step: str = "1"
    options: tuple[str, ...] = ()
    more: bool = False  # under "More settings", closed until opened (or until one of its fields has an error)
    model: type[BaseModel] = Scenario  # the model whose field this is: its bounds are the input's
    placeholder: str = ""  # what an empty input stands for (the model's own default, said where it is None)


def _choices(name: str) -> tuple[str, ...]:
    """A ``Literal`` field's values, in ``Scenario``'s order."""
    return tuple(str(v) for v in get_args(Scenario.model_fields[name].annotation))


_SCHEDULER = SchedulerConfig()  # vLLM's defaults as kvscope models them: what an empty scheduler field means

FIELDS = (
    FieldSpec("docs", "Documents", "read once per pass"),
    FieldSpec("doc_tokens", "Tokens per document", "a short question follows each"),
    FieldSpec("gpu_tokens", "GPU cache, tokens", "vLLM's 'GPU KV cache size'; one block is its null block"),
    FieldSpec("cpu_gb", "CPU tier, GiB", "LMCache max_local_cpu_size; vLLM's --kv-offloading-size", step="any"),
    FieldSpec("block_size", "GPU block, tokens", "vLLM's block size"),
    FieldSpec("chunk_size", "CPU chunk, tokens", "a multiple of the block"),
    FieldSpec("passes", "Passes", "forward, reverse, random@7, 3/1/2", kind="text"),
    FieldSpec("granularity", "Granularity", "cache blocks, or whole documents", kind="select", options=_choices("granularity")),
    FieldSpec("model", "Model", "its KV bytes per token size the CPU tier", kind="select", options=tuple(MODELS)),
    FieldSpec(
        "concurrency", "Requests in flight", "sent together, the next as one finishes; 1: one at a time",
        model=Serving, placeholder="1",
    ),
    FieldSpec("rate", "Arrival rate, requests/s", "instead: requests arrive on their own (Poisson)", step="any", model=Serving),
    FieldSpec("question_tokens", "Question, tokens", "after each document, or one per document: 13,40,7", kind="text", more=True),
    FieldSpec(
        "questions", "Questions", "fresh: a new one every pass; same: asked again unchanged", kind="select",
        options=_choices("questions"), more=True,
    ),
    FieldSpec("output_tokens", "Output, tokens", "generated per request; their KV fills GPU blocks", more=True),
    FieldSpec("shared_prefix_tokens", "Shared prefix", "tokens of a system prompt before every document", more=True),
    FieldSpec("disk_gb", "Disk tier, GiB", "LMCache local disk, behind the CPU tier", step="any", more=True),
    FieldSpec(
        "storage_tiers", "Tiers behind the CPU", "remote:8:lru:0.01, far:50000t (name:GiB or tokens:policy:ms per token)",
        kind="text", more=True,
    ),
    FieldSpec("gpu_policy", "GPU eviction", "lru is vLLM's", kind="select", options=_choices("gpu_policy"), more=True),
    FieldSpec("cpu_policy", "CPU eviction", "lru is LMCache's", kind="select", options=_choices("cpu_policy"), more=True),
    FieldSpec(
        "cpu_backend", "CPU backend", "lmcache: LMCache's own rules; vllm-native: vLLM's OffloadingConnector; brief: the seed's",
        kind="select", options=_choices("cpu_backend"), more=True,
    ),
    FieldSpec("blocks_per_chunk", "Offload block, GPU blocks", "vllm-native: vLLM's blocks_per_chunk", more=True),
    FieldSpec("store_threshold", "Store threshold", "vllm-native: offload a block on its Nth offer", more=True),
    FieldSpec(
        "offload_prompt_only", "Offload prompt only", "vllm-native: False offloads generated blocks too", kind="select",
        options=("True", "False"), more=True,
    ),
    FieldSpec("free_order", "Free order", "vllm-legacy: older vLLM's order", kind="select", options=_choices("free_order"), more=True),
    FieldSpec(
        "max_num_batched_tokens", "Token budget per step", "vLLM's --max-num-batched-tokens: a longer prompt takes more steps",
        more=True, model=Serving, placeholder=str(_SCHEDULER.max_num_batched_tokens),
    ),
    FieldSpec(
        "max_num_seqs", "Running requests, at most", "vLLM's --max-num-seqs: the rest wait", more=True, model=Serving,
        placeholder=str(_SCHEDULER.max_num_seqs),
    ),
)
FIELD_NAMES = tuple(f.name for f in FIELDS)


@dataclass(frozen=True, slots=True)
class FieldView:
    spec: FieldSpec
    value: str
    error: str | None
    min: float | None
    max: float | None

    @property
    def id(self) -> str:
        return "f-" + self.spec.name.replace("_", "-")


@dataclass(slots=True)
class FormView:
    preset: str
    fields: list[FieldView]
    errors: list[str] = field(default_factory=list)  # problems of the combination, not of one field
    presets: dict[str, str] = field(default_factory=lambda: {name: DESCRIPTIONS.get(name, "") for name in PRESETS})

    @property
    def invalid(self) -> bool:
        return bool(self.errors) or any(f.error for f in self.fields)

    @property
    def main_fields(self) -> list[FieldView]:
        return [f for f in self.fields if not f.spec.more]

    @property
    def more_fields(self) -> list[FieldView]:
        return [f for f in self.fields if f.spec.more]

    @property
    def more_open(self) -> bool:
        """Shown open when one of its fields has an error (the page's script keeps it open once opened)."""
        return any(f.error for f in self.more_fields)


def _whole(bound: float | None) -> float | None:
    """A bound as the input shows it: 100000, not 100000.0."""
    return int(bound) if isinstance(bound, float) and bound.is_integer() else bound


def _text(value: Any) -> str:
    if value is None:
        return ""
    return str(value)


def view(preset: str, values: Mapping[str, str], errors: list[dict[str, Any]] | None = None) -> FormView:
    """The form showing ``values`` and, beside each field, the first error located at it."""
    by_field: dict[str, str] = {}
    general: list[str] = []
    for err in errors or []:
        name = err["loc"][0] if err["loc"] else _serving_field_named(err["msg"])
        if name in FIELD_NAMES:
            by_field.setdefault(name, err["msg"])
        else:
            general.append(f"{name}: {err['msg']}" if name else err["msg"])
    fields = [
        FieldView(spec, values.get(spec.name, ""), by_field.get(spec.name), *map(_whole, bounds(spec.model, spec.name)))
        for spec in FIELDS
    ]
    return FormView(preset, fields, general)


_SERVING_NAMES = tuple(f.name for f in FIELDS if f.model is Serving)


def _serving_field_named(message: str) -> str | None:
    """The serving field a combination's message names first ("give concurrency or rate, not both"), shown beside
    that field as a single field's error is; None: the message names none of them."""
    named = [(m.start(), name) for name in _SERVING_NAMES if (m := re.search(rf"\b{name}\b", message))]
    return min(named)[1] if named else None


def values_of(scenario: Scenario) -> dict[str, str]:
    """The form's fields as they show ``scenario``."""
    return {name: _text(value) for name, value in scenario_summary(scenario).items() if name in FIELD_NAMES}


def serving_values(serving: Serving | None) -> dict[str, str]:
    """The serving fields as they show ``serving`` (the ones it was given; none: every one empty)."""
    if serving is None:
        return {}
    return {name: _text(value) for name, value in serving.model_dump(exclude_none=True).items() if name in _SERVING_NAMES}


def preset_view(preset: str) -> FormView:
    """The form filled with a preset's values (Scenario defaults where the preset is silent)."""
    return view(preset, values_of(resolve(preset, {})))


def parse(form: Mapping[str, str]) -> SimulateInput:
    """Raises ``ValidationError`` naming the fields; empty fields keep the preset's value (the serving fields:
    one request at a time, vLLM's scheduler defaults), and no ``costs`` the server's."""
    data: dict[str, Any] = {name: form[name].strip() for name in FIELD_NAMES if form.get(name, "").strip()}
    if costs := form.get("costs", "").strip():  # the constants "Use these costs" put in the form, as JSON
        data["costs"] = json_value(costs)
    return SimulateInput(preset=form.get("preset", "seed-lab"), **data)


def json_value(text: str) -> Any:
    """The parsed value, or the text itself for pydantic to refuse with the field's name."""
    try:
        return jsontext.loads(text)
    except ValueError:
        return text
