"""The one event vocabulary shared by the engine, the JSON API, the SSE stream, the page and live mode.

Every event names the run it belongs to and, where it concerns one request, its
``seq``. ``to_dict()`` gives the JSON form, with ``type`` set to the event kind;
``pass_`` is spelled ``pass`` there. Token counts are tokens, never blocks,
so that GPU (16-token blocks) and CPU (256-token chunks) events compare directly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

# Tier names, in lookup order.
GPU, CPU, DISK = "gpu", "cpu", "disk"
TIERS = (GPU, CPU, DISK)
# How tables, headers and the page name a tier; a storage tier behind the CPU is called by its own name.
TIER_LABELS = {GPU: "GPU", CPU: "CPU", DISK: "Disk"}


def tier_label(name: str) -> str:
    """A tier's display name: ``TIER_LABELS``' word, else the tier's own name (a storage tier's)."""
    return TIER_LABELS.get(name, name)


@dataclass(frozen=True, slots=True)
class Event:
    kind: ClassVar[str] = "event"
    run: str

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if "pass_" in data:
            data["pass"] = data.pop("pass_")
        return {"type": self.kind, **data}


@dataclass(frozen=True, slots=True)
class TierInfo:
    """A tier as announced at the start of a run: its name, unit and capacity."""

    name: str
    unit_tokens: int
    capacity_tokens: int
    policy: str = "lru"
    kind: str = ""  # an offload tier's kind (cpu, disk); empty for the GPU


@dataclass(frozen=True, slots=True)
class RunStarted(Event):
    """A run begins: which tiers it has and how many requests will follow."""

    kind: ClassVar[str] = "run"
    tiers: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    docs: int = 0
    doc_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RequestStarted(Event):
    """A request arrives: the document it asks about and its prompt length."""

    kind: ClassVar[str] = "request"
    seq: int
    pass_: int
    order: str
    doc: int
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class Lookup(Event):
    """A tier was asked for the prefix of a prompt; ``hit_tokens`` of ``query_tokens`` were found.

    ``query_tokens`` counts only what the tier was asked for: the CPU tier is
    only asked about the part of the prompt the GPU did not hit (rule 1).
    """

    kind: ClassVar[str] = "lookup"
    seq: int
    tier: str
    query_tokens: int
    hit_tokens: int


@dataclass(frozen=True, slots=True)
class Evict(Event):
    """A tier dropped ``tokens`` of one document's prefix, tokens ``[start, end)`` of it.

    ``part`` says which part of the document that was: ``tail``, ``head``,
    ``middle`` or ``whole``. ``doc`` is -1 for blocks no document owns
    (a shared prefix, or a trace).
    """

    kind: ClassVar[str] = "evict"
    seq: int
    tier: str
    doc: int
    tokens: int
    start: int
    end: int
    part: str


@dataclass(frozen=True, slots=True)
class Load(Event):
    """KV was copied from ``tier`` into GPU memory instead of being computed."""

    kind: ClassVar[str] = "load"
    seq: int
    tier: str
    doc: int
    tokens: int
    chunks: int


@dataclass(frozen=True, slots=True)
class Store(Event):
    """A tier now also holds ``tokens`` of a document (computed KV, written through)."""

    kind: ClassVar[str] = "store"
    seq: int
    tier: str
    doc: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Occupancy(Event):
    """What a tier holds after a request: tokens in use, capacity, and tokens per document.

    ``docs`` maps a document number (as a string, for JSON) to its cached tokens.
    """

    kind: ClassVar[str] = "occupancy"
    seq: int
    tier: str
    used_tokens: int
    capacity_tokens: int
    docs: dict[str, int]


@dataclass(frozen=True, slots=True)
class Ttft(Event):
    """The request's time to first token and where most of its prompt came from."""

    kind: ClassVar[str] = "ttft"
    seq: int
    pass_: int
    doc: int
    ttft_ms: float
    source: str
    gpu_hit_tokens: int
    cpu_hit_tokens: int
    disk_hit_tokens: int  # every tier behind the CPU
    computed_tokens: int
    stored_tokens: int = 0  # computed tokens written through to the CPU tier (what the store cost applies to)
    tier_hits: dict[str, int] = field(default_factory=dict)  # offload tier name -> tokens loaded from it


