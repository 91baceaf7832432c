"""A small, dependency-free reader for the YAML subset our compose file uses.

Block mappings (``key: value`` / ``key:`` + indented block), block sequences (``- item``), flow
sequences of scalars (``["a", "b"]``), ``{}``, single- or double-quoted and plain scalars (plain
integers become ints), ``#`` comments. Anything else (anchors, multi-line strings, tabs) raises
ValueError naming the line, so the file stays inside what this checker can vouch for.
"""

from __future__ import annotations

import json
import re
from typing import Any

_KEY_RE = re.compile(r"^([A-Za-z0-9_.-]+):(?:\s+(.*))?$")


def _strip_comment(line: str) -> str:
    out, quote = [], ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] == " "):
            break
        out.append(ch)
    return "".join(out).rstrip()


def _scalar(text: str, lineno: int) -> Any:
    text = text.strip()
    if text == "{}":
        return {}
    if text.startswith("["):
        if not text.endswith("]"):
            raise ValueError(f"line {lineno}: unterminated flow sequence")
        inner = text[1:-1].strip()
        if not inner:
            return []
        items = re.findall(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'|[^,\s][^,]*', inner)
        return [_scalar(i, lineno) for i in items]
    if text.startswith('"'):
        if not text.endswith('"') or len(text) < 2:
            raise ValueError(f"line {lineno}: unterminated string")
        return json.loads(text)
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2:
            raise ValueError(f"line {lineno}: unterminated string")
        return text[1:-1].replace("''", "'")
    if any(text.startswith(c) for c in "&*!|>{"):
        raise ValueError(f"line {lineno}: unsupported YAML construct {text[:10]!r}")
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def load(text: str) -> Any:
    lines: list[tuple[int, int, str]] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise ValueError(f"line {n}: tab in indentation")
        body = _strip_comment(raw)
        if body.strip():
            lines.append((n, len(body) - len(body.lstrip()), body.strip()))
    value, pos = _block(lines, 0, 0)
    if pos != len(lines):
        raise ValueError(f"line {lines[pos][0]}: unexpected indentation")
    return value


def _block(lines: list[tuple[int, int, str]], pos: int, indent: int) -> tuple[Any, int]:
    n, ind, body = lines[pos]
    if ind != indent:
        raise ValueError(f"line {n}: expected indentation {indent}, got {ind}")
    if body.startswith("- ") or body == "-":
        seq = []
        while pos < len(lines) and lines[pos][1] == indent and lines[pos][2].startswith("-"):
            n, _, body = lines[pos]
            item = body[1:].strip()
            if not item or _KEY_RE.match(item):
                raise ValueError(f"line {n}: only scalar sequence items are supported")
            seq.append(_scalar(item, n))
            pos += 1
        return seq, pos
    mapping: dict[str, Any] = {}
    while pos < len(lines) and lines[pos][1] == indent:
        n, _, body = lines[pos]
        m = _KEY_RE.match(body)
        if not m:
            raise ValueError(f"line {n}: expected 'key: value', got {body!r}")
        key, rest = m.group(1), m.group(2)
        if key in mapping:
            raise ValueError(f"line {n}: duplicate key {key!r}")
        pos += 1
        if rest is not None and rest != "":
            mapping[key] = _scalar(rest, n)
        elif pos < len(lines) and lines[pos][1] > indent:
            mapping[key], pos = _block(lines, pos, lines[pos][1])
        else:
            mapping[key] = None
    return mapping, pos
