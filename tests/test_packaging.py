"""The wheel and the sdist give a working dashboard from a clean install, and the Dockerfile's steps work.

Offline throughout: both are built with this venv's setuptools (no build isolation), installed with ``--no-deps``
into fresh venvs that borrow this venv's dependencies through a ``.pth`` file (a ``.pth`` line adds a folder to
``sys.path`` but runs no ``.pth`` file inside it, so the editable kvscope of this venv stays out), and served from
a folder without the source tree. No container runtime here: the Dockerfile's two stages are replayed step by step.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from live_servers import ROOT, free_port, stop, wait_until_up

pytestmark = pytest.mark.slow

# Never copied into a build: the local environment, caches and build output.
NOT_SOURCE = {".git", ".venv", "build", "dist", "test-artifacts", ".pytest_cache", ".hypothesis", "__pycache__"}
DOCKERFILE = (ROOT / "Dockerfile").read_text()
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "--quiet"]
# Into a fresh venv: no dependencies (the .pth lends them), and never "already satisfied" by the editable kvscope
# the .pth makes visible too.
FRESH_INSTALL = ["--no-deps", "--ignore-installed"]


def checkout_files() -> list[Path]:
    """The source tree's files, relative to ROOT."""
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in NOT_SOURCE and not d.endswith(".egg-info")]
        out += [(Path(dirpath) / f).relative_to(ROOT) for f in filenames if f not in NOT_SOURCE and not f.endswith((".pyc", ".pyo"))]
    return out


def copy_tree(files: list[Path], dest: Path) -> Path:
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    return dest


def dockerignored(rel: Path, patterns: list[str]) -> bool:
    """Docker's rule for the patterns .dockerignore uses: a pattern matches the path or one of its parent folders."""
    parts = rel.parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        tail = pattern.removeprefix("**/")
        if any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p.split("/")[-1], tail) for p in prefixes):
            return True
    return False


def stages() -> list[list[str]]:
    """The Dockerfile's instructions per stage, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    out: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            out.append([])
        out[-1].append(line)
    return out


def exec_form(instruction: str) -> list[str]:
    """The JSON array of a CMD (also a HEALTHCHECK's CMD)."""
    return json.loads(instruction[instruction.index("CMD ") + 4 :])


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist, built from a copy of the source tree, and the wheel, built as the Dockerfile's first stage does."""
    work = tmp_path_factory.mktemp("pkg")
    src = copy_tree(checkout_files(), work / "src")
    out = work / "dist"
    # `python -m build --sdist`, without the network: call the PEP 517 hook of this venv's setuptools.
    subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(out)!r})"],
        cwd=src, check=True, capture_output=True,
    )
    # Stage 1's build context is the checkout less .dockerignore; its last RUN builds the wheel from it.
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines() if p.strip() and not p.startswith("#")]
    context = copy_tree([f for f in checkout_files() if not dockerignored(f, patterns)], work / "context")
    (build_step,) = [i for i in stages()[0] if i.startswith("RUN pip wheel --no-deps")]
    args = shlex.split(build_step.removeprefix("RUN "))
    args = [str(out) if a == "/dist" else a for a in args]
    subprocess.run([*PIP, *args[1:], "--no-build-isolation", "--no-index"], cwd=context, check=True, capture_output=True)
    (sdist,) = out.glob("kvscope-*.tar.gz")
    (wheel,) = out.glob("kvscope-*.whl")
    return {"sdist": sdist, "wheel": wheel, "dir": out}


