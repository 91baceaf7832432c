"""One validation of each kind of input, shared by every API, command and config loader.

Every check raises :class:`InputError` naming the offending field (``reports[3].timestamp``,
``--interval-s``, ``classes[2].peak_cpu``); callers add where the value came from (a file, a flag)
and turn it into their answer: HTTP 400, gRPC ``INVALID_ARGUMENT``, exit status 2.

- **Names** (nodes, tenants, writers): 1..253 characters of ``[A-Za-z0-9._:@/+-]``, matched over the
  whole string (a trailing newline is not a name character).
- **Numbers**: finite floats only (no NaN, no infinity, no integer too large for a float), optional
  bounds; integers are integers (not booleans, not 2.5) within explicit bounds.
- **Text numbers** (query arguments, flags, environment variables, config strings): the same rules
  after parsing, so ``"nan"``, ``"inf"`` and ``"1e400"`` are refused everywhere.
- **Epoch timestamps** of queries: 0 .. 2100-01-01.
- **JSON files** read whole: at most ``MAX_JSON_FILE_BYTES`` when the reader passes ``max_bytes``
  (read bounded, so a 50 MB file or ``/dev/zero`` is one error, not the memory of the process).
- **JSON documents**: at most ``MAX_JSON_DEPTH`` levels of nesting, checked without recursion (a
  body nested 100,000 deep is an error, not a crash). A huge integer parses (up to Python's 4,300
  digits) and is then refused by the field's own check, which names the field.
- **Output paths**: ``--out`` must not name a directory.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from placement_service import HarvestError

MAX_NAME_LEN = 253
NAME_CHARS = "letters, digits and . _ : @ / + -"
_NAME_RE = re.compile(r"[A-Za-z0-9._:@/+-]{1,253}")  # 253 = MAX_NAME_LEN
# Class ids are YARN node labels and Capacity Scheduler queue names (YARN's label rule).
CLASS_ID_CHARS = "letters, digits, - and _"
_CLASS_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,254}")
MAX_JSON_DEPTH = 64
MAX_INT_DIGITS = 40  # integers as text: 10^40 is beyond every count, size and sequence number we store
MAX_EPOCH_S = 4_102_444_800.0  # 2100-01-01: later "epoch seconds" are a unit mistake (ms, us)
MAX_JSON_FILE_BYTES = 32 * 1024 * 1024  # a JSON input file read whole (e.g. a ledger event batch)


class InputError(HarvestError):
    """An input value is invalid; ``field`` names it (``None`` when the whole input is)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


# -- names ---------------------------------------------------------------------------------------
def is_name(value: object) -> bool:
    return isinstance(value, str) and _NAME_RE.fullmatch(value) is not None


def check_name(value: object, field: str) -> str:
    """A node, tenant or writer name; the whole string must match (no trailing newline)."""
    if not isinstance(value, str):
        raise InputError(f"{field}: must be a string, got {type(value).__name__}", field)
    if not value or len(value) > MAX_NAME_LEN:
        raise InputError(f"{field}: must be 1..{MAX_NAME_LEN} characters, got {len(value)}", field)
    if _NAME_RE.fullmatch(value) is None:
        bad = next((ch for ch in value if _NAME_RE.fullmatch(ch) is None), "")
        raise InputError(f"{field}: may only contain {NAME_CHARS}, got {bad!r} in {short_repr(value)}", field)
    return value


def check_text(value: object, field: str, *, max_len: int = MAX_NAME_LEN) -> str:
    """A free-form label read from a file (e.g. a tenant name in an imported trace): 1..``max_len``
    printable characters, so no newline or other control character can reach a log line or a file."""
    if not isinstance(value, str):
        raise InputError(f"{field}: must be a string, got {type(value).__name__}", field)
    if not value or len(value) > max_len:
        raise InputError(f"{field}: must be 1..{max_len} characters, got {len(value)}", field)
    if not value.isprintable():
        bad = next(ch for ch in value if not ch.isprintable())
        raise InputError(f"{field}: must not contain control characters, got {bad!r} in {short_repr(value)}", field)
    return value


def check_class_id(value: object, field: str) -> str:
    """A utilization class id (also a YARN node label and queue name, so never a path)."""
    if not isinstance(value, str) or _CLASS_ID_RE.fullmatch(value) is None:
        raise InputError(f"{field}: a class id is 1..255 {CLASS_ID_CHARS} (starting with a letter or digit), "
                         f"got {short_repr(value)}", field)
    return value


# -- numbers -------------------------------------------------------------------------------------
def check_finite(
    value: object, field: str, *, minimum: float | None = None, maximum: float | None = None,
    positive: bool = False,
) -> float:
    """A JSON / TOML number as a finite float within ``[minimum, maximum]`` (``> 0`` when ``positive``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{field}: must be a number, got {type(value).__name__}", field)
    try:
        number = float(value)
    except OverflowError:
        raise InputError(f"{field}: must be a finite number, got an integer of {_digits(value)} digits",
                         field) from None
    if not math.isfinite(number):
        raise InputError(f"{field}: must be a finite number, got {value!r}", field)
    _check_bounds(number, field, minimum, maximum, positive)
    return number


def check_int(value: object, field: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """A JSON / TOML integer (not a boolean, not 2.5) within ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{field}: must be an integer, got {short_repr(value)}", field)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InputError(f"{field}: must be an integer {_range(minimum, maximum)}, got {short_repr(value)}", field)
    return value


