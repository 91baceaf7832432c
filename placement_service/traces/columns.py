"""Column-level conversion and checks of the trace files, shared by ``io`` and ``real``.

Each function takes an Arrow table and a column name and returns numpy data, or raises
:class:`TraceError` naming the file, the 1-based data row and the column. All checks are vector
operations (pyarrow compute / numpy); the first bad row of a text column that does not convert is
found by bisection over slices (O(n) vector work, no Python loop over rows).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from placement_service import HarvestError
from placement_service.csvsafe import unescape_table
from placement_service.validate import short_join

PathLike = str | os.PathLike[str]

_STRING_COLUMNS = ("server", "tenant", "environment", "rack", "hardware", "datacenter", "msb")

# Values this close above 1.0 (rounding in the producer) are accepted and clipped to 1.0.
_FRACTION_SLACK = 1e-6
_MAX_EPOCH_S = 1e11
_ZONE_SUFFIX = r"(Z|[+-]\d\d(:?\d\d)?)$"
_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"


class TraceError(HarvestError):
    """A trace file is unreadable or breaks the data contract.

    ``path`` is the file, ``row`` the 1-based data row (None when the problem is not one row),
    ``column`` the column name (None when the problem is not one column).
    """

    def __init__(self, path: PathLike, detail: str, *, row: int | None = None, column: str | None = None):
        self.path = os.fspath(path)
        self.row = row
        self.column = column
        self.detail = detail
        # The column name and the detail come from the file: an error line stays short whatever it holds.
        shown = None if column is None else (column if len(column) <= 60 else column[:57] + "...")
        detail = detail if len(detail) <= 600 else detail[:597] + "..."
        where = ([f"row {row}"] if row is not None else []) + ([f"column {shown!r}"] if shown is not None else [])
        super().__init__(f"{self.path}: {', '.join(where)}: {detail}" if where else f"{self.path}: {detail}")


def code_dtype(n: int) -> type[np.signedinteger]:
    return np.int32 if n < 2**31 else np.int64


def compact(names: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop names no row uses (e.g. unused entries of a Parquet dictionary) and re-map the codes."""
    used = np.bincount(codes, minlength=len(names)) > 0 if len(codes) else np.zeros(len(names), dtype=bool)
    if used.all():
        return names, codes
    new_code = (np.cumsum(used) - 1).astype(code_dtype(len(names)))
    return names[used], new_code[codes]


