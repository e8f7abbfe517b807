"""A scenario: the workload, the tiers and the costs of one simulation, validated with explicit bounds.

Every field has a documented limit; a violation raises pydantic's
``ValidationError`` naming the field, which the CLI turns into exit 2 and the
API into 422. ``Scenario.from_preset(name, **overrides)`` starts from a preset.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from sim.blocks.kv import DEFAULT_MODEL, MODELS, KvShape, model_shape, tokens_in
from sim.blocks.policies import GpuPolicy
from sim.blocks.pool import FreeOrder, Granularity
from sim.costs.model import CostModel
from sim.tiers.chunk_store import DEFAULT_CPU_BACKEND, ChunkPolicy, CpuBackend
from sim.tiers.native import NATIVE_POLICY_NAMES
from sim.tiers.native.sizing import block_bytes, offload_blocks
from sim.workloads.longdocqa import parse_hit_miss, query_label
from sim.workloads.questions import QuestionMode

ORDERS = ("forward", "reverse", "random", "zipf")
# Run names: gpu, gpu+cpu, and with tiers behind the CPU gpu+cpu+disk (or gpu+cpu+disk+remote, ...).
RunName = str
RESERVED_TIER_NAMES = ("gpu", "cpu", "disk")
MAX_STORAGE_TIERS = 4

# Bounds. Total work is bounded so one API call stays well under a few seconds.
MAX_DOCS = 10_000
MAX_DOC_TOKENS = 1_000_000
MAX_PASSES = 100
MAX_REQUESTS_PER_PASS = 100_000
MAX_TOTAL_BLOCKS = 20_000_000
MAX_GPU_TOKENS = 100_000_000
MAX_GB = 4096.0
MAX_QUESTION_TOKENS = 100_000
MAX_ADMISSION = 1000  # offers before a chunk is stored (a tier's admission, vLLM's store_threshold)
# ``--passes`` as text: 100 passes of explicit lists of ~1,000 documents. Checked before the text is parsed.
MAX_PASSES_TEXT = 1_000_000
# ``--question-tokens`` as text: one length of up to 6 digits per document, with a comma and a space.
MAX_QUESTION_TEXT = 8 * MAX_DOCS
# ``--storage-tier`` as text: NAME:SIZE:POLICY:LOAD:admission=N:unit_tokens=T is about 100 characters.
MAX_TIERS_TEXT = 256 * MAX_STORAGE_TIERS


def _within(text: str, limit: int) -> str:
    """``text``, or a ValueError naming its length and ``limit``: checked before any of it is parsed."""
    if len(text) > limit:
        raise ValueError(f"the text is {len(text):,} characters long; the limit is {limit:,}")
    return text


def _at_most(items: list[Any], limit: int, what: str) -> list[Any]:
    """``items``, or a ValueError naming their count and ``limit``: counted before any is parsed (a megabyte of
    them held the server for seconds)."""
    if len(items) > limit:
        raise ValueError(f"{len(items):,} {what}; the limit is {limit:,}")
    return items

# ASCII digits only ([0-9], not \d): Python's \d and int() also read other scripts' digits (zipf@\u0661\u0662 as zipf@12).
_ORDER_RE = re.compile(r"^(forward|reverse|random|zipf)(@([0-9]+))?$")
# LMCache long_doc_qa's query round: tile*2, interleave*3, random*2@SEED, any of them with :HIT:MISS.
_REPEAT_RE = re.compile(r"^(tile|interleave|random)\*([0-9]+)(@([0-9]+))?(:([0-9]+:[0-9]+))?$")


class PassSpec(BaseModel):
    """One pass over the documents: an order name (with a seed for random/zipf) or an explicit list."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    order: Literal["forward", "reverse", "random", "zipf", "list", "repeat"] = "forward"
    seed: int = Field(default=0, ge=0, le=2**31)
    docs: tuple[int, ...] | None = Field(
        default=None, max_length=MAX_REQUESTS_PER_PASS, description="explicit document order (order='list')"
    )
    requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS_PER_PASS, description="zipf: requests in the pass")
    zipf_alpha: float = Field(default=1.1, gt=0, le=10)
    repeat_mode: Literal["tile", "interleave", "random"] | None = Field(
        default=None, description="order='repeat': long_doc_qa's --repeat-mode (random shuffles with seed)"
    )
    repeat_count: int = Field(default=2, ge=1, le=1000, description="order='repeat': long_doc_qa's --repeat-count")
    hit_miss_ratio: str | None = Field(
        default=None, description="order='repeat': long_doc_qa's --hit-miss-ratio, e.g. 3:1 (every 4th prompt misses)"
    )

    @model_validator(mode="after")
    def _list_has_docs(self) -> PassSpec:
        if (self.order == "list") != (self.docs is not None):
            raise ValueError("an explicit pass needs order='list' and docs")
        if self.docs is not None and not self.docs:
            raise ValueError("an explicit pass needs at least one document")
        if (self.order == "repeat") != (self.repeat_mode is not None):
            raise ValueError("a repeated pass needs order='repeat' and repeat_mode (tile, interleave or random)")
        if self.hit_miss_ratio is not None:
            parse_hit_miss(self.hit_miss_ratio)
        return self

    @classmethod
    def parse(cls, text: str) -> PassSpec:
        """``forward``, ``reverse``, ``random@7``, ``zipf@3``, an explicit list ``3/1/2``, or ``tile*2`` (long_doc_qa)."""
        text = text.strip()
        if text.count("/") >= MAX_REQUESTS_PER_PASS:
            raise ValueError(f"the list has {text.count('/') + 1:,} documents; the limit is {MAX_REQUESTS_PER_PASS:,}")
        # Digits between single slashes, checked by str methods: the regex \d+(/\d+)* took 65 ms on 100,000 documents.
        if text.isascii() and text.replace("/", "").isdigit() and "//" not in text and text[0] != "/" != text[-1]:
            return cls(order="list", docs=tuple(map(int, text.split("/"))))
        repeat = _REPEAT_RE.match(text)
        if repeat:
            return cls(
                order="repeat", repeat_mode=repeat.group(1), repeat_count=int(repeat.group(2)),
                seed=int(repeat.group(4) or 0), hit_miss_ratio=repeat.group(6),
            )
        match = _ORDER_RE.match(text)
        if not match:
            raise ValueError(
                f"unknown pass order {text!r}; use one of {', '.join(ORDERS)} (random@SEED, zipf@SEED), "
                "an explicit list of documents such as 3/1/2, or a long_doc_qa repeat such as tile*2, random*2@0:3:1"
            )
        return cls(order=match.group(1), seed=int(match.group(3) or 0))

    @property
    def label(self) -> str:
        """The order as records name it: ``random``, not ``random@7``."""
        if self.repeat_mode is not None:
            return query_label(self.repeat_mode, self.repeat_count, self.seed, self.hit_miss_ratio)
        return self.order

    @property
    def text(self) -> str:
        """The pass as ``--passes`` spells it; ``PassSpec.parse(spec.text) == spec`` for a parsed spec."""
        if self.docs is not None:
            return "/".join(map(str, self.docs))
        if self.order in ("random", "zipf") and self.seed:
            return f"{self.order}@{self.seed}"
        return self.label


