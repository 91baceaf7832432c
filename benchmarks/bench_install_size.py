"""Installed size of each install profile (base, service, capacity, sim, all).

Usage (from the repository root):

    .venv/bin/python benchmarks/bench_install_size.py [--profiles base service capacity sim all]

Builds the project's wheel once, then for each profile makes a fresh venv, installs the wheel with
that extra from the package index (pip's cache makes repeats fast) and reports the size of the
venv's site-packages less what a bare venv already holds (pip, setuptools), the number of
distributions installed, and the install's wall time. The base profile is what every node gets.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ("base", "service", "capacity", "sim", "all")


def tree_bytes(path: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(base) / name).lstat().st_size
            except OSError:
                pass
    return total


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", nargs="+", choices=PROFILES, default=list(PROFILES))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="harvest-install-") as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(work / "dist"), str(ROOT)], check=True)
        wheel = next((work / "dist").glob("harvest-*.whl"))
        print(f"wheel: {wheel.name}, {wheel.stat().st_size / 1e6:.2f} MB; load {os.getloadavg()[0]:.1f}",
              file=sys.stderr)
        print("| profile | installed (MB) | distributions | install wall (s) |")
        print("|---|---|---|---|")
        for profile in args.profiles:
            venv = work / f"venv-{profile}"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            bare = tree_bytes(site_packages(venv))
            before = {p.name for p in site_packages(venv).glob("*.dist-info")}
            spec = str(wheel) if profile == "base" else f"harvest[{profile}] @ {wheel.as_uri()}"
            start = time.monotonic()
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", spec], check=True)
            wall = time.monotonic() - start
            size = tree_bytes(site_packages(venv)) - bare
            dists = {p.name for p in site_packages(venv).glob("*.dist-info")} - before
            print(f"| {profile} | {size / 1e6:.0f} | {len(dists)} | {wall:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
