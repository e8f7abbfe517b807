"""A measurement file as the advisor's workload: its requests (documents, passes, order) replayed as a scenario."""

from __future__ import annotations

from sim.calibration.measurements import Measurement
from sim.workloads.scenario import PassSpec, Scenario


def scenario_from_measurements(rows: list[Measurement], base: Scenario) -> Scenario:
    """The requests of the file's first configuration, in ``seq`` order: one explicit pass per pass number.

    The file names each request's document and prompt length but not its
    question, so the base scenario's shared prefix and question length are
    taken as they are and the document is the rest of the prompt; every prompt
    must then be as long as every other (the scenario has one document length).
    """
    if not rows:
        raise ValueError("measurements: the file has no requests")
    config = rows[0].config
    mine = sorted((r for r in rows if r.config == config), key=lambda r: r.seq)
    lengths = {r.prompt_tokens for r in mine}
    if len(lengths) > 1:
        raise ValueError(
            f"measurements: prompt_tokens differ ({min(lengths):,} to {max(lengths):,}); the advisor replays one prompt length"
        )
    questions = base.question_tokens if isinstance(base.question_tokens, int) else 0
    doc_tokens = lengths.pop() - base.shared_prefix_tokens - questions
    if doc_tokens < 1:
        raise ValueError(f"measurements: prompt_tokens must exceed the shared prefix and question ({base.shared_prefix_tokens + questions})")
    passes: dict[int, list[int]] = {}
    for r in mine:
        passes.setdefault(r.pass_, []).append(r.doc)
    specs = [PassSpec(order="list", docs=tuple(docs)) for _, docs in sorted(passes.items())]
    return base.replace(docs=max(r.doc for r in mine) + 1, doc_tokens=doc_tokens, passes=specs)
