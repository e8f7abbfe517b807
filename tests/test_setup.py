"""``make test`` sets up what the tests need, Chromium included; ``.ci/run`` is ``make test`` and fails when it does.

The real apt-get and make are replaced by stand-ins early on PATH that log how they were called, so the
install path is tested without touching the machine.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from live_servers import ROOT


def stand_in(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def make(target: str, *variables: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = f"{path}{os.pathsep}{env['PATH']}"
    return subprocess.run(["make", "-s", "-C", str(ROOT), target, *variables], capture_output=True, text=True, env=env, timeout=60)


def test_without_chromium_and_not_root_make_test_stops_saying_what_to_install(tmp_path: Path) -> None:
    chromium = tmp_path / "chromium"
    done = make("test", f"CHROMIUM={chromium}", "USER_ID=1000")
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if not line.startswith(("make:", "make["))]
    assert ours == [f"make test needs Chromium at {chromium}: install Debian's chromium package (sudo apt-get install chromium), then re-run"]
    # It stopped before anything else: the browser is checked before the venv and pytest.
    order = subprocess.run(["make", "-n", "-C", str(ROOT), "test", f"CHROMIUM={chromium}", "USER_ID=1000"], capture_output=True, text=True)
    lines = order.stdout.splitlines()
    first = {word: next(i for i, line in enumerate(lines) if word in line) for word in ("apt-get install", "-m pytest")}
    assert first["apt-get install"] < first["-m pytest"]
    assert all(first["apt-get install"] < i for i, line in enumerate(lines) if "pip install" in line)


def test_as_root_make_installs_debians_chromium_with_apt_get(tmp_path: Path) -> None:
    chromium = tmp_path / "chromium"
    log = tmp_path / "apt.log"
    # The stand-in logs its arguments and DEBIAN_FRONTEND, and "installs" chromium where the Makefile expects it.
    stand_in(tmp_path / "bin", "apt-get", f'echo "$DEBIAN_FRONTEND $*" >> {log}\n'
             f'case "$1" in install) printf "#!/bin/sh\\n" > {chromium}; chmod +x {chromium};; esac\n')
    done = make(str(chromium), f"CHROMIUM={chromium}", "USER_ID=0", path=tmp_path / "bin")
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["noninteractive update -qq", "noninteractive install -y -qq chromium"]
    # Present now: a second run does nothing.
    log.unlink()
    assert make(str(chromium), f"CHROMIUM={chromium}", "USER_ID=0", path=tmp_path / "bin").returncode == 0
    assert not log.exists()


def test_as_root_an_apt_get_that_fails_fails_the_set_up(tmp_path: Path) -> None:
    stand_in(tmp_path / "bin", "apt-get", "exit 100\n")
    done = make(str(tmp_path / "chromium"), f"CHROMIUM={tmp_path / 'chromium'}", "USER_ID=0", path=tmp_path / "bin")
    assert done.returncode != 0


def test_ci_run_is_make_test_and_passes_its_exit_status_on(tmp_path: Path) -> None:
    log = tmp_path / "make.log"
    for status in (0, 1, 5):  # pass; tests failed; no tests collected (pytest's codes)
        stand_in(tmp_path / "bin", "make", f'echo "$PWD $*" > {log}\nexit {status}\n')
        env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        done = subprocess.run([str(ROOT / ".ci" / "run")], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        assert done.returncode == status
        assert log.read_text().strip() == f"{ROOT} test"
