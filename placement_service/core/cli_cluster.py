"""Sub-commands of this package (placeholder until implemented)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    del subparsers


def _unused(args: argparse.Namespace) -> int:  # pragma: no cover
    return 0