@dataclass(frozen=True, slots=True)
class Explained(Event):
    """Why a request's tokens missed (sim.explain): ``gpu_miss`` and ``computed`` map a cause to tokens.

    Sent just before the request's ``ttft``. ``evicted`` lists, per tier, the
    evicted tokens and the requests (``by``: seq, tokens) that evicted them;
    ``infinite_hit_tokens`` is what tiers of unbounded size would have served.
    """

    kind: ClassVar[str] = "explain"
    seq: int
    pass_: int
    doc: int
    gpu_miss: dict[str, int]
    computed: dict[str, int]
    evicted: list[dict[str, Any]]
    infinite_hit_tokens: int


@dataclass(frozen=True, slots=True)
class PassDone(Event):
    """A pass finished: its summary as in the JSON result's ``passes``."""

    kind: ClassVar[str] = "pass"
    summary: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunDone(Event):
    """A run finished: per-tier totals."""

    kind: ClassVar[str] = "done"
    requests: int
    totals: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Step(Event):
    """One step of vLLM's scheduler loop, when requests overlap (``sim.sched``): the step ledger's line as its fields.

    ``line`` is ``sim.sched.output.StepOutput.to_dict()`` (``step``, ``t_ms``,
    ``dt_ms``, ``scheduled``, ``admitted``, ``preempted``, ``finished``,
    ``free_blocks``, ``running``, ``waiting``, prefill and decode tokens,
    ``loaded`` and ``stored``), the one definition of those fields, with who
    runs and waits after the step beside them (``sim.sched.stream``); the JSON
    form spreads it beside ``type`` and ``run``. Each step's events end with it
    (the stream's order is ``sim.sched.stream``'s docstring).
    """

    kind: ClassVar[str] = "step"
    line: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "run": self.run, **self.line}


@dataclass(frozen=True, slots=True)
class Error(Event):
    """A run (or, with ``run`` empty, the whole stream) stopped early; what was sent before stays valid."""

    kind: ClassVar[str] = "error"
    message: str


@dataclass(frozen=True, slots=True)
class Measured(Event):
    """Live mode: a request to a real server finished; its measured TTFT and where its prompt came from.

    ``run`` is the target's name. Hit tokens are None when the server's
    ``/metrics`` could not tell (no metrics, or requests overlapping);
    ``hits_unknown`` then says why, in words.
    """

    kind: ClassVar[str] = "measured"
    seq: int
    pass_: int
    order: str
    doc: int
    prompt_tokens: int
    ttft_ms: float
    gpu_hit_tokens: int | None
    cpu_hit_tokens: int | None
    computed_tokens: int | None
    model: str
    started_at: str
    hits_unknown: str | None = None


@dataclass(frozen=True, slots=True)
class RunWarning(Event):
    """Live mode: a run goes on with less than asked for (e.g. TTFT only, without ``/metrics``)."""

    kind: ClassVar[str] = "warning"
    message: str


@dataclass(frozen=True, slots=True)
class Divergence(Event):
    """Watch mode: the blocks a server's KV events say a tier holds against those its shadow twin holds.

    ``run`` is the upstream's name, ``seq`` the proxied request after which it
    was measured. ``differ`` counts blocks held by one and not the other when
    both name blocks alike (``exact``: an emulator hashes as the twin does),
    else the difference of the counts. ``first_parted`` is the first request
    after which they differed (None while they agree, and when they differed
    from the start). ``held_before``: blocks the server held when the twin
    started, which the twin never saw.
    """

    kind: ClassVar[str] = "divergence"
    seq: int
    tier: str
    server_blocks: int
    twin_blocks: int
    differ: int
    exact: bool
    first_parted: int | None
    held_before: int = 0


EVENT_KINDS = tuple(
    cls.kind
    for cls in (RunStarted, RequestStarted, Lookup, Evict, Load, Store, Occupancy, Explained, Ttft, PassDone, RunDone)
)
# The kinds a stream served step by step (requests overlapping) sends.
STEP_EVENT_KINDS = tuple(
    cls.kind for cls in (RunStarted, RequestStarted, Lookup, Evict, Load, Occupancy, Step, Ttft, PassDone, RunDone)
)
