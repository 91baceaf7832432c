#!/usr/bin/python3 -IS
"""YARN NodeManager node-label script: print this node's partition from the agent's label file.

Contract (``yarn.nodemanager.node-labels.provider=script``, the NodeManager runs
``yarn.nodemanager.node-labels.provider.script.path`` every
``yarn.nodemanager.node-labels.provider.fetch-interval-ms``):

* the NodeManager reads the script's stdout and uses the last line that starts with
  ``NODE_PARTITION:``; this script prints exactly one such line, ``NODE_PARTITION:<label>``;
* when the agent's label file (``<state-dir>/node-label``, one line, refreshed by the agent at least
  every 60 s) is missing, empty, malformed or older than ``--max-age-s`` (default 600 s), the script
  prints nothing on stdout, a reason on stderr, and exits with status 1 (``EXIT_KEEP``), so the
  NodeManager keeps the label it has: a stale agent must not move the node between partitions.

Why a non-zero exit and not just an empty output: the NodeManager's script runner stores whatever
it parsed after a *successful* run, and a run without a ``NODE_PARTITION:`` line yields "no labels",
which the NodeManager reports to the ResourceManager as the empty set (the DEFAULT partition). Only
a failed run (non-zero exit, or a timeout) leaves the previously fetched label in place.

Standard library only (os, sys, time), run as ``python3 -I -S`` (isolated, no site packages), so
it starts in about the time of a bare interpreter. ``harvest install-scripts`` rewrites the
``#!`` line for another interpreter path (``--python``). Arguments may also
come from the environment (the NodeManager passes ``...provider.script.opts`` as arguments):
``HARVEST_STATE_DIR`` and ``HARVEST_LABEL_MAX_AGE_S``.
"""

from __future__ import annotations

import os
import sys
import time

DEFAULT_STATE_DIR = "/var/lib/harvest-agent"
DEFAULT_MAX_AGE_S = 600.0
EXIT_KEEP = 1  # non-zero: the NodeManager ignores this run and keeps the node's current label
LABEL_FILE = "node-label"
# A class id is also a YARN label: lower-case letters, digits and '-' (YARN also allows '_').
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


def valid_label(label: str) -> bool:
    return 0 < len(label) <= 255 and label[0].isalnum() and set(label) <= _LABEL_CHARS


def _parse_args(argv: list[str]) -> tuple[str, float]:
    state_dir = os.environ.get("HARVEST_STATE_DIR", DEFAULT_STATE_DIR)
    max_age_s = os.environ.get("HARVEST_LABEL_MAX_AGE_S", str(DEFAULT_MAX_AGE_S))
    # The NodeManager passes ...provider.script.opts split at commas (Configuration.getStrings), so
    # "--state-dir=/x,--max-age-s=600" arrives as two arguments; a value written with spaces
    # ("--state-dir /x --max-age-s 600") arrives as one and is split here.
    args = [part for arg in argv for part in arg.split()]
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            sys.stdout.write(
                "usage: node_label.py [--state-dir DIR] [--max-age-s SECONDS]\n"
                "Prints NODE_PARTITION:<label> from DIR/node-label, nothing when missing or stale.\n"
            )
            sys.exit(0)
        if "=" in arg and arg.startswith("--"):
            arg, value = arg.split("=", 1)
        elif arg in ("--state-dir", "--max-age-s") and args:
            value = args.pop(0)
        else:
            sys.stderr.write(f"node_label.py: unknown or incomplete argument {arg!r}\n")
            sys.exit(2)
        if arg == "--state-dir":
            state_dir = value
        elif arg == "--max-age-s":
            max_age_s = value
        else:
            sys.stderr.write(f"node_label.py: unknown argument {arg!r}\n")
            sys.exit(2)
    try:
        max_age = float(max_age_s)
    except ValueError:
        sys.stderr.write(f"node_label.py: --max-age-s must be a number, got {max_age_s!r}\n")
        sys.exit(2)
    return state_dir, max_age


def read_label(state_dir: str, max_age_s: float, now_s: float) -> tuple[str | None, str | None]:
    """Return (label, None) when the label file is fresh and valid, else (None, reason)."""
    path = os.path.join(state_dir, LABEL_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            mtime_s = os.fstat(handle.fileno()).st_mtime
            text = handle.read(512)
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"
    age_s = now_s - mtime_s
    if age_s > max_age_s:
        return None, f"{path} is stale: {age_s:.0f} s old > max age {max_age_s:.0f} s"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        return None, f"{path}: expected one line with the label, found {len(lines)}"
    label = lines[0]
    if not valid_label(label):
        return None, f"{path}: {label!r} is not a valid YARN label"
    return label, None


def main(argv: list[str]) -> int:
    state_dir, max_age_s = _parse_args(argv)
    label, reason = read_label(state_dir, max_age_s, time.time())
    if label is None:
        sys.stderr.write(f"node_label.py: keeping the current label: {reason}\n")
        return EXIT_KEEP
    sys.stdout.write(f"NODE_PARTITION:{label}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
