"""The budget of each surface: how much one CLI command or one web request may cost (``sim.bounds.budget`` estimates the cost).

The CLI runs one command for one user, who can wait and owns the memory: its
budget only stops what would not finish or not fit. The web serves many
clients from one process: one request must stay within seconds and a fraction
of the memory, and at most ``concurrency`` simulations run at once with
``queue`` more waiting (beyond: 503 with Retry-After). ``kvscope serve
--budget work=2e7,memory=512MiB,seconds=20`` (or ``KVSCOPE_BUDGET``) changes
the web's at start-up; ``KVSCOPE_CLI_BUDGET=work=1e11,memory=64GiB`` raises (or
lowers) the CLI's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields, replace

from sim.bounds.budget import Budget

ENV_VAR = "KVSCOPE_BUDGET"
CLI_ENV_VAR = "KVSCOPE_CLI_BUDGET"

MIB = 2**20
GIB = 2**30

# One command: hours of work at most and what a workstation holds.
CLI = Budget(work_steps=20_000_000_000, memory_bytes=16 * GIB, response_bytes=4 * GIB)


@dataclass(frozen=True, slots=True)
class WebBudget:
    """One web request's budget, and how many may run and wait at once."""

    # ~1 s of simulation at ~0.5 us a block step on a quiet machine (~3 s at the 1-1.5 us of a busy one); a few
    # hundred MiB; an answer a browser can take. The deadline stops what is slower still: no answer takes over ~4 s.
    work: int = 2_000_000
    memory: int = 512 * MIB
    response: int = 64 * MIB
    seconds: float = 4.0  # past it, the work stops at its next request and the client gets 503
    concurrency: int = 2  # simulations at once: the cores of a small machine
    queue: int = 8  # waiting for one of them: about what the workers get through within the deadline
    # The advisor's searches (hundreds of simulations, the page polling their progress) in the same workers: at the
    # 2 us a block step the per-request budget allows (2e6 in 4 s), what ends within search_seconds. The page's
    # default searches estimate ~11 M (the seed lab, GPU and CPU bought: 222 candidates, 2.5-12 s measured) and
    # ~20 M (the bundled trace: 42 compiled replays and the 618 of their shrinking, 4-5 s measured).
    search_work: int = 60_000_000
    search_seconds: float = 120.0
    # A file imported as a run (``POST /api/runs/import``), read in the same workers, its rows checked one by one: a
    # 15 MiB CSV of 168,506 rows took 7.3 s at a load average of 10 on 2 cores (the worst machine it was tried on).
    import_seconds: float = 30.0

    @property
    def per_request(self) -> Budget:
        return Budget(self.work, self.memory, self.response, self.seconds)

    @property
    def per_search(self) -> Budget:
        return Budget(self.search_work, self.memory, self.response, self.search_seconds)

    def describe(self) -> str:
        return ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


_SIZE = re.compile(r"^\s*([0-9.eE+]+)\s*(B|KiB|MiB|GiB)?\s*$")
_UNIT = {None: 1, "B": 1, "KiB": 2**10, "MiB": MIB, "GiB": GIB}


def _number(key: str, text: str) -> float:
    match = _SIZE.match(text)
    try:
        if match is None:
            raise ValueError
        value = float(match.group(1)) * _UNIT[match.group(2)]
    except ValueError:
        raise ValueError(f"{key}: {text!r} is not a number (sizes may end in KiB, MiB or GiB)") from None
    if not 0 <= value < 1e15:
        raise ValueError(f"{key}: must be from 0 to below 1e15, got {text}")
    return value


def _settings(text: str, keys: list[str]) -> dict[str, float]:
    """``KEY=VALUE,...`` with each KEY one of ``keys`` and each VALUE a number or a size."""
    out: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in keys:
            raise ValueError(f"{item!r}: expected KEY=VALUE with KEY one of {', '.join(keys)}")
        out[key] = _number(key, value)
    return out


def parse_web_budget(text: str, base: WebBudget | None = None) -> WebBudget:
    """``work=2e6,memory=512MiB,response=64MiB,seconds=4,concurrency=2,queue=8``; any subset, the rest from ``base``."""
    changes = {key: number if key.endswith("seconds") else int(number) for key, number in _settings(text, [f.name for f in fields(WebBudget)]).items()}
    budget = replace(base or WebBudget(), **changes)
    if budget.concurrency < 1 or min(budget.seconds, budget.search_seconds, budget.import_seconds) <= 0:
        raise ValueError("concurrency must be at least 1, seconds, search_seconds and import_seconds above 0")
    return budget


def web_budget() -> WebBudget:
    """The budget this server runs with: the default, changed by ``KVSCOPE_BUDGET``."""
    return parse_web_budget(os.environ.get(ENV_VAR, ""))


def parse_cli_budget(text: str, base: Budget = CLI) -> Budget:
    """``work=2e10,memory=16GiB,response=4GiB``; any subset, the rest from ``base``."""
    names = {"work": "work_steps", "memory": "memory_bytes", "response": "response_bytes"}
    return replace(base, **{names[key]: int(number) for key, number in _settings(text, list(names)).items()})


def cli_budget() -> Budget:
    """The budget of one CLI command: the default, changed by ``KVSCOPE_CLI_BUDGET``."""
    return parse_cli_budget(os.environ.get(CLI_ENV_VAR, ""))
