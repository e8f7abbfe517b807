"""``kvscope watch``: attach to a vLLM server's KV events and show what its GPU and CPU tiers hold, live."""

from __future__ import annotations

import io
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

import click
import httpx

from app.cli.save_run import not_kept, open_store, save_options, say_kept
from app.live import prom
from sim.bounds import jsontext, textfile
from sim.kvevents import wire
from sim.kvevents.endpoints import EndpointError, check_endpoint
from sim.kvevents.feed import Feed
from sim.kvevents.recording import Recorder, RecordingError, read_recording
from sim.kvevents.subscriber import Subscriber

MAX_SECONDS = 7 * 24 * 3600
STATUS_EVERY_S = 1.0
# Seconds without a message after which the summary says the publisher has not answered.
SILENT_AFTER_S = 5.0

Totals = dict[str, tuple[int, int]]  # medium -> (blocks stored, blocks removed) since the start


@click.command("watch")
@click.option("--kv-events", "endpoint", default=None, metavar="tcp://HOST:PORT",
              help="the server's KV event publisher (vLLM's --kv-events-config endpoint)")
@click.option("--replay", default=None, metavar="tcp://HOST:PORT", help="its replay endpoint, to fill gaps")
@click.option("--topic", default="kv-events", show_default=True, help="the publisher's topic")
@click.option("--metrics", default=None, metavar="URL", help="the server's base URL, to show its /metrics cache counters too")
@click.option("--seconds", type=click.FloatRange(0, MAX_SECONDS, min_open=True), default=None,
              help="stop after this many seconds (default: at Ctrl-C)")
