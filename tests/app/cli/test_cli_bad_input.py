"""Bad input files never give the CLI's user a traceback: exit 2 and one ``Error:`` line naming the file, the line
(where there is one) and the limit; a UTF-8 BOM is dropped, as the page drops it.

Most cases run in process (click's runner, exit codes as a shell sees them); reading /dev/zero and a pipe, the
net below unforeseen errors and ``kvscope live`` stopped early run the real executable.
"""

from __future__ import annotations

import codecs
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from live_servers import KVSCOPE, ROOT, free_port

from app.cli import entry, main
from sim.bounds.textfile import MAX_FILE_BYTES
from sim.calibration import measurements

HEADER = "config,pass,order,seq,doc,prompt_tokens,ttft_ms"
MEASURED = f"{HEADER}\ngpu,1,forward,0,0,100,5.0\ngpu,1,forward,1,1,100,7.0\n"
LIMIT = f"{MAX_FILE_BYTES:,} bytes"  # 268,435,456: 256 MiB, as the message says it
DEEP = "[" * 100_000 + "]" * 100_000  # RecursionError in Python's json without a nesting bound


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result.exit_code, result.output


def error_line(output: str) -> str:
    """The one line a refusal prints: ``Error:`` and what was wrong; no usage above it, never a traceback."""
    assert "Traceback" not in output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), output
    return lines[0]


def refused(*args: str) -> str:
    code, output = run(*args)
    assert code == 2, output
    return error_line(output)


# Every command that reads a JSON file, each given JSON nested 100,000 deep: the bound is 64 levels.
@pytest.mark.parametrize(
    "args, name, line",
    [
        (["analyze", "{f}"], "deep.jsonl", True),
        (["replay", "{f}", "--gpu-blocks", "8"], "deep.jsonl", True),
        (["curve", "{f}"], "deep.jsonl", True),
        (["calibrate", "{f}"], "deep.jsonl", True),
        (["size", "--config", "{f}"], "deep.json", False),
        (["simulate", "--costs", "{f}"], "deep.json", False),
        (["sweep", "--costs", "{f}"], "deep.json", False),
        (["serve", "--costs", "{f}"], "deep.json", False),
        (["watch", "--from", "{f}"], "deep.jsonl", True),
        (["advise", "--p50-ms", "100", "--measurements", "{f}"], "deep.jsonl", True),
    ],
)
def test_deep_json_is_refused_naming_the_file_and_the_nesting_limit(tmp_path: Path, args: list[str], name: str, line: bool) -> None:
    path = tmp_path / name
    path.write_text(DEEP + "\n")
    message = refused(*[a.format(f=path) for a in args])
    assert str(path) in message and "nested deeper than 64 levels" in message
    if line:
        assert "line 1:" in message


def test_binary_and_utf16_files_are_named_as_such(tmp_path: Path) -> None:
    binary = tmp_path / "capture.csv"
    binary.write_bytes(MEASURED.encode() + bytes([0xF0, 0x28, 0x8C, 0x28]) + b"\n")  # not UTF-8, on line 4
    assert refused("analyze", str(binary)) == f"Error: {binary}: line 4: not UTF-8 text (byte 0xf0); is it a binary file?"
    wide = tmp_path / "excel.csv"
    wide.write_bytes(MEASURED.encode("utf-16"))  # Python writes a BOM first, as Excel's "Unicode text" does
    assert refused("analyze", str(wide)) == f"Error: {wide}: is UTF-16 text; save it as UTF-8"


@pytest.mark.parametrize("command", [["replay", "{f}", "--gpu-blocks", "8"], ["curve", "{f}"]])
def test_a_folder_is_refused(tmp_path: Path, command: list[str]) -> None:
    assert refused(*[a.format(f=tmp_path) for a in command]) == f"Error: {tmp_path}: is a folder; give a file"