def fresh_venv(path: Path) -> Path:
    """A venv with no pip and no kvscope that sees this venv's dependencies; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True, capture_output=True, text=True
    ).stdout.strip()
    (Path(purelib) / "kvscope-test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "PYTHONUNBUFFERED": "1"}


@contextmanager
def run_cmd(cmd: list[str], venv: Path, cwd: Path) -> Iterator[str]:
    """The image's CMD on a free loopback port instead of 0.0.0.0:8000; yields the base URL."""
    port = free_port()
    cmd = [{"0.0.0.0": "127.0.0.1", "8000": str(port)}.get(a, a) for a in cmd]
    proc = subprocess.Popen(cmd, cwd=cwd, env=clean_env(venv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, proc, timeout_s=30, path="/healthz")
        yield url
    finally:
        stop(proc)


def assert_dashboard(url: str, venv: Path) -> None:
    """The page, the vendored scripts (plotly's partial bundle too) and the API docs, byte for byte what the checkout holds."""
    page = httpx.get(url + "/", timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    scripts = re.findall(r'src="(/[^"?]+)', page.text)
    plotly_src = [s for s in scripts if re.fullmatch(r"/assets/plotly-basic\.[0-9a-f]{12}\.min\.js", s)]
    assert "/static/vendor/htmx.min.js" in scripts and len(plotly_src) == 1
    for path in scripts:
        assert httpx.get(url + path, timeout=10).status_code == 200, path
    htmx = httpx.get(url + "/static/vendor/htmx.min.js", timeout=10)
    assert htmx.content == (ROOT / "static" / "vendor" / "htmx.min.js").read_bytes()
    plotly = httpx.get(url + plotly_src[0], headers={"Accept-Encoding": "identity"}, timeout=10)
    assert plotly.content == (ROOT / "static" / "vendor" / "plotly-basic.min.js").read_bytes()
    docs = httpx.get(url + "/docs", timeout=10)
    assert docs.status_code == 200 and "/static/vendor/swagger-ui/swagger-ui-bundle.js" in docs.text
    bundle = httpx.get(url + "/static/vendor/swagger-ui/swagger-ui-bundle.js", timeout=10)
    assert bundle.content == (ROOT / "static" / "vendor" / "swagger-ui" / "swagger-ui-bundle.js").read_bytes()
    # The server ran from the fresh venv, not from this checkout.
    version = subprocess.run(["kvscope", "--version"], env=clean_env(venv), capture_output=True, text=True, check=True)
    assert str(venv.resolve()) in version.stdout and str(ROOT) not in version.stdout


def test_the_wheel_holds_every_module_template_and_static_file(dist: dict[str, Path]) -> None:
    # Expected: every .py of app/ and sim/ at its own path, sim's data files, and templates/ and static/ (every
    # vendored file, licence and CHECKSUMS included) below app/web/, as pyproject.toml maps them.
    expected = set()
    for rel in checkout_files():
        top = rel.parts[0]
        if top in ("app", "sim") and (rel.suffix == ".py" or rel.parts[:2] == ("sim", "data")):
            expected.add(rel.as_posix())
        elif top in ("templates", "static"):
            expected.add(("app/web" / rel).as_posix())
    with zipfile.ZipFile(dist["wheel"]) as whl:
        names = {n for n in whl.namelist() if ".dist-info/" not in n}
    assert names == expected
    assert "app/web/static/vendor/CHECKSUMS" in names and "app/web/static/vendor/swagger-ui/LICENSE" in names


def test_the_sdist_holds_the_tests_their_data_and_the_readmes_assets(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    # Everything the tests read: the tests, the bench helpers and vendoring script they import or run, the data
    # packages, the page's files; and whatever README.md links to by a relative path.
    wanted = {
        rel.as_posix() for rel in checkout_files()
        if rel.parts[0] in ("tests", "bench", "scripts", "sim", "app", "templates", "static")
    }
    readme = (ROOT / "README.md").read_text()
    links = {m for m in re.findall(r"\]\(([^)#\s]+)", readme) if "://" not in m and not m.startswith("mailto:")}
    wanted |= {link for link in links if (ROOT / link).is_file()}
    wanted |= {"README.md", "pyproject.toml", "setup.py", "Makefile", "Dockerfile", ".dockerignore", "MANIFEST.in"}
    assert wanted - names == set()


def test_the_wheel_serves_the_dashboard_as_the_docker_image_would(dist: dict[str, Path], tmp_path: Path) -> None:
    """Stage 2 of the Dockerfile, replayed: its pip install (offline, --no-deps), its CMD and its HEALTHCHECK."""
    runtime = stages()[-1]
    assert not [i for i in runtime if i.startswith(("COPY", "ADD"))], "the runtime image must not copy the source tree"
    venv = tmp_path / "venv"
    python = fresh_venv(venv)
    (install,) = [i for i in runtime if "pip install" in i]
    args = shlex.split(install[install.index("pip install") :])
    args = [str(dist["dir"]) if a == "/dist" else a for a in args]
    subprocess.run([*PIP, "--python", str(python), *args[1:], *FRESH_INSTALL], check=True, capture_output=True)
    workdir = tmp_path / "home"  # the image's WORKDIR: no source tree in it
    workdir.mkdir()
    (cmd,) = [exec_form(i) for i in runtime if i.startswith("CMD ")]
    (health,) = [exec_form(i) for i in runtime if i.startswith("HEALTHCHECK ")]
    with run_cmd(cmd, venv, workdir) as url:
        assert_dashboard(url, venv)
        port = url.rsplit(":", 1)[1]
        check = subprocess.run(
            [a.replace(":8000/", f":{port}/") for a in health], cwd=workdir, env=clean_env(venv), timeout=10
        )
        assert check.returncode == 0


def test_the_sdist_installs_and_serves_the_dashboard(dist: dict[str, Path], tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = fresh_venv(venv)
    subprocess.run(
        [*PIP, "--python", str(python), "install", "--no-index", "--no-build-isolation", *FRESH_INSTALL, str(dist["sdist"])],
        check=True, capture_output=True,
    )
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    with run_cmd(["kvscope", "serve", "--host", "127.0.0.1", "--port", "8000"], venv, workdir) as url:
        assert_dashboard(url, venv)


def test_version_comes_from_pyproject_and_names_the_installation() -> None:
    import tomllib

    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    out = subprocess.run([str(Path(sys.executable).with_name("kvscope")), "--version"], capture_output=True, text=True, check=True)
    # This venv's kvscope is the editable install of this checkout, so it runs from ROOT/app.
    assert out.stdout.strip() == f"kvscope {pinned} from {ROOT / 'app'} (python {sys.version_info.major}.{sys.version_info.minor})"
