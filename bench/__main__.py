"""``make bench``: run every benchmark module in this package and print its figures as one JSON object."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import time

import bench


def main(argv: list[str]) -> int:
    only = set(argv)
    figures: dict[str, object] = {}
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or (only and info.name not in only):
            continue
        started = time.perf_counter()
        print(f"bench {info.name} ...", file=sys.stderr, flush=True)
        module = importlib.import_module(f"bench.{info.name}")
        figures[info.name] = module.run()
        print(f"bench {info.name} done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
