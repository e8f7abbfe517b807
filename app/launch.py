"""The ``kvscope`` executable: ``kvscope curve TRACE --json`` of a readable trace runs without click; the rest is click's.

Reading the bundled sample and its curve take ~25 ms, and importing click
and the command's modules (``app.cli``, the scenario flags, the policy
modules they name) took ~35 ms before either began. So a command line of
exactly the curve's plain form (a trace file or bundled name, ``--json``,
maybe ``--points N``) is run here by the same calls ``app.cli.curve`` makes,
and prints the same bytes. Any other command line, and this one whenever it
would end otherwise than by printing the curve (a bad file, a budget
exceeded), goes to the click group (``app.cli.entry.run``), which parses,
checks, reports and exits as it always did. Only what no input causes is
handled here, as click would: an interrupt, a closed pipe, and the net below
unforeseen errors (``entry.unforeseen``).
"""

from __future__ import annotations

import os
import re
import sys

# --points as click.IntRange(1, MAX_CURVE_POINTS) reads it, in its plain spelling only (click's int() also takes
# "+5", " 5" and "0_5": those go to click); the bound is checked against the limit below.
_POINTS = re.compile(r"[1-9][0-9]{0,5}")


def run() -> None:
    """``kvscope``: the curve's quick form when the command line is one, else the click group."""
    try:
        done = _quick_curve(sys.argv[1:])
    except (EOFError, KeyboardInterrupt):
        import click

        # As click.core.Command.main ends an interrupted command: a blank line closes the terminal's ^C, then this.
        click.echo(file=sys.stderr)
        click.echo("Aborted!", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:  # noqa: BLE001 - the same net as click's commands have
        from app.cli.entry import unforeseen

        unforeseen(exc)
    if not done:
        from app.cli.entry import run as run_click

        run_click()


def curve_arguments(args: list[str]) -> tuple[str, int] | None:
    """``(trace, points)`` when ``args`` is ``curve TRACE --json [--points N]`` in any order, each at most once; else None."""
    if not args or args[0] != "curve":
        return None
    trace: str | None = None
    points: str | None = None
    as_json = False
    rest = iter(args[1:])
    for arg in rest:
        if arg == "--json" and not as_json:
            as_json = True
        elif arg == "--points" and points is None:
            points = next(rest, "")
        elif arg.startswith("--points=") and points is None:
            points = arg.removeprefix("--points=")
        elif not arg.startswith("-") and arg and trace is None:
            trace = arg
        else:
            return None
    if trace is None or not as_json or (points is not None and not _POINTS.fullmatch(points)):
        return None
    return trace, int(points or 100)  # 100: app.cli.curve's default


def _quick_curve(args: list[str]) -> bool:
    """Print ``kvscope curve TRACE --json``'s output and return True, or return False having printed nothing."""
    parsed = curve_arguments(args)
    # Shell completion (click's _KVSCOPE_COMPLETE) is click's to answer; so is an absent stdout, which click.echo
    # skips, and any command line on Windows, where click expands wildcards in the arguments.
    if (
        parsed is None or sys.stdout is None or os.name == "nt"
        or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ)
    ):
        return False
    trace, points = parsed
    _import_dataclasses_without_inspect()
    from sim.trace import BUNDLED_TRACES, TraceError, open_trace

    # A file read here and refused is read again by click, which reports it: only a regular file reads the same twice.
    if not (os.path.isfile(trace) or (trace in BUNDLED_TRACES and not os.path.exists(trace))):
        return False

    from app import budgets
    from sim.curve import MAX_CURVE_POINTS, lru_curve, trace_stream
    from sim.work import OverBudget, block_stream_cost

    if points > MAX_CURVE_POINTS:
        return False
    try:
        stream = trace_stream(open_trace(trace))
        budgets.cli_budget().check(block_stream_cost(len(stream), points))
    except (TraceError, OverBudget, ValueError):
        return False
    from sim import jsontext  # as app.cli.curve writes it (a non-finite number as null)

    text = jsontext.dumps(lru_curve(stream, points)["points"], indent=1) + "\n"
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        import errno

        if exc.errno != errno.EPIPE:
            raise
        # A closed pipe (``| head``): as click ends it (click.core.Command.main), quietly and with status 1.
        from click.utils import PacifyFlushWrapper

        sys.stdout = PacifyFlushWrapper(sys.stdout)  # type: ignore[assignment]
        sys.stderr = PacifyFlushWrapper(sys.stderr)  # type: ignore[assignment]
        sys.exit(1)
    # Nothing left needs collecting: with every object frozen, the interpreter's collections at exit skip them, which
    # took ~5 ms of CPU (measured against the same command without). Memory is still freed, files closed, atexit run.
    import gc

    gc.freeze()
    return True


def _import_dataclasses_without_inspect() -> None:
    """Import ``dataclasses`` (the trace, the profile and the budget are dataclasses) without loading ``inspect``.

    dataclasses imports inspect, with ast, dis and tokenize (~5 ms of CPU, a tenth of this command, measured), and
    uses it once: ``inspect.signature`` to write a docstring for a dataclass that has none. It gets a stand-in that
    imports the real module on the first attribute asked of it; every other importer gets the real one.
    """
    if "dataclasses" in sys.modules or "inspect" in sys.modules:
        return
    import importlib
    import types

    stand_in = types.ModuleType("inspect")
    stand_in.__getattr__ = lambda name: getattr(importlib.import_module("inspect"), name)  # type: ignore[method-assign]
    sys.modules["inspect"] = stand_in
    try:
        import dataclasses  # noqa: F401
    finally:
        del sys.modules["inspect"]