def sorted_codes(names: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Re-map codes so that ``names`` is sorted and holds only used names (only names are sorted).

    Codes are int32 (int64 beyond 2**31 names); the mapping is skipped when already in order.
    """
    names, codes = compact(np.asarray(names, dtype=object), np.asarray(codes))
    order = np.argsort(names.astype(str), kind="stable")
    dtype = code_dtype(len(names))
    if np.array_equal(order, np.arange(len(order))):
        return names, codes.astype(dtype, copy=False)
    rank = np.empty(len(order), dtype=dtype)
    rank[order] = np.arange(len(order), dtype=dtype)
    return names[order], rank[codes]


def categorical(names: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """An object array of the row values ``names[codes]`` sharing one string object per name."""
    if len(names) == 0:
        return np.empty(len(codes), dtype=object)
    return np.asarray(names, dtype=object)[codes]


def file_kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    raise TraceError(path, "unknown file type: expected a name ending in .parquet, .pq, .csv or .csv.gz")


def read_table(path: PathLike, required: Sequence[str], optional: Sequence[str] = ()) -> pa.Table:
    """Read ``required`` (must exist) and ``optional`` (if present) columns of a Parquet or CSV file."""
    p = Path(path)
    kind = file_kind(p)
    if not p.exists():
        raise TraceError(p, "no such file")
    try:
        if kind == "parquet":
            names = pq.read_schema(p).names
        else:
            with pacsv.open_csv(p) as reader:
                names = reader.schema.names
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(p, f"cannot read the {kind} file: {exc}") from None
    check_unique_columns(p, names)
    missing = [c for c in required if c not in names]
    if missing:
        raise TraceError(
            p,
            f"missing column(s) {', '.join(repr(c) for c in missing)}; "
            f"expected {', '.join(required)} (found {short_join(names) or 'none'})",
        )
    wanted = list(required) + [c for c in optional if c in names]
    try:
        if kind == "parquet":
            return pq.read_table(p, columns=wanted)
        types = {c: pa.string() for c in wanted if c in _STRING_COLUMNS}
        try:
            table = pacsv.read_csv(
                p, convert_options=pacsv.ConvertOptions(column_types=types, include_columns=wanted)
            )
        except pa.ArrowInvalid:
            # Type inference failed on a later block (e.g. a word in a numeric column): read
            # everything as text and let the per-column conversion find and name the bad row.
            types = {c: pa.string() for c in wanted}
            table = pacsv.read_csv(
                p,
                convert_options=pacsv.ConvertOptions(
                    column_types=types, include_columns=wanted
                ),
            )
        return unescape_table(table, _STRING_COLUMNS)  # the project's CSV writers escape formula prefixes
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(p, f"cannot read the {kind} file: {exc}") from None


def check_unique_columns(path: PathLike, names: Sequence[str]) -> None:
    """Refuse a header that names a column twice (one line naming each repeated name and its positions)."""
    positions: dict[str, list[int]] = {}
    for k, name in enumerate(names, start=1):
        positions.setdefault(name, []).append(k)
    repeated = [(n, pos) for n, pos in positions.items() if len(pos) > 1]
    if repeated:
        from placement_service.validate import short_join

        listed = short_join((f"{n!r} (columns {', '.join(map(str, pos))})" for n, pos in repeated), max_items=5,
                            limit=60)
        raise TraceError(path, f"duplicated column name(s): {listed}; expected each column once (which one "
                         "holds the data? rename or drop the others)")


def first_true(mask: np.ndarray | pa.ChunkedArray | pa.Array) -> int:
    if not isinstance(mask, np.ndarray):
        mask = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
    return int(np.argmax(mask))


def first_failing(col: pa.ChunkedArray, convert: Callable[[pa.ChunkedArray], object]) -> int | None:
    """Index of the first element on which ``convert`` raises, by bisection (O(n) vector work)."""
    lo, hi = 0, len(col)
    try:
        convert(col)
        return None
    except (pa.ArrowException, ValueError):
        pass
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            convert(col.slice(lo, mid - lo))
        except (pa.ArrowException, ValueError):
            hi = mid
            continue
        lo = mid
    return lo


def fmt_time(t: float) -> str:
    """Epoch seconds for messages: ISO 8601 UTC plus the number when it looks like a date, else the number."""
    if 1e8 <= t < _MAX_EPOCH_S and float(t).is_integer():
        return f"{np.datetime64(int(t), 's')}Z ({int(t)})"
    return f"{t:g}"


def _value(col: pa.ChunkedArray, i: int) -> str:
    """A cell for an error message, cut to 40 characters (a 200 KB cell stays a one-line error)."""
    from placement_service.validate import short_repr

    v = col[i].as_py()
    return short_repr(v) if isinstance(v, str) else short_repr(str(v)).strip("'")


def float_column(path: PathLike, table: pa.Table, name: str, what: str = "a number") -> np.ndarray:
    """Column ``name`` as float64; errors on nulls, text that is not a number, NaN and infinities."""
    col = table.column(name)
    if col.null_count:
        i = first_true(pc.is_null(col))
        raise TraceError(path, f"expected {what}, got an empty value", row=i + 1, column=name)
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        stripped = pc.utf8_trim_whitespace(col)
        empty = pc.equal(pc.utf8_length(stripped), 0)
        if pc.any(empty).as_py():
            i = first_true(empty)
            raise TraceError(path, f"expected {what}, got an empty value", row=i + 1, column=name)

        def convert(c: pa.ChunkedArray) -> object:
            return pc.cast(c, pa.float64())

        bad = first_failing(stripped, convert)
        if bad is not None:
            raise TraceError(path, f"expected {what}, got {_value(col, bad)}", row=bad + 1, column=name)
        col = pc.cast(stripped, pa.float64())
    elif not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)):
        raise TraceError(path, f"expected {what}, got values of type {t}", row=None, column=name)
    values = np.array(pc.cast(col, pa.float64()).to_numpy(), dtype=np.float64)  # writable copy
    finite = np.isfinite(values)
    if not finite.all():
        i = first_true(~finite)
        raise TraceError(path, f"expected {what}, got {values[i]}", row=i + 1, column=name)
    return values


def fraction_column(path: PathLike, table: pa.Table, name: str, *, percent: bool, gaps: bool = False) -> np.ndarray:
    """A 0..1 fraction column; with ``percent`` the file holds 0..100 and values are divided by 100.

    ``gaps``: an empty cell is a gap (NaN) instead of an error (the optional ``memory`` column).
    """
    top = 100.0 if percent else 1.0
    what = "a number in [0, 100]" if percent else "a number in [0, 1]"
    empty = None
    if gaps:
        col = table.column(name)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = pc.if_else(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(col)), 0),
                             pa.scalar(None, col.type), col)
        if pa.types.is_null(col.type):
            return np.full(len(col), np.nan)
        empty = np.asarray(pc.is_null(col).to_numpy(zero_copy_only=False), dtype=bool)
        if empty.any():
            table = pa.table({name: pc.fill_null(col, pa.scalar("0" if pa.types.is_string(col.type) else 0,
                                                                 col.type))})
    values = float_column(path, table, name, what)
    if empty is not None and empty.any():
        values[empty] = np.nan
    bad = ~np.isnan(values) & ((values < 0.0) | (values > top * (1.0 + _FRACTION_SLACK)))
    if bad.any():
        i = first_true(bad)
        hint = "" if percent or values[i] < 0 or values[i] > 100 else " (use --cpu-percent for 0-100 values)"
        raise TraceError(path, f"expected {what}, got {values[i]:g}{hint}", row=i + 1, column=name)
    if percent:
        values = values / 100.0
    return np.minimum(values, 1.0)


def timestamp_s_column(path: PathLike, table: pa.Table, name: str = "timestamp") -> np.ndarray:
    """Epoch seconds (float64) from numbers, Arrow timestamps or ISO 8601 strings (naive = UTC).

    Numbers above ``_MAX_EPOCH_S`` (year 5138) are rejected: they are almost surely milliseconds.
    """
    values = _timestamp_values(path, table, name)
    too_big = np.abs(values) > _MAX_EPOCH_S
    if too_big.any():
        i = first_true(too_big)
        shown = f"{values[i]:.0f}" if abs(values[i]) < 1e15 else f"{values[i]:g}"  # one short line
        raise TraceError(
            path, f"expected epoch seconds, got {shown} (milliseconds? divide by 1000)", row=i + 1, column=name,
        )
    return values


def _timestamp_values(path: PathLike, table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if len(col) == 0:
        return np.empty(0, dtype=np.float64)
    what = "epoch seconds or an ISO 8601 time"
    if col.null_count:
        i = first_true(pc.is_null(col))
        raise TraceError(path, f"expected {what}, got an empty value", row=i + 1, column=name)
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return float_column(path, table, name, what)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return arrow_time_to_s(col)
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise TraceError(path, f"expected {what}, got values of type {t}", column=name)
    original = col
    col = pc.utf8_upper(pc.utf8_trim_whitespace(col))  # 'z' / 't' as 'Z' / 'T'
    empty = pc.equal(pc.utf8_length(col), 0)
    if pc.any(empty).as_py():
        i = first_true(empty)
        raise TraceError(path, f"expected {what}, got an empty value", row=i + 1, column=name)

    def convert(c: pa.ChunkedArray) -> np.ndarray:
        # Per row: a number is epoch seconds; text with a zone suffix is converted to UTC; text
        # without one is taken as UTC.
        out = np.empty(len(c), dtype=np.float64)
        num = np.asarray(pc.match_substring_regex(c, _NUMBER).to_numpy(zero_copy_only=False), dtype=bool)
        zoned = np.asarray(pc.match_substring_regex(c, _ZONE_SUFFIX).to_numpy(zero_copy_only=False), dtype=bool)
        zoned &= ~num
        naive = ~num & ~zoned
        for mask, target in ((num, None), (zoned, pa.timestamp("ns", tz="UTC")), (naive, pa.timestamp("ns"))):
            if mask.any():
                part = pc.filter(c, pa.array(mask))
                out[mask] = (
                    np.asarray(pc.cast(part, pa.float64()).to_numpy(), dtype=np.float64)
                    if target is None
                    else arrow_time_to_s(pc.cast(part, target))
                )
        return out

    bad = first_failing(col, convert)
    if bad is not None:
        raise TraceError(path, f"expected {what}, got {_value(original, bad)}", row=bad + 1, column=name)
    values = convert(col)
    finite = np.isfinite(values)
    if not finite.all():
        i = first_true(~finite)
        raise TraceError(path, f"expected {what}, got {_value(original, i)}", row=i + 1, column=name)
    return values


def arrow_time_to_s(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Epoch seconds (float64) of an Arrow date or timestamp column (any unit; zone-aware = UTC)."""
    if pa.types.is_date(col.type):
        col = pc.cast(col, pa.timestamp("s"))
    per_s = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[col.type.unit]
    ticks = pc.cast(col, pa.int64())  # the stored UTC ticks
    return np.asarray(ticks.to_numpy(), dtype=np.float64) / per_s


def string_column(path: PathLike, table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(names, codes): the distinct values and each row's index into them (first-seen order for
    plain text; the dictionary's order, without unused entries, for Parquet dictionary columns)."""
    col = table.column(name)
    if col.null_count:
        i = first_true(pc.is_null(col))
        raise TraceError(path, "expected a non-empty name, got an empty value", row=i + 1, column=name)
    if pa.types.is_dictionary(col.type) and (
        pa.types.is_string(col.type.value_type) or pa.types.is_large_string(col.type.value_type)
    ):
        arr = col.unify_dictionaries().combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        if isinstance(arr, pa.ChunkedArray):  # pragma: no cover - pyarrow version differences
            arr = arr.combine_chunks()
        names, codes = compact(
            np.asarray(arr.dictionary.to_numpy(zero_copy_only=False), dtype=object),
            np.asarray(arr.indices.to_numpy(zero_copy_only=False)),
        )
    else:
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            col = pc.cast(col, pa.string())  # numbers used as names
        enc = pc.dictionary_encode(col.combine_chunks())
        names = np.asarray(enc.dictionary.to_numpy(zero_copy_only=False), dtype=object)
        codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False))
    blank = np.fromiter((not str(n).strip() for n in names), dtype=bool, count=len(names))
    if blank.any():
        bad_rows = blank[codes]
        if bad_rows.any():
            i = first_true(bad_rows)
            raise TraceError(path, "expected a non-empty name, got an empty value", row=i + 1, column=name)
    return names, codes


