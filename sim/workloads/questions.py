"""How a scenario's questions repeat: ``fresh`` (a new question every pass) or ``same`` (asked again unchanged);
and long_doc_qa's repeat modes (``sim.workloads.longdocqa``).

A module of its own so that the CLI can offer the choices without importing the scenario models.
"""

from __future__ import annotations

from typing import Literal, get_args

QuestionMode = Literal["fresh", "same"]
QUESTION_MODES: tuple[QuestionMode, ...] = get_args(QuestionMode)

RepeatMode = Literal["tile", "interleave", "random"]
REPEAT_MODES: tuple[RepeatMode, ...] = get_args(RepeatMode)