def parse_float(
    text: object, field: str, *, minimum: float | None = None, maximum: float | None = None,
    positive: bool = False,
) -> float:
    """A number given as text (query argument, flag, environment) or as a number; finite, in bounds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return check_finite(text, field, minimum=minimum, maximum=maximum, positive=positive)
    if not isinstance(text, str):
        raise InputError(f"{field}: must be a number, got {type(text).__name__}", field)
    try:
        number = float(text.strip())
    except ValueError:
        raise InputError(f"{field}: must be a number, got {short_repr(text)}", field) from None
    if not math.isfinite(number):
        raise InputError(f"{field}: must be a finite number, got {short_repr(text)}", field)
    _check_bounds(number, field, minimum, maximum, positive)
    return number


def parse_int(text: object, field: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer given as text or as a number (never a boolean or a fraction)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return check_int(text, field, minimum=minimum, maximum=maximum)
    if not isinstance(text, str):
        raise InputError(f"{field}: must be an integer, got {short_repr(text)}", field)
    stripped = text.strip()
    if len(stripped) > MAX_INT_DIGITS + 1:
        raise InputError(f"{field}: must be an integer {_range(minimum, maximum)}, got {short_repr(text)}", field)
    try:
        value = int(stripped)
    except ValueError:
        raise InputError(f"{field}: must be an integer, got {short_repr(text)}", field) from None
    return check_int(value, field, minimum=minimum, maximum=maximum)


def parse_bool(value: object, field: str) -> bool:
    """``true/false`` (JSON / TOML) or one of ``1 true yes on`` / ``0 false no off`` as text."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str | int) else None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise InputError(f"{field}: must be true or false, got {short_repr(value)}", field)


def parse_epoch_s(text: object, field: str) -> float:
    """Epoch seconds of a query bound: 0 .. 2100-01-01."""
    return parse_float(text, field, minimum=0.0, maximum=MAX_EPOCH_S)


def _check_bounds(number: float, field: str, minimum: float | None, maximum: float | None, positive: bool) -> None:
    if positive and number <= 0.0:
        raise InputError(f"{field}: must be > 0, got {number:g}", field)
    if minimum is not None and number < minimum:
        raise InputError(f"{field}: must be >= {minimum:g}, got {number:g}", field)
    if maximum is not None and number > maximum:
        raise InputError(f"{field}: must be <= {maximum:g}, got {number:g}", field)


def _range(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{minimum}..{maximum}"
    if minimum is not None:
        return f">= {minimum}"
    return f"<= {maximum}" if maximum is not None else ""


def _digits(value: int | float) -> int:
    return len(str(abs(int(value)))) if isinstance(value, int) else 0


def short_repr(value: object, limit: int = 40) -> str:
    """``repr`` of a value, cut to ``limit`` characters (an error line stays one short line)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"an integer of {_digits(value)} digits"
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_join(items: Iterable[object], max_items: int = 10, limit: int = 40) -> str:
    """Items for an error message, each cut to ``limit`` characters, at most ``max_items`` of them."""
    out = []
    for i, item in enumerate(items):
        if i == max_items:
            out.append("...")
            break
        text = str(item)
        out.append(text if len(text) <= limit else text[: limit - 3] + "...")
    return ", ".join(out)


# -- JSON ----------------------------------------------------------------------------------------
def json_depth_exceeds(doc: Any, max_depth: int) -> bool:
    """True when ``doc`` nests lists / objects more than ``max_depth`` deep.

    Level by level, without recursion: about 2 us per report of a ``POST /v1/reports`` body.
    """
    level = [doc]
    depth = 1
    while level:
        if depth > max_depth:
            return True
        deeper = []
        for node in level:
            for child in node.values() if type(node) is dict else node:
                if type(child) is dict or type(child) is list:
                    deeper.append(child)
        level = deeper
        depth += 1
    return False


def loads_json(raw: bytes | str, where: str, *, max_depth: int = MAX_JSON_DEPTH,
               object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """Parse one JSON document; errors name ``where`` (``body``, a file name) and the position."""
    try:
        doc = json.loads(raw, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise InputError(f"{where}: JSON nested more than {max_depth} levels deep", where) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte {exc.start})", where) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}", where) from None
    except ValueError as exc:  # an integer beyond Python's 4,300-digit conversion limit
        raise InputError(f"{where}: not valid JSON: {exc}", where) from None
    if isinstance(doc, dict | list) and json_depth_exceeds(doc, max_depth):
        raise InputError(f"{where}: JSON nested more than {max_depth} levels deep", where)
    return doc


def load_json_file(path: str | Path, what: str, *, max_depth: int = MAX_JSON_DEPTH,
                   object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
                   max_bytes: int | None = None) -> Any:
    """Read and parse a JSON file; every failure is one ``InputError`` line naming the file.

    With ``max_bytes`` at most that many bytes are read; a longer file is refused."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what}: {exc.strerror or exc}", str(path)) from None
    if max_bytes is not None and len(raw) > max_bytes:
        raise InputError(f"{path}: the {what} is larger than {max_bytes} bytes; split it", str(path))
    try:
        return loads_json(raw, str(path), max_depth=max_depth, object_pairs_hook=object_pairs_hook)
    except InputError as exc:
        raise InputError(f"{exc} ({what})", str(path)) from None


# -- files named on the command line -------------------------------------------------------------
def check_output_path(path: str | Path, field: str) -> Path:
    """A file the command will write must not be an existing directory (the atomic rename would fail
    only after all the work). A missing parent directory is the writer's business (some create it)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{field}: {p} is a directory; give a file name", field)
    return p


def output_file(text: str) -> Path:
    """``argparse`` type of an output file (``-`` is standard output): exit 2 with one line when the
    path names a directory."""
    if text == "-":
        return Path(text)
    try:
        return check_output_path(text, "path")
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("path: ")) from None


def finite_float(text: str) -> float:
    """``argparse`` type: a finite number (``nan``, ``inf``, ``1e400`` are refused)."""
    try:
        return parse_float(text, "value")
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("value: ")) from None