def strings(path: PathLike, table: pa.Table, name: str) -> np.ndarray:
    return categorical(*string_column(path, table, name))


def check_duplicates(path: PathLike, codes: np.ndarray, names: np.ndarray, ts: np.ndarray) -> None:
    """Reject two rows with the same (server, timestamp); names the later row and the earlier one."""
    if len(ts) < 2:
        return
    # Fast path: rows already grouped by server in time order, or in time order server by server
    # (how telemetry is usually written) cannot hold a duplicate; no sort needed.
    dc, dt = np.diff(codes), np.diff(ts)
    change = dc != 0
    grouped = 1 + int(change.sum()) == int((np.bincount(codes) > 0).sum())  # one run per server
    if (grouped and bool(np.all(change | (dt > 0)))) or bool(np.all((dt > 0) | ((dt == 0) & (dc > 0)))):
        return
    del dc, dt, change
    order = np.lexsort((ts, codes))  # stable: equal keys keep file order
    sc, st = codes[order], ts[order]
    dup = (sc[1:] == sc[:-1]) & (st[1:] == st[:-1])
    if dup.any():
        pos = np.flatnonzero(dup)
        later = order[pos + 1]
        k = int(np.argmin(later))
        row, first = int(later[k]), int(order[pos[k]])
        raise TraceError(
            path,
            f"duplicate (server, timestamp): server {str(names[codes[row]])!r} at {fmt_time(ts[row])} "
            f"already appears in row {first + 1}; expected one row per (server, timestamp)",
            row=row + 1,
            column="server",
        )