@click.option("--record", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the events to this JSONL file (must not exist); kvscope replay reads it as a trace")
@click.option("--from", "from_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="play a recorded file instead of connecting")
@click.option("--json", "as_json", is_flag=True, help="print the final state as JSON at exit")
@save_options
def command(
    endpoint: str | None, replay: str | None, topic: str, metrics: str | None, seconds: float | None,
    record: Path | None, from_file: Path | None, as_json: bool, db: str | None, no_save: bool,
) -> None:
    """Subscribe to a vLLM server's KV events and print, every second, the blocks and tokens each medium holds,
    stores and removals per second and any gaps; at exit, the resident prefixes. The events are kept as a watch
    run (kvscope runs export ID --format jsonl gives them back as a --record file) unless --no-save."""
    if (endpoint is None) == (from_file is None):
        raise click.UsageError("give either --kv-events tcp://HOST:PORT or --from FILE")
    for flag, value in (("--kv-events", endpoint), ("--replay", replay)):
        if value is not None:
            try:
                check_endpoint(value)
            except EndpointError as exc:
                raise click.BadParameter(str(exc), param_hint=flag) from None
    if record is not None and record.exists():
        raise click.BadParameter(f"{record} exists; choose a new file", param_hint="--record")
    live: IO[str] = sys.stderr if as_json else sys.stdout
    feed = Feed(topic=topic)
    with ExitStack() as stack:
        if record is not None:
            out = stack.enter_context(record.open("x", encoding="utf-8"))
            feed.listeners.append(Recorder(out, feed.state))
        if from_file is not None:
            _play(feed, from_file, topic)
            extra: dict[str, Any] = {}
        else:
            assert endpoint is not None
            kept = _kept_lines(db, no_save, endpoint)
            if kept is not None:
                feed.listeners.append(Recorder(kept, feed.state))  # type: ignore[arg-type]  # a file-like writer
            try:
                extra = _watch(feed, endpoint, replay, topic, metrics, seconds, live)
            finally:
                if kept is not None:
                    _finish(kept)
    summary = {**feed.summary(), **extra}
    if as_json:
        click.echo(jsontext.dumps(summary, indent=1))
    else:
        click.echo(final_text(summary))
    if from_file is None and extra.get("received") == 0:
        raise SystemExit(1)


def _kept_lines(db: str | None, no_save: bool, endpoint: str) -> Any:
    """A ``WatchLines`` keeping the events in the runs database (committed each second), or None."""
    store = open_store(db, no_save)
    if store is None:
        return None
    from app.runs.recording import WatchLines
    from app.runs.store import StoreError

    try:
        return WatchLines(store, endpoint)
    except StoreError as exc:
        not_kept(exc)
        return None


def _finish(kept: Any) -> None:
    kept.finish()
    kept.writer.store.close()
    if kept.problem:
        not_kept(f"kept only up to here ({kept.kept:,} events in run {kept.run_id}): {kept.problem}")
    else:
        say_kept(kept.run_id)


def _play(feed: Feed, path: Path, topic: str) -> None:
    """Feed a recording through the same checks as the live stream (a seq missing from it is a gap, unfilled)."""
    try:
        lines = io.StringIO(textfile.read_text(path))
        for seq, ts, events in read_recording(lines):
            gap = feed.receive([topic.encode(), seq.to_bytes(8, "big"), wire.encode(events, ts)])
            if gap is not None:
                feed.fill(gap, [], "not in the recording")
    except (RecordingError, textfile.FileProblem) as exc:
        raise click.UsageError(f"{path}: {exc}") from None


def _watch(
    feed: Feed, endpoint: str, replay: str | None, topic: str, metrics: str | None, seconds: float | None,
    live: IO[str],
) -> dict[str, Any]:
    sub = Subscriber(endpoint, replay, feed=feed)
    meter = _Metrics(metrics) if metrics else None
    started = time.monotonic()
    deadline = started + seconds if seconds is not None else None
    next_status = started + STATUS_EVERY_S
    previous = _totals(feed)
    try:
        while deadline is None or time.monotonic() < deadline:
            wait_s = min(next_status, deadline or next_status) - time.monotonic()
            sub.poll(max(0, int(wait_s * 1000)))
            now = time.monotonic()
            if now >= next_status:
                totals = _totals(feed)
                line = status_line(feed, totals, previous, now - next_status + STATUS_EVERY_S)
                if meter is not None:
                    line += " | " + meter.line()
                if sub.received == 0 and now - started >= SILENT_AFTER_S:
                    line += f" | no message from {endpoint} in {now - started:.0f} s"
                print(line, file=live, flush=True)
                previous, next_status = totals, now + STATUS_EVERY_S
    except KeyboardInterrupt:
        pass
    finally:
        sub.close()
    elapsed = time.monotonic() - started
    extra: dict[str, Any] = {"received": sub.received, "seconds": round(elapsed, 3)}
    if sub.received == 0:
        feed.report(f"no message from {endpoint} in {elapsed:.1f} s: is the server started with --kv-events-config "
                    f"(publisher zmq, this endpoint) and the topic {topic!r}?")
        extra["problems"] = list(feed.problems)
    if meter is not None:
        extra["metrics"] = meter.reading()
    return extra


def _totals(feed: Feed) -> Totals:
    return {name: (m.stored, m.removed) for name, m in feed.state.media.items()}


def status_line(feed: Feed, totals: Totals, previous: Totals, span_s: float) -> str:
    """One second of the stream: per medium, blocks and tokens held and blocks stored and removed per second."""
    parts = []
    for m in feed.state.ordered():
        stored, removed = totals[m.name]
        was_stored, was_removed = previous.get(m.name, (0, 0))
        parts.append(
            f"{m.name} {len(m.blocks):,} blocks {m.tokens:,} tokens "
            f"+{(stored - was_stored) / span_s:,.0f}/s -{(removed - was_removed) / span_s:,.0f}/s"
        )
    parts.append(f"batches {feed.batches:,} gaps {feed.gaps} lost {feed.lost}")
    if feed.problem_count:
        parts.append(f"problems {feed.problem_count} (last: {feed.problems[-1]})")
    return " | ".join(parts)


def final_text(summary: dict[str, Any]) -> str:
    lines = [
        f"{summary['batches']:,} batches, {summary['events']:,} events, {summary['gaps']} gaps "
        f"({summary['filled']} batches filled by replay, {summary['lost']} lost), {summary['restarts']} restarts"
    ]
    for name, m in summary["media"].items():
        lines.append(f"{name:<8} {m['blocks']:>8,} blocks {m['tokens']:>10,} tokens resident; "
                     f"{m['stored']:,} stored, {m['removed']:,} removed")
    shown = summary["prefixes"][:10]
    if shown:
        lines.append(f"largest of {summary['prefix_count']:,} resident prefixes:")
        lines.extend(f"  {p['medium']:<8} {p['root']}  {p['blocks']:>6,} blocks {p['tokens']:>8,} tokens" for p in shown)
    lines.extend(f"problem: {p}" for p in summary["problems"][-10:])
    return "\n".join(lines)


class _Metrics:
    """The server's cache counters from ``/metrics`` since the watch began (the user named this URL)."""

    def __init__(self, base_url: str) -> None:
        self.url = base_url.rstrip("/") + "/metrics"
        self.first = self._read()
        self.last = self.first
        self.error: str | None = None

    def _read(self) -> prom.CacheCounters | None:
        try:
            response = httpx.get(self.url, timeout=2.0)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            self.error = f"{self.url}: {exc}"
            return None
        self.error = None
        return prom.CacheCounters.read(prom.parse(response.text))

    def reading(self) -> dict[str, Any]:
        now = self._read()
        if now is not None:
            self.last = now
        if self.first is None or self.last is None:
            return {"error": self.error}
        d = self.last.delta(self.first)
        return {
            "gpu_queries": d.gpu_queries, "gpu_hits": d.gpu_hits,
            "external_queries": d.external_queries, "external_hits": d.external_hits, "error": self.error,
        }

    def line(self) -> str:
        r = self.reading()
        if r.get("gpu_queries") is None:
            return f"metrics: {r.get('error') or 'no prefix cache counters'}"
        q, h = r["gpu_queries"], r["gpu_hits"]
        text = f"GPU prefix hits {h:,.0f}/{q:,.0f} tokens"
        if r.get("external_queries"):
            text += f", external {r['external_hits']:,.0f}/{r['external_queries']:,.0f}"
        return text
