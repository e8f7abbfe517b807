"""The serving flags are one definition: simulate, replay, explain and advise take the same ones, checked alike."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from app.cli.advise import command as advise
from app.cli.explain import command as explain
from app.cli.replay import command as replay
from app.cli.serving_flags import flag_of
from app.cli.simulate import command as simulate
from sim.sched.serving import Serving

COMMANDS = {"simulate": simulate, "replay": replay, "explain": explain, "advise": advise}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_serving_field_is_a_flag_of_the_command(name: str) -> None:
    flags = {opt for p in COMMANDS[name].params for opt in (*p.opts, *getattr(p, "secondary_opts", ()))}
    # Every field of Serving, in kebab case as vllm serve spells it (a boolean also as --no-x).
    for field, info in Serving.model_fields.items():
        assert flag_of(field) in flags, (name, field)
        if info.annotation == bool | None:
            assert "--no-" + field.replace("_", "-") in flags


@pytest.mark.parametrize("name", ["explain", "advise"])
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--concurrency", "0"], "--concurrency"),  # ge=1
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--rate", "-1"], "--rate"),  # gt=0
        (["--rate", "1", "--concurrency", "2"], "not both"),
        # A check over two fields names both by their flags: 100 tokens cannot serve 128 sequences.
        (["--max-num-batched-tokens", "100", "--max-num-seqs", "128"], "--max-num-batched-tokens (100) must be at least --max-num-seqs"),
    ],
)
def test_a_bad_serving_flag_exits_2_naming_it(name: str, args: list[str], named: str) -> None:
    target = ["--p90-ms", "100"] if name == "advise" else []
    result = CliRunner().invoke(COMMANDS[name], ["--preset", "seed-lab", *target, *args])
    assert result.exit_code == 2, result.output
    assert named in result.output


def test_advise_timed_needs_a_trace_and_speedup_needs_timed() -> None:
    run = lambda *a: CliRunner().invoke(advise, ["--preset", "seed-lab", "--p90-ms", "100", *a])  # noqa: E731
    assert "--speedup: needs --timed" in run("--speedup", "2").output
    assert "--timed: needs --trace" in run("--timed").output