def check_known(
    path: PathLike, names: np.ndarray, codes: np.ndarray, known_servers: Iterable[str] | None
) -> None:
    if known_servers is None or len(names) == 0:
        return
    known = set(known_servers)
    unknown = np.fromiter((n not in known for n in names), dtype=bool, count=len(names))
    if unknown.any():
        bad_rows = unknown[codes]
        i = first_true(bad_rows)
        n_bad = int(unknown.sum())
        raise TraceError(
            path,
            f"unknown server {str(names[codes[i]])!r}: expected a server of the inventory "
            f"({n_bad} unknown server name(s) in this file)",
            row=i + 1,
            column="server",
        )


def check_one_tenant_per_server(
    path: PathLike, server_names: np.ndarray, server_codes: np.ndarray, t_names: np.ndarray, t_codes: np.ndarray
) -> None:
    """A server belongs to exactly one tenant over the whole file."""
    if len(t_codes) == 0:
        return
    # The first row of each server fixes its tenant; rows disagreeing with it are errors.
    first_row = np.full(len(server_names), len(t_codes), dtype=np.int64)
    np.minimum.at(first_row, server_codes, np.arange(len(t_codes)))
    first_tenant = np.zeros(len(server_names), dtype=np.int64)
    seen = first_row < len(t_codes)
    first_tenant[seen] = t_codes[first_row[seen]]
    bad = t_codes != first_tenant[server_codes]
    if bad.any():
        i = first_true(bad)
        s = server_codes[i]
        raise TraceError(
            path,
            f"server {str(server_names[s])!r} is in tenant {str(t_names[t_codes[i]])!r} here but in tenant "
            f"{str(t_names[first_tenant[s]])!r} in row {int(first_row[s]) + 1}; expected one tenant per server",
            row=i + 1,
            column="tenant",
        )


def check_inventory_tenants(
    path: PathLike,
    server_names: np.ndarray,
    server_codes: np.ndarray,
    t_names: np.ndarray,
    t_codes: np.ndarray,
    inventory: Any,
) -> None:
    """Each sample's tenant is its server's tenant in the inventory (checked per distinct pair)."""
    inv_tenant = dict(zip(inventory.server, inventory.tenant, strict=True))
    # Expected tenant code per server code (-1: server or its tenant absent from this file).
    t_index = {str(t): i for i, t in enumerate(t_names)}
    expected = np.fromiter(
        (t_index.get(inv_tenant.get(str(sv), ""), -1) for sv in server_names), dtype=np.int64, count=len(server_names)
    )
    bad = expected[server_codes] != t_codes
    if bad.any():
        i = first_true(bad)
        sv = str(server_names[server_codes[i]])
        raise TraceError(
            path,
            f"server {sv!r} is in tenant {str(t_names[t_codes[i]])!r} here but in tenant "
            f"{inv_tenant.get(sv)!r} in the inventory; expected the inventory's tenant",
            row=i + 1,
            column="tenant",
        )