def test_a_file_or_folder_that_holds_no_measurements_is_named_once(tmp_path: Path) -> None:
    # The command names the file; the reader's message does not name it again ("x.csv: x.csv line 1: ..." before).
    other = tmp_path / "notes.csv"
    other.write_text("name,value\nalpha,1\n")
    assert refused("analyze", str(other)) == (
        f"Error: {other}: line 1: neither a kvscope measurement file (config, pass, order, seq, doc, prompt_tokens, "
        "ttft_ms) nor a long_doc_qa round (prompt_id, request_start, ttft, request_end)"
    )
    assert refused("calibrate", str(tmp_path)) == (
        f"Error: {tmp_path}: a folder is read as a long_doc_qa run and needs warmup_round.csv and query_round.csv"
    )


def test_a_huge_sparse_csv_is_refused_by_its_size_before_it_is_read(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse.csv"
    with open(sparse, "wb") as fh:
        fh.truncate(2**30)  # 1 GiB of holes: takes no disk, reads as NUL bytes
    started = time.monotonic()
    assert refused("analyze", str(sparse)) == f"Error: {sparse}: larger than the limit of {LIMIT} (256 MiB)"
    assert time.monotonic() - started < 5  # refused from its size; reading 1 GiB took 11.6 s before


def test_nul_bytes_and_an_overlong_csv_field_name_their_line(tmp_path: Path) -> None:
    sparse = tmp_path / "holes.csv"
    sparse.write_bytes(MEASURED.encode() + bytes(1_000_000))  # a sparse tail under the size limit
    assert refused("analyze", str(sparse)) == f"Error: {sparse}: line 4: a NUL byte, so not text; is it a binary file?"
    long_field = tmp_path / "long.csv"
    long_field.write_text(f'{HEADER}\ngpu,1,forward,0,0,100,"{"9" * 200_000}"\n')
    # Python's csv module refuses a field over 131,072 characters; the message keeps its limit and names line 2.
    assert refused("analyze", str(long_field)) == f"Error: {long_field}: line 2: field larger than field limit (131072)"


@pytest.mark.parametrize(
    "row, column, limit",
    [
        ("gpu,1,forward,0,0,100,1e308", "ttft_ms", "at least 0.001 and at most 3,600,000 ms"),
        ("gpu,1,forward,0,0,100,-5", "ttft_ms", "at least 0.001 and at most 3,600,000 ms"),
        ("gpu,1,forward,0,0,-100,5.0", "prompt_tokens", "from 0 to 2,147,483,647"),
        (f"gpu,1,forward,0,0,{10**300},5.0", "prompt_tokens", "from 0 to 2,147,483,647"),
    ],
)
def test_calibrate_refuses_out_of_range_numbers_naming_column_line_and_limit(tmp_path: Path, row: str, column: str, limit: str) -> None:
    path = tmp_path / "run.csv"
    path.write_text(f"{HEADER}\ngpu,1,forward,0,0,100,5.0\n{row}\n")
    message = refused("calibrate", str(path))
    assert message.startswith(f"Error: {path}: line 3: column {column}: ") and limit in message
    assert not (tmp_path / "run.costs.json").exists()


@pytest.mark.parametrize("value", ["1e308", "-5"])
def test_calibrate_refuses_a_table_cell_out_of_range(tmp_path: Path, value: str) -> None:
    path = tmp_path / "table.csv"
    path.write_text(f"config,pass,order,p50_ms,mean_ms\ngpu,1,forward,{value},100\n")
    message = refused("calibrate", str(path))
    assert message.startswith(f"Error: {path}: line 2: p50_ms must be from 0 to 3,600,000 ms")


def test_calibrate_refuses_a_table_with_no_cells(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    path.write_text("config,pass,order,p50_ms,mean_ms\n")
    assert "the table has no cells" in refused("calibrate", str(path))


@pytest.mark.parametrize("layers, shown", [("1e308", "got 1e+308"), ("-28", "got -28")])
def test_size_refuses_a_config_out_of_range(tmp_path: Path, layers: str, shown: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(f'{{"num_hidden_layers": {layers}, "num_attention_heads": 8, "hidden_size": 1024}}')
    message = refused("size", "--config", str(config))
    assert "config.json: num_hidden_layers must be from 1 to 1,000" in message
    assert message.rstrip().endswith(shown)  # as the file has it, not int(1e308)'s 309 digits


def test_size_refuses_a_negative_sliding_window(tmp_path: Path) -> None:
    # Every layer slides (no layer_types or pattern), so the window sizes the KV: -4096 tokens is no window at all.
    config = tmp_path / "config.json"
    config.write_text('{"num_hidden_layers": 28, "num_attention_heads": 8, "hidden_size": 1024, "sliding_window": -4096}')
    assert "config.json: sliding_window must be from 1 to 1,073,741,824, got -4,096" in refused("size", "--config", str(config))


def test_size_names_a_config_field_that_is_not_a_number(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"num_hidden_layers": 28, "num_attention_heads": 8, "num_key_value_heads": [2], "hidden_size": 1024}')
    assert "config.json: num_key_value_heads must be a whole number, got [2]" in refused("size", "--config", str(config))


# A count that is not a whole JSON number is named with what the file holds: 28.5 layers were read as 28, and a
# text_config that is not an object raised TypeError (the one-line net, exit 1, no file named).
@pytest.mark.parametrize(
    "fields, expected",
    [
        ('"num_hidden_layers": 28.5', "num_hidden_layers must be a whole number, got 28.5"),
        ('"num_hidden_layers": 28, "num_key_value_heads": "x"', "num_key_value_heads must be a whole number, got 'x'"),
        ('"num_hidden_layers": 28, "sliding_window": [4096]', "sliding_window must be a whole number, got [4096]"),
        ('"text_config": 5', "text_config must be a JSON object"),
    ],
)
def test_size_refuses_a_config_count_that_is_not_a_whole_number(tmp_path: Path, fields: str, expected: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(f'{{"num_attention_heads": 8, "hidden_size": 1024, {fields}}}')
    assert refused("size", "--config", str(config)).endswith(f"config.json: {expected}")


def test_a_utf8_bom_is_dropped_as_the_page_drops_it(tmp_path: Path) -> None:
    # Excel's "CSV UTF-8" starts with EF BB BF; without the BOM the header's first column would be "\ufeffconfig".
    plain, bom = tmp_path / "plain.csv", tmp_path / "bom.csv"
    plain.write_text(MEASURED)
    bom.write_bytes(codecs.BOM_UTF8 + MEASURED.encode())
    assert run("analyze", str(bom), "--json") == run("analyze", str(plain), "--json")
    assert run("analyze", str(bom), "--json")[0] == 0
    # JSONL measurements, a trace and a cost profile too.
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes(codecs.BOM_UTF8 + b'{"config":"gpu","pass":1,"order":"forward","seq":0,"doc":0,"prompt_tokens":9,"ttft_ms":3}\n')
    assert run("analyze", str(jsonl))[0] == 0
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(codecs.BOM_UTF8 + b'{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n')
    code, output = run("replay", str(trace), "--gpu-blocks", "4")
    assert code == 0 and "1 requests" in output
    costs = tmp_path / "costs.json"
    profile = {"overhead_ms": 10, "prefill_ms_per_token": 0.1, "load_cpu_ms_per_token": 0.001, "load_disk_ms_per_token": 0.005, "store_ms_per_token": 0.001}
    costs.write_bytes(codecs.BOM_UTF8 + json.dumps(profile).encode())
    assert run("simulate", "--costs", str(costs), "--json")[0] == 0


def kvscope(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KVSCOPE, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, **kwargs)  # type: ignore[call-overload]


@pytest.mark.parametrize("command", [["analyze", "/dev/zero"], ["replay", "/dev/zero", "--gpu-blocks", "8"]])
def test_dev_zero_stops_at_the_byte_limit(command: list[str]) -> None:
    # /dev/zero reports size 0 and never ends: only counting the bytes read stops it.
    done = kvscope(command)
    assert done.returncode == 2
    assert error_line(done.stderr) == f"Error: /dev/zero: larger than the limit of {LIMIT} (256 MiB)"


def test_a_pipe_stops_at_the_byte_limit() -> None:
    producer = subprocess.Popen(["yes", "gpu,1,forward,0,0,100,5.0"], stdout=subprocess.PIPE)
    try:
        done = kvscope(["analyze", "/dev/stdin"], stdin=producer.stdout)
    finally:
        producer.kill()
        producer.wait()
    assert done.returncode == 2
    assert error_line(done.stderr) == f"Error: /dev/stdin: larger than the limit of {LIMIT} (256 MiB)"


def test_an_unforeseen_error_is_one_line_with_exit_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*_: object, **__: object) -> None:
        raise KeyError("doc_tokens")

    monkeypatch.setattr(main.commands["policies"], "callback", broken)
    monkeypatch.setattr(sys, "argv", ["kvscope", "policies"])
    monkeypatch.delenv(entry.TRACEBACK_VAR, raising=False)
    with pytest.raises(SystemExit) as exit_:
        entry.run()
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err == "Error: KeyError: 'doc_tokens' (KVSCOPE_TRACEBACK=1 shows where; please report it)\n"
    # For a bug report, the variable lets the traceback through.
    monkeypatch.setenv(entry.TRACEBACK_VAR, "1")
    with pytest.raises(KeyError):
        entry.run()


# SIGKILL leaves what was written; SIGINT (Ctrl-C) goes through live's own ending, which keeps what was measured.
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_live_stopped_before_its_first_record_does_not_block_a_rerun(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "run.csv"
    # A "server" that accepts connections and never answers: live waits for its first answer until killed.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        proc = subprocess.Popen([*KVSCOPE, "live", "--target", f"gpu={url}", "--out", str(out)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not (out.exists() and out.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # live is now waiting for the silent server's first answer
        os.kill(proc.pid, sig)
        proc.wait(timeout=10)
    assert proc.returncode == (-9 if sig == signal.SIGKILL else 130)  # 130: 128 + SIGINT, as a shell reports Ctrl-C
    # What a killed run leaves holds no measurement: the header alone.
    assert out.read_text().strip() == measurements.CSV_HEADER
    # A re-run is not refused for it (exit 2 would be "--out exists"); it fails only because the target is down.
    again = kvscope(["live", "--target", f"gpu=http://127.0.0.1:{free_port()}", "--out", str(out)])
    assert again.returncode == 1, again.stderr
    assert "cannot connect" in again.stderr
    # So is a 0-byte file (a JSONL run has no header to write).
    empty = tmp_path / "run.jsonl"
    empty.touch()
    assert kvscope(["live", "--target", f"gpu=http://127.0.0.1:{free_port()}", "--out", str(empty)]).returncode == 1


# -- the CLI's budget ----------------------------------------------------------------------------------------

# Each command that estimates its cost before it works, lowered to 1,000 block steps by KVSCOPE_CLI_BUDGET (the
# defaults let every scenario the flags accept run): what exceeds it is named, the flag or the file, with the limit.
@pytest.mark.parametrize(
    "args, named",
    [
        (["replay", "mooncake-synthetic", "--gpu-blocks", "100"], "mooncake-synthetic"),
        (["curve", "mooncake-synthetic"], "mooncake-synthetic"),
        (["curve", "--docs", "20"], "--docs"),
        (["sweep", "--docs", "20"], "--docs"),
        (["calibrate", "{f}", "--docs", "20"], "--docs"),
        (["simulate", "--docs", "20"], "--docs"),
        (["advise", "--p50-ms", "100", "--workers", "1"], "--points"),
        (["explain", "--docs", "20"], "--docs"),
        (["explain", "--trace", "mooncake-synthetic", "--gpu-blocks", "100"], "mooncake-synthetic"),
    ],
)
def test_work_over_the_cli_budget_exits_2_naming_the_input_and_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], named: str
) -> None:
    measured = tmp_path / "measured.csv"
    measured.write_text(MEASURED)
    monkeypatch.setenv("KVSCOPE_CLI_BUDGET", "work=1000")
    line = refused(*(a.replace("{f}", str(measured)) for a in args))
    assert line.startswith(f"Error: {named}: estimated work is ")
    assert "the limit here is 1,000 block steps" in line and "KVSCOPE_CLI_BUDGET" in line
    assert not (tmp_path / "measured.costs.json").exists()  # calibrate wrote nothing


def test_a_bad_cli_budget_setting_is_named() -> None:
    code, output = run_with_env({"KVSCOPE_CLI_BUDGET": "work=lots"}, "simulate")
    assert code == 2
    assert error_line(output) == "Error: KVSCOPE_CLI_BUDGET: work: 'lots' is not a number (sizes may end in KiB, MiB or GiB)"


def run_with_env(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result.exit_code, result.output