def parse_passes(text: str) -> list[PassSpec]:
    """``forward,forward,reverse`` -> three pass specs."""
    if len(text) > MAX_PASSES_TEXT:
        raise ValueError(f"the passes text is {len(text):,} characters long; the limit is {MAX_PASSES_TEXT:,}")
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError("no passes given; e.g. forward,forward,reverse")
    return [PassSpec.parse(t) for t in _at_most(items, MAX_PASSES, "passes in the passes text")]


class StorageTier(BaseModel):
    """A tier behind the CPU (and the disk): a remote store, another disk; its own size, policy, load cost and admission.

    ``--storage-tier NAME:SIZE[:POLICY[:LOAD_MS_PER_TOKEN]][:admission=N][:unit_tokens=T]``
    on the command line, the size in GiB (``8``) or tokens (``50000t``); the
    load cost defaults to the cost model's disk constant. ``admission``: the
    tier stores a chunk on its Nth offer (``sim.tiers.admission``). Its unit is
    the CPU tier's chunk: LMCache keeps one chunk size in every backend.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,15}$", description="the tier's name, as lanes and tables show it")
    gb: float | None = Field(default=None, gt=0, le=100 * MAX_GB, description="size in GiB")
    tokens: int | None = Field(default=None, ge=1, le=1000 * MAX_GPU_TOKENS, description="size in tokens (overrides gb)")
    policy: ChunkPolicy = Field(default="lru", description="eviction policy")
    load_ms_per_token: float | None = Field(default=None, ge=0, le=100, description="default: the disk load constant")
    admission: int = Field(default=1, ge=1, le=MAX_ADMISSION, description="a chunk is stored on its Nth offer (1: the first)")
    unit_tokens: int | None = Field(
        default=None, ge=1, le=65_536, description="tokens per chunk; must be the scenario's chunk_size (default)"
    )

    @model_validator(mode="after")
    def _sized(self) -> StorageTier:
        if self.gb is None and self.tokens is None:
            raise ValueError(f"tier {self.name!r} needs a size: gb or tokens")
        return self

    @classmethod
    def parse(cls, text: str) -> StorageTier:
        """``remote:8`` (8 GiB, LRU), ``remote:50000t:fifo`` (tokens), ``remote:8:lru:0.01`` (ms per token loaded),
        ``remote:8:lru:admission=2`` (stored on the second offer)."""
        parts = text.strip().split(":")
        named = dict(p.split("=", 1) for p in parts if "=" in p)
        parts = [p for p in parts if "=" not in p]
        if not 2 <= len(parts) <= 4 or not set(named) <= {"admission", "unit_tokens"}:
            raise ValueError(
                "a tier is NAME:SIZE[:POLICY[:LOAD_MS_PER_TOKEN]][:admission=N][:unit_tokens=T], "
                f"e.g. remote:8:lru:0.01:admission=2; got {text!r}"
            )
        size = parts[1].strip()
        fields: dict[str, object] = {"name": parts[0], **({"tokens": size[:-1]} if size.endswith("t") else {"gb": size})}
        if len(parts) > 2:
            fields["policy"] = parts[2]
        if len(parts) > 3:
            fields["load_ms_per_token"] = parts[3]
        return cls.model_validate({**fields, **named})

    @property
    def text(self) -> str:
        """The tier as ``--storage-tier`` spells it; ``StorageTier.parse(t.text) == t``."""
        size = f"{self.gb:g}" if self.tokens is None else f"{self.tokens}t"
        cost = "" if self.load_ms_per_token is None else f":{self.load_ms_per_token:g}"
        admission = "" if self.admission == 1 else f":admission={self.admission}"
        unit = "" if self.unit_tokens is None else f":unit_tokens={self.unit_tokens}"
        return f"{self.name}:{size}:{self.policy}{cost}{admission}{unit}"

    def capacity_tokens(self, bytes_per_token: int) -> int:
        if self.tokens is not None:
            return self.tokens
        assert self.gb is not None
        return tokens_in(self.gb, bytes_per_token)


PassInput = Annotated[PassSpec, Field(description="a pass: order name or object")]


class Scenario(BaseModel):
    """Everything one simulation needs. Fields mirror the CLI flags (``doc_tokens`` is ``--doc-tokens``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    docs: int = Field(default=10, ge=1, le=MAX_DOCS, description="number of documents")
    doc_tokens: int = Field(default=5011, ge=1, le=MAX_DOC_TOKENS, description="tokens per document")
    question_tokens: int | list[int] = Field(
        default=13, description="tokens of the question after each document, or one length per document: 13 or 13,40,7"
    )
    questions: QuestionMode = Field(
        default="fresh",
        description="fresh: a document's question changes every pass; same: it is asked again unchanged, so the block "
        "holding the document's end and the question's start can hit too",
    )
    output_tokens: int = Field(
        default=1, ge=1, le=100_000,
        description="tokens generated per request (the first is the one sampled at the end of prefill); vLLM's decode "
        "keeps the KV of all but the last, caching its full blocks until the request ends",
    )
    shared_prefix_tokens: int = Field(default=0, ge=0, le=MAX_DOC_TOKENS, description="a system prompt shared by every prompt")
    gpu_tokens: int = Field(default=21_520, ge=1, le=MAX_GPU_TOKENS, description="GPU KV cache size in tokens, as vLLM logs it")
    cpu_gb: float | None = Field(default=1.5, gt=0, le=MAX_GB, description="CPU tier size in GiB (LMCache max_local_cpu_size; vllm-native: --kv-offloading-size, the total)")
    cpu_tokens: int | None = Field(default=None, ge=1, le=10 * MAX_GPU_TOKENS, description="CPU tier size in tokens (overrides cpu_gb)")
    disk_gb: float | None = Field(default=None, gt=0, le=100 * MAX_GB, description="disk tier size in GiB (off by default)")
    disk_tokens: int | None = Field(default=None, ge=1, le=1000 * MAX_GPU_TOKENS, description="disk tier size in tokens")
    storage_tiers: list[StorageTier] = Field(
        default_factory=list, max_length=MAX_STORAGE_TIERS,
        description="tiers behind the CPU (and disk), searched in order: NAME:GIB[:POLICY[:LOAD_MS_PER_TOKEN]]",
    )
    block_size: int = Field(default=16, ge=1, le=4096, description="GPU block size in tokens")
    chunk_size: int = Field(default=256, ge=1, le=65_536, description="CPU chunk size in tokens")
    passes: list[PassSpec] = Field(
        default_factory=lambda: [PassSpec(order="forward"), PassSpec(order="forward"), PassSpec(order="reverse")],
        min_length=1,
        max_length=MAX_PASSES,
    )
    granularity: Granularity = "block"
    model: str = Field(default=DEFAULT_MODEL, description="model whose KV bytes per token size the tiers")
    kv_bytes_per_token: int | None = Field(default=None, ge=1, le=10_000_000, description="overrides the model's")
    free_order: FreeOrder = "vllm"
    save_unfull_chunk: bool = False
    gpu_policy: GpuPolicy = Field(
        default="lru", description="GPU eviction policy: lru (vLLM's), or fifo, mru, belady (offline optimum) as what-ifs"
    )
    cpu_policy: ChunkPolicy = Field(
        default="lru",
        description="CPU tier eviction policy: lru (LMCache's default), fifo, lfu, mru (LMCache's), s3fifo, arc (libCacheSim's)",
    )
    cpu_backend: CpuBackend = Field(
        default=DEFAULT_CPU_BACKEND,
        description="offload rules: lmcache (LMCache 0.5.6's own), vllm-native (vLLM 0.33's OffloadingConnector, "
        "--kv-offloading-backend native; cpu_gb is its --kv-offloading-size, the total over workers) or brief (the "
        "seed's three simplified rules)",
    )
    blocks_per_chunk: int = Field(
        default=1, ge=1, le=256,
        description="vllm-native: GPU blocks per offload block (vLLM's kv_connector_extra_config blocks_per_chunk)",
    )
    store_threshold: int = Field(
        default=0, ge=0, le=MAX_ADMISSION,
        description="vllm-native: a block is offloaded on its Nth offer to the CPU tier (vLLM's store_threshold; "
        "0 and 1 offload on the first)",
    )
    offload_prompt_only: bool = Field(
        default=True, description="vllm-native: offload prompt blocks only, never generated ones (vLLM's default)"
    )
    seed: int = Field(default=0, ge=0, le=2**31)
    costs: CostModel | None = Field(default=None, description="cost constants; default: the fit to the seed table")

    @field_validator("passes", mode="before")
    @classmethod
    def _parse_pass_strings(cls, value: object) -> object:
        if isinstance(value, str):
            return parse_passes(value)
        if isinstance(value, list):
            return [PassSpec.parse(v) if isinstance(v, str) else v for v in _at_most(value, MAX_PASSES, "passes")]
        return value

    @field_validator("question_tokens", mode="before")
    @classmethod
    def _parse_question_lengths(cls, value: object) -> object:
        """``"13"`` and ``[13]`` are one length for every document; ``"13,40,7"`` one per document."""
        if isinstance(value, str):
            parts = [p.strip() for p in _within(value, MAX_QUESTION_TEXT).split(",") if p.strip()]
            if not parts or not all(re.fullmatch(r"-?[0-9]+", p) for p in parts):
                raise ValueError("lengths are whole numbers of tokens, one or one per document (13 or 13,40,7)")
            value = [int(p) for p in parts]
        if isinstance(value, list) and len(_at_most(value, MAX_DOCS, "lengths (one per document)")) == 1:
            value = value[0]
        for length in value if isinstance(value, list) else [value]:
            if isinstance(length, int) and not 0 <= length <= MAX_QUESTION_TOKENS:
                raise ValueError(f"each length must be greater than or equal to 0 and less than or equal to {MAX_QUESTION_TOKENS}")
        return value

    @field_validator("storage_tiers", mode="before")
    @classmethod
    def _parse_tier_strings(cls, value: object) -> object:
        if isinstance(value, str):
            value = [t for t in _within(value, MAX_TIERS_TEXT).split(",") if t.strip()]
        if isinstance(value, list):
            return [StorageTier.parse(v) if isinstance(v, str) else v for v in _at_most(value, MAX_STORAGE_TIERS, "tiers")]
        return value

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value.lower() not in MODELS:
            raise ValueError(f"unknown model {value!r}; known: {', '.join(MODELS)}")
        return value.lower()

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        # Each problem is located at the field to change, so the CLI names its flag and the API its field.
        problems: list[InitErrorDetails] = []

        def problem(field: str, message: str) -> None:
            error = PydanticCustomError("value_error", message)
            problems.append(InitErrorDetails(type=error, loc=(field,), input=getattr(self, field)))

        if isinstance(self.question_tokens, list) and len(self.question_tokens) != self.docs:
            problem("question_tokens", f"one length per document: {self.docs} lengths, got {len(self.question_tokens)}")
        if self.granularity == "doc" and self.output_tokens > 1:
            problem("output_tokens", "must be 1 with granularity doc: whole documents are cached, never generated tokens")
        if self.chunk_size % self.block_size:
            problem("chunk_size", f"must be a multiple of block_size ({self.block_size})")
        for i, spec in enumerate(self.passes):
            if spec.docs is not None and max(spec.docs) >= self.docs:
                problem("passes", f"pass {i + 1} lists document {max(spec.docs)}, but there are only {self.docs} (0..{self.docs - 1})")
        names = [t.name for t in self.storage_tiers]
        clash = sorted({n for n in names if n in RESERVED_TIER_NAMES or names.count(n) > 1})
        if clash:
            problem("storage_tiers", f"tier names must be unique and none of {', '.join(RESERVED_TIER_NAMES)}: {', '.join(clash)}")
        for t in self.storage_tiers:
            # LMCache has one chunk_size for every backend (lmcache/v1/config.py:90, 0.5.6): its storage tiers hold
            # the very chunks its CPU tier holds, keyed alike, so a tier of another unit is not LMCache's.
            if t.unit_tokens not in (None, self.chunk_size):
                problem(
                    "storage_tiers",
                    f"tier {t.name}: unit_tokens must be the chunk size ({self.chunk_size}): every tier behind the CPU "
                    f"keeps LMCache's one chunk size, got {t.unit_tokens}",
                )
        if self.gpu_tokens < self.min_gpu_tokens:
            what = "one whole document" if self.granularity == "doc" else "one whole prompt plus vLLM's null block"
            problem("gpu_tokens", f"must hold {what}: at least {self.min_gpu_tokens}")
        if self.total_blocks > MAX_TOTAL_BLOCKS:
            problem(
                "docs",
                f"total work is {self.total_blocks:,} blocks (requests x prompt blocks); the limit is {MAX_TOTAL_BLOCKS:,}: "
                "fewer documents, passes or tokens",
            )
        self._native_problems(problem)
        self._tier_size_problems(problem)
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    def _native_problems(self, report: Callable[[str, str], None]) -> None:
        """What vllm-native cannot run, and its knobs given to another backend."""
        if self.cpu_backend != "vllm-native":
            for name, default in (("blocks_per_chunk", 1), ("store_threshold", 0), ("offload_prompt_only", True)):
                if getattr(self, name) != default:
                    report(name, f"only cpu_backend vllm-native reads it (the backend is {self.cpu_backend})")
            return
        if self.cpu_policy not in NATIVE_POLICY_NAMES:
            report("cpu_policy", f"vllm-native offers {' and '.join(NATIVE_POLICY_NAMES)} (vLLM's CachePolicyFactory)")
        if self.granularity == "doc":
            report("granularity", "must be block with vllm-native: it offloads GPU blocks")
        if self.save_unfull_chunk:
            report("save_unfull_chunk", "LMCache's option; vllm-native offloads full blocks only")
        if self.disk_capacity_tokens is not None or self.storage_tiers:
            field = "disk_gb" if self.disk_gb is not None else "disk_tokens" if self.disk_tokens is not None else "storage_tiers"
            report(field, "vllm-native models vLLM's CPU offloading alone; tiers behind it need lmcache or brief")

    def _tier_size_problems(self, report: Callable[[str, str], None]) -> None:
        """Each offload tier must hold the least it stores: a smaller one never stores anything (``cpu_gb: 5e-324``
        was a tier of 0 tokens). That is one offload block under vllm-native, one chunk under LMCache (full chunks
        only), and one token with ``save_unfull_chunk`` (a prompt's partial last chunk may be that short)."""
        native = self.cpu_backend == "vllm-native"
        unit = 1 if self.save_unfull_chunk and not native else self.offload_unit_tokens
        what = "offload block" if native else "token" if unit == 1 else "chunk"
        unit_bytes = block_bytes(self.bytes_per_token, unit) if native else unit * self.bytes_per_token
        sizes = [
            ("cpu_tokens" if self.cpu_tokens is not None else "cpu_gb", "", self.cpu_capacity_tokens, self.cpu_tokens is not None),
            ("disk_tokens" if self.disk_tokens is not None else "disk_gb", "", self.disk_capacity_tokens, self.disk_tokens is not None),
            *[("storage_tiers", f"tier {t.name} ", t.capacity_tokens(self.bytes_per_token), t.tokens is not None) for t in self.storage_tiers],
        ]
        for field, name, tokens, in_tokens in sizes:
            if tokens is not None and tokens < unit:
                need = f"{unit} tokens" if in_tokens else f"{unit_bytes:,} bytes"
                size = "" if unit == 1 else f" of {unit} tokens"
                report(field, f"{name}must hold at least one {what}{size}: {need}")

    def replace(self, **changes: object) -> Scenario:
        """A validated copy with some fields changed (``model_copy`` would skip validation)."""
        return Scenario(**{**self.model_dump(exclude=set(changes)), **changes})

    @property
    def min_gpu_tokens(self) -> int:
        """The smallest GPU tier that can run one request."""
        if self.granularity == "doc":
            return self.shared_prefix_tokens + self.doc_tokens
        return (self.request_blocks + 1) * self.block_size

    @property
    def request_blocks(self) -> int:
        """GPU blocks one request holds at its end: its prompt and the KV of all but its last generated token."""
        return -(-(self.prompt_tokens + self.output_tokens - 1) // self.block_size)

    def question_length(self, doc: int) -> int:
        """Tokens of document ``doc``'s question."""
        q = self.question_tokens
        return q[doc] if isinstance(q, list) else q

    def prompt_tokens_of(self, doc: int) -> int:
        return self.shared_prefix_tokens + self.doc_tokens + self.question_length(doc)

    @property
    def prompt_tokens(self) -> int:
        """The longest prompt: every prompt, when all questions have one length (what bounds and sizes use)."""
        q = self.question_tokens
        return self.shared_prefix_tokens + self.doc_tokens + (max(q) if isinstance(q, list) else q)

    def pass_length(self, spec: PassSpec) -> int:
        if spec.docs is not None:
            return len(spec.docs)
        if spec.repeat_mode is not None:
            return self.docs * spec.repeat_count
        return spec.requests or self.docs

    @property
    def total_requests(self) -> int:
        return sum(self.pass_length(p) for p in self.passes)

    @property
    def total_blocks(self) -> int:
        return self.total_requests * self.request_blocks

    @property
    def kv_shape(self) -> KvShape:
        return model_shape(self.model)

    @property
    def bytes_per_token(self) -> int:
        return self.kv_bytes_per_token or self.kv_shape.bytes_per_token

    @property
    def offload_unit_tokens(self) -> int:
        """Tokens of the CPU tier's unit: LMCache's chunk, or vLLM's offload block (``blocks_per_chunk`` GPU blocks)."""
        if self.cpu_backend == "vllm-native":
            return self.block_size * self.blocks_per_chunk
        return self.chunk_size

    @property
    def cpu_capacity_tokens(self) -> int | None:
        """The CPU tier's size in tokens; under vllm-native whole offload blocks of page-aligned bytes."""
        if self.cpu_backend == "vllm-native":
            unit = self.offload_unit_tokens
            if self.cpu_tokens is not None:
                return self.cpu_tokens // unit * unit
            if self.cpu_gb is not None:
                return offload_blocks(self.cpu_gb, self.bytes_per_token, unit) * unit
            return None
        if self.cpu_tokens is not None:
            return self.cpu_tokens
        if self.cpu_gb is not None:
            return tokens_in(self.cpu_gb, self.bytes_per_token)
        return None

    @property
    def disk_capacity_tokens(self) -> int | None:
        if self.disk_tokens is not None:
            return self.disk_tokens
        if self.disk_gb is not None:
            return tokens_in(self.disk_gb, self.bytes_per_token)
        return None

    @property
    def behind_cpu(self) -> list[str]:
        """The names of the tiers behind the CPU, in lookup order (the disk first)."""
        return (["disk"] if self.disk_capacity_tokens is not None else []) + [t.name for t in self.storage_tiers]

    @property
    def run_names(self) -> list[RunName]:
        """``gpu``, ``gpu+cpu``, and with tiers behind the CPU one run with all of them (``gpu+cpu+disk``)."""
        names: list[RunName] = ["gpu"]
        if self.cpu_capacity_tokens is not None:
            names.append("gpu+cpu")
            if self.behind_cpu:
                names.append("+".join(["gpu", "cpu", *self.behind_cpu]))
        return names
