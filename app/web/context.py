"""What every router shares: the page templates (with number filters), the static files, the stream counters, the runs database."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape
from starlette.types import ASGIApp

from app.budgets import web_budget
from app.live.targets import Target, configured_targets
from app.runs.store import RunStore, announce_pruning
from app.web.model_fields import bounds, number_attrs
from app.web.sse import StreamStats
from app.web.versus_view import STAT_LABELS
from app.web.workers import Workers
from sim.blocks.kv import gib_for
from sim.calibration.versus import STATS
from sim.engine.events import TIER_LABELS, tier_label
from sim.explain.causes import LABELS as CAUSE_LABELS
from sim.explain.causes import PRECEDENCE
from sim.numeric.figures import ms_text, times_text
from sim.tiers.chunk_store import CPU_BACKENDS


def _package_dir(name: str) -> Path:
    """Where an installed data package lives: ``app/web/<x>`` in a wheel, the checkout's ``<x>/`` in an editable install.

    ``find_spec`` asks the import system (which knows both layouts, see pyproject.toml) without running the
    package, so nothing is written beside the files it serves.
    """
    spec = find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{name} is not installed: reinstall kvscope (pip install kvscope, or make .venv/.installed)")
    return Path(next(iter(spec.submodule_search_locations)))


TEMPLATES_DIR = _package_dir("app.web.templates")
STATIC_DIR = _package_dir("app.web.static")
# The partial plotly.js bundle (scatter and bar), vendored with a gzip copy by scripts/vendor_assets.py.
PLOTLY_JS = STATIC_DIR / "vendor" / "plotly-basic.min.js"
# Named by its content, so a browser may keep it for good: a new bundle is a new URL (routes/assets.py).
PLOTLY_URL = f"/assets/plotly-basic.{hashlib.sha256(PLOTLY_JS.read_bytes()).hexdigest()[:12]}.min.js"


def tokens(value: int | float | None) -> str:
    """``50240`` -> ``50,240``; absent -> an en dash."""
    return "–" if value is None else f"{value:,.0f}"


ms = ms_text  # the CLI's and the page's one way of writing milliseconds and speed-ups (sim.numeric.figures)
times = times_text


def gib(tokens: int, bytes_per_token: int) -> str:
    """Tokens of KV as GiB of 1024**3 bytes, as LMCache and vLLM size their tiers: ``21504, 28672`` -> ``0.57 GiB``."""
    return f"{gib_for(tokens, bytes_per_token):.2f} GiB"


def list_breaks(value: str) -> Markup:
    """A line may break after the comma of a list (``forward,<wbr>reverse``), not after a thousands comma (``2,000``)."""
    return Markup(re.sub(r",(?=[^\d\s])", ",<wbr>", str(escape(value))))


# A unit the server writes after a number ("5,011 tok", "1.5 GiB", "10 docs"): the two stay on one line.
UNIT = re.compile(r"(\d) (tok|tokens|GiB|GB|MiB|docs|requests|ms)\b")


def whole_units(value: str) -> Markup:
    """The text with a no-break space between each number and its unit: a narrow column breaks ``1.5 GiB`` elsewhere."""
    return Markup(UNIT.sub("\\1&nbsp;\\2", str(escape(value))))


def make_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=TEMPLATES_DIR)
    templates.env.filters.update(tokens=tokens, ms=ms, times=times, gib=gib, list_breaks=list_breaks, whole_units=whole_units)
    templates.env.filters["tier_label"] = tier_label  # a tier's display name, as the CLI's tables give it (sim.engine.events)
    templates.env.globals["tier_labels"] = TIER_LABELS  # the same names for the page's scripts (static/js/tiers.js)
    # The cause vocabulary of sim.explain, in precedence order, for the page's chart and log (one definition).
    causes = [{"name": c, "label": CAUSE_LABELS[c]} for c in PRECEDENCE]
    # The per-pass table's TTFT figures, its columns and its help text alike (sim.calibration.versus.STATS, in that order).
    ttft_stats = [{"field": name, "label": STAT_LABELS[name]} for name in STATS]
    templates.env.globals.update(static_version=_static_version(), causes=causes, plotly_src=PLOTLY_URL,
                                  number_attrs=number_attrs, field_bounds=bounds,
                                  ttft_stats=ttft_stats, cpu_backends=CPU_BACKENDS)
    return templates


def _static_version() -> str:
    """Changes whenever a static file does, so browsers never run a stale script against a new page."""
    newest = max((p.stat().st_mtime_ns for p in STATIC_DIR.rglob("*") if p.is_file()), default=0)
    return format(newest // 1_000_000, "x")


@dataclass(frozen=True)
class Web:
    """Handed to every router factory: ``router(*, web: Web)``."""

    templates: Jinja2Templates = field(default_factory=make_templates)
    streams: StreamStats = field(default_factory=StreamStats)
    # Live mode's targets, fixed at start-up (``kvscope serve --target``, ``KVSCOPE_TARGETS``).
    live_targets: tuple[Target, ...] = field(default_factory=configured_targets)
    # Where runs are kept (``kvscope serve --db``, ``KVSCOPE_DB``; ``:memory:`` keeps them only while serving).
    runs: RunStore = field(default_factory=lambda: announce_pruning(RunStore.from_env()))  # says what it prunes
    # The proxied paths, (method, path) -> ASGI endpoint: filled by the watch router, served first (app.web.proxied).
    proxied: dict[tuple[str, str], ASGIApp] = field(default_factory=dict)
    # The heavy calls' worker processes and the budget of one request (``kvscope serve --budget``, ``KVSCOPE_BUDGET``).
    workers: Workers = field(default_factory=lambda: Workers(web_budget()))
