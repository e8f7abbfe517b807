"""Vendor third-party JavaScript from pinned npm tarballs, verified by checksum: the page's into static/vendor/, the tests' into tests/vendor/.

    python scripts/vendor_assets.py          # download, verify the tarball's sha512, extract, write CHECKSUMS
    python scripts/vendor_assets.py --check  # offline: the committed files still match CHECKSUMS

The tarball's integrity is the one the npm registry publishes for that exact
version (``npm view htmx.org@4.0.1 dist.integrity``); a tarball that does not
match is refused before anything is written. plotly.js is the partial bundle
with only the trace types the page draws (scatter and bar: plotly.js-basic-dist-min),
written beside a gzip copy that the server sends as it is (app/web/assets.py).
Swagger UI (``/docs``) is vendored too, so that the API docs need no network.
axe-core goes to tests/vendor/ (the accessibility test injects it); it never ships in the wheel.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR_DIR = ROOT / "static" / "vendor"
TESTS_VENDOR_DIR = ROOT / "tests" / "vendor"
# Files also written gzipped (name + ".gz"), at the highest level and with no timestamp, so the bytes repeat.
PRECOMPRESSED = {"plotly-basic.min.js"}
REGISTRY = "https://registry.npmjs.org"


@dataclass(frozen=True)
class Package:
    """One npm package at a pinned version: its published integrity and the files taken from it."""

    name: str
    version: str
    integrity: str  # "sha512-<base64>", as the registry publishes it
    files: dict[str, str]  # path inside the tarball (below package/) -> path below `into`
    into: Path = VENDOR_DIR

    @property
    def tarball_url(self) -> str:
        return f"{REGISTRY}/{self.name}/-/{self.name.split('/')[-1]}-{self.version}.tgz"


PACKAGES = [
    Package(
        name="htmx.org",
        version="4.0.1",
        integrity="sha512-oF7JgXhDW9UXCy/k1ZYFUQgzu/rm19ORWPSPNL91vPluB2PB9+MV55tyQdH/w7o2EAbTYUG5SDW1R60mdkdqGg==",
        files={
            "dist/htmx.min.js": "htmx.min.js",
            # htmx 4's own SSE extension (registers as "sse"); htmx-ext-sse on npm is for htmx 2.
            "dist/ext/hx-sse.min.js": "hx-sse.min.js",
            "LICENSE": "htmx.LICENSE",
        },
    ),
    Package(
        name="plotly.js-basic-dist-min",
        version="4.1.1",
        integrity="sha512-1oNF8PeQx2hv/y7tqEVWKD3JGwn/MGEMQ8mL9HUwsaqG9FGy/OU5FHUHvzqbqxN4mnwZGI9abTiE775C4kkjMQ==",
        files={
            # scatter, bar and pie: the page's charts use scatter and bar only (static/js/*.js).
            "plotly-basic.min.js": "plotly-basic.min.js",
            "LICENSE": "plotly.LICENSE",
        },
    ),
    Package(
        name="axe-core",
        version="4.14.1",
        integrity="sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ==",
        files={"axe.min.js": "axe.min.js", "LICENSE": "axe-core.LICENSE"},  # MPL-2.0
        into=TESTS_VENDOR_DIR,
    ),
    Package(
        name="swagger-ui-dist",
        version="5.35.0",
        integrity="sha512-U06rpMtW9V3XPGOBeamTUSr0Z09jMX4IJuANpE/EZbAhw0G8CgwrzU4YmXkn/h0wCDNsXdGarTNNHC3sU8yVUQ==",
        files={
            # The bundle includes the standalone preset that FastAPI's get_swagger_ui_html asks for.
            "swagger-ui-bundle.js": "swagger-ui/swagger-ui-bundle.js",
            "swagger-ui.css": "swagger-ui/swagger-ui.css",
            "favicon-32x32.png": "swagger-ui/favicon-32x32.png",
            "LICENSE": "swagger-ui/LICENSE",
            # Apache-2.0 asks for NOTICE to travel with the work; the bundle's first line points to the licences
            # of the libraries inside it.
            "NOTICE": "swagger-ui/NOTICE",
            "swagger-ui-bundle.js.LICENSE.txt": "swagger-ui/swagger-ui-bundle.js.LICENSE.txt",
        },
    ),
]


def integrity_of(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch(package: Package) -> bytes:
    with urllib.request.urlopen(package.tarball_url, timeout=60) as response:
        data = response.read()
    got = integrity_of(data)
    if got != package.integrity:
        raise SystemExit(f"{package.name}@{package.version}: tarball integrity {got} != pinned {package.integrity}")
    return data


def extract(package: Package, tarball: bytes) -> dict[str, bytes]:
    """The pinned files of the tarball, by their name in static/vendor/."""
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        for inner, name in package.files.items():
            member = tar.extractfile(f"package/{inner}")
            if member is None:
                raise SystemExit(f"{package.name}@{package.version}: no file package/{inner} in the tarball")
            out[name] = member.read()
    return out


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def with_compressed(files: dict[str, bytes]) -> dict[str, bytes]:
    """The files, plus a .gz copy of each one listed in PRECOMPRESSED."""
    return {**files, **{f"{name}.gz": gzipped(data) for name, data in files.items() if name in PRECOMPRESSED}}


def expected_names(into: Path) -> set[str]:
    names = {name for p in PACKAGES if p.into == into for name in p.files.values()}
    return names | {f"{name}.gz" for name in names if name in PRECOMPRESSED}


def vendor() -> None:
    lines: dict[Path, list[str]] = {}
    for package in PACKAGES:
        package.into.mkdir(parents=True, exist_ok=True)
        for name, data in with_compressed(extract(package, fetch(package))).items():
            (package.into / name).parent.mkdir(parents=True, exist_ok=True)
            (package.into / name).write_bytes(data)
            lines.setdefault(package.into, []).append(f"{sha256_of(data)}  {name}  {package.name}@{package.version}")
            print(f"{package.into.relative_to(ROOT)}/{name}: {len(data):,} bytes from {package.name}@{package.version}")
    for into, listed in lines.items():
        (into / "CHECKSUMS").write_text("\n".join(listed) + "\n")


def read_checksums(into: Path = VENDOR_DIR) -> dict[str, str]:
    """File name -> sha256, from the folder's CHECKSUMS."""
    pinned = {}
    for line in (into / "CHECKSUMS").read_text().splitlines():
        digest, name, *_ = line.split()
        pinned[name] = digest
    return pinned


def check() -> list[str]:
    """Problems with the committed vendored files (an empty list when all match)."""
    problems = []
    for into in sorted({p.into for p in PACKAGES}):
        expected = expected_names(into)
        pinned = read_checksums(into)
        if set(pinned) != expected:
            problems.append(f"{into.relative_to(ROOT)}/CHECKSUMS lists {sorted(pinned)}, the pins give {sorted(expected)}")
        for name, digest in pinned.items():
            path = into / name
            if not path.is_file():
                problems.append(f"{name}: missing")
            elif sha256_of(path.read_bytes()) != digest:
                problems.append(f"{name}: sha256 differs from CHECKSUMS")
        for name in sorted(n for n in pinned if n.endswith(".gz") and (into / n).is_file() and (into / n[:-3]).is_file()):
            if gzip.decompress((into / name).read_bytes()) != (into / name[:-3]).read_bytes():
                problems.append(f"{name}: does not unpack to {name[:-3]}")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the committed files against CHECKSUMS, offline")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    vendor()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
