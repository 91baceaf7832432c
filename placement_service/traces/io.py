"""Read, validate and write the three trace files: utilization samples, reimage events, inventory.

Formats are chosen by the file name: ``.parquet`` / ``.pq`` (pyarrow) or ``.csv`` / ``.csv.gz``.
Columns follow DESIGN.md "Data contracts" (see ``docs/traces.md``):

- utilization: ``timestamp`` (epoch seconds or ISO 8601), ``server``, ``tenant``, ``cpu`` (fraction
  0..1 of the server's cores); optional ``memory`` (fraction) and ``environment``;
- reimages: ``timestamp``, ``server``;
- inventory: ``server``, ``tenant``, ``environment``, ``rack``, ``cores``, ``memory_mb``,
  ``storage_gb``; optional ``hardware``, ``datacenter``, ``msb``.

Every check is vectorized (pyarrow compute / numpy): the files may hold tens of millions of rows.
A failed check raises :class:`TraceError` naming the file, the 1-based data row (the header is not
counted: data row 17 of a CSV file is its line 18), the column and what was expected. Writers are
atomic: they write a temporary file next to the target and rename it, so a reader never sees a
half-written file.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from placement_service import HarvestError
from placement_service.core.types import Inventory, ReimageEvents

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

UTILIZATION_COLUMNS = ("timestamp", "server", "tenant", "cpu")
UTILIZATION_OPTIONAL = ("memory", "environment")
REIMAGE_COLUMNS = ("timestamp", "server")
INVENTORY_COLUMNS = ("server", "tenant", "environment", "rack", "cores", "memory_mb", "storage_gb")
INVENTORY_OPTIONAL = ("hardware", "datacenter", "msb")
_STRING_COLUMNS = ("server", "tenant", "environment", "rack", "hardware", "datacenter", "msb")

# Values this close above 1.0 (rounding in the producer) are accepted and clipped to 1.0.
_FRACTION_SLACK = 1e-6
_MAX_EPOCH_S = 1e11
_ZONE_SUFFIX = r"(Z|z|[+-]\d\d(:?\d\d)?)$"
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
        where = ([f"row {row}"] if row is not None else []) + ([f"column {column!r}"] if column is not None else [])
        super().__init__(f"{self.path}: {', '.join(where)}: {detail}" if where else f"{self.path}: {detail}")


@dataclass(frozen=True)
class UtilizationSamples:
    """Utilization samples, column-wise: row i is server ``server[i]`` at ``timestamp_s[i]``.

    ``server`` / ``tenant`` / ``environment`` are numpy arrays of ``str`` (dtype object when read or
    generated: each row points at one shared string per distinct name, 8 bytes a row instead of 4
    bytes per character); ``cpu`` and ``memory`` are float64 fractions (0..1). ``memory`` and
    ``environment`` are None when the file has no such column. Rows keep the file order.
    """

    timestamp_s: np.ndarray
    server: np.ndarray
    tenant: np.ndarray
    cpu: np.ndarray
    memory: np.ndarray | None = None
    environment: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.timestamp_s.shape[0])

    def factorize(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """(names, codes) of a text column: sorted distinct names and each row's index into them.

        Hash-based (pyarrow) and cached, so grouping tens of millions of rows by server or tenant
        does not sort strings; loaders and the generator pre-fill the cache.
        """
        key = f"_factorized_{column}"
        cached = self.__dict__.get(key)
        if cached is None:
            values = getattr(self, column)
            if values is None:
                raise ValueError(f"no {column!r} column")
            enc = pc.dictionary_encode(pa.array(np.asarray(values).astype(object), type=pa.string()))
            cached = _sorted_codes(
                np.asarray(enc.dictionary.to_numpy(zero_copy_only=False), dtype=object),
                np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64),
            )
            self.__dict__[key] = cached
        return cached

    def with_factorized(self, column: str, names: np.ndarray, codes: np.ndarray) -> UtilizationSamples:
        """Record a known factorization of ``column`` (names need not be sorted); returns self."""
        self.__dict__[f"_factorized_{column}"] = _sorted_codes(names, codes)
        return self


def _code_dtype(n: int) -> type[np.signedinteger]:
    return np.int32 if n < 2**31 else np.int64


def _compact(names: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop names no row uses (e.g. unused entries of a Parquet dictionary) and re-map the codes."""
    used = np.bincount(codes, minlength=len(names)) > 0 if len(codes) else np.zeros(len(names), dtype=bool)
    if used.all():
        return names, codes
    new_code = (np.cumsum(used) - 1).astype(_code_dtype(len(names)))
    return names[used], new_code[codes]


def _sorted_codes(names: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Re-map codes so that ``names`` is sorted and holds only used names (only names are sorted).

    Codes are int32 (int64 beyond 2**31 names); the mapping is skipped when already in order.
    """
    names, codes = _compact(np.asarray(names, dtype=object), np.asarray(codes))
    order = np.argsort(names.astype(str), kind="stable")
    dtype = _code_dtype(len(names))
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


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------


def _kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    raise TraceError(path, "unknown file type: expected a name ending in .parquet, .pq, .csv or .csv.gz")


def _read_table(path: PathLike, required: Sequence[str], optional: Sequence[str] = ()) -> pa.Table:
    """Read ``required`` (must exist) and ``optional`` (if present) columns of a Parquet or CSV file."""
    p = Path(path)
    kind = _kind(p)
    if not p.exists():
        raise TraceError(p, "no such file")
    try:
        if kind == "parquet":
            names = pq.read_schema(p).names
        else:
            with pacsv.open_csv(p) as reader:
                names = reader.schema.names
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(p, f"cannot read the {kind} header: {exc}") from None
    missing = [c for c in required if c not in names]
    if missing:
        raise TraceError(
            p,
            f"missing column(s) {', '.join(repr(c) for c in missing)}; "
            f"expected {', '.join(required)} (found {', '.join(names) or 'none'})",
        )
    wanted = list(required) + [c for c in optional if c in names]
    try:
        if kind == "parquet":
            return pq.read_table(p, columns=wanted)
        types = {c: pa.string() for c in wanted if c in _STRING_COLUMNS}
        try:
            return pacsv.read_csv(
                p, convert_options=pacsv.ConvertOptions(column_types=types, include_columns=wanted)
            )
        except pa.ArrowInvalid:
            # Type inference failed on a later block (e.g. a word in a numeric column): read
            # everything as text and let the per-column conversion find and name the bad row.
            types = {c: pa.string() for c in wanted}
            return pacsv.read_csv(
                p,
                convert_options=pacsv.ConvertOptions(
                    column_types=types, include_columns=wanted, strings_can_be_null=True
                ),
            )
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(p, f"cannot read the {kind} file: {exc}") from None


def _first_true(mask: np.ndarray | pa.ChunkedArray | pa.Array) -> int:
    if not isinstance(mask, np.ndarray):
        mask = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
    return int(np.argmax(mask))


def _first_failing(col: pa.ChunkedArray, convert: Callable[[pa.ChunkedArray], object]) -> int | None:
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


def _value(col: pa.ChunkedArray, i: int) -> str:
    v = col[i].as_py()
    return repr(v) if isinstance(v, str) else str(v)


def _float_column(path: PathLike, table: pa.Table, name: str, what: str = "a number") -> np.ndarray:
    """Column ``name`` as float64; errors on nulls, text that is not a number, NaN and infinities."""
    col = table.column(name)
    if col.null_count:
        i = _first_true(pc.is_null(col))
        raise TraceError(path, f"expected {what}, got an empty value", row=i + 1, column=name)
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        stripped = pc.utf8_trim_whitespace(col)

        def convert(c: pa.ChunkedArray) -> object:
            return pc.cast(c, pa.float64())

        bad = _first_failing(stripped, convert)
        if bad is not None:
            raise TraceError(path, f"expected {what}, got {_value(col, bad)}", row=bad + 1, column=name)
        col = pc.cast(stripped, pa.float64())
    elif not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)):
        raise TraceError(path, f"expected {what}, got values of type {t}", row=None, column=name)
    values = np.array(pc.cast(col, pa.float64()).to_numpy(), dtype=np.float64)  # writable copy
    finite = np.isfinite(values)
    if not finite.all():
        i = _first_true(~finite)
        raise TraceError(path, f"expected {what}, got {values[i]}", row=i + 1, column=name)
    return values


def _fraction_column(path: PathLike, table: pa.Table, name: str, *, percent: bool) -> np.ndarray:
    """A 0..1 fraction column; with ``percent`` the file holds 0..100 and values are divided by 100."""
    top = 100.0 if percent else 1.0
    what = "a number in [0, 100]" if percent else "a number in [0, 1]"
    values = _float_column(path, table, name, what)
    bad = (values < 0.0) | (values > top * (1.0 + _FRACTION_SLACK))
    if bad.any():
        i = _first_true(bad)
        hint = "" if percent or values[i] < 0 or values[i] > 100 else " (use --cpu-percent for 0-100 values)"
        raise TraceError(path, f"expected {what}, got {values[i]:g}{hint}", row=i + 1, column=name)
    if percent:
        values = values / 100.0
    return np.minimum(values, 1.0)


def _timestamp_s(path: PathLike, table: pa.Table, name: str = "timestamp") -> np.ndarray:
    """Epoch seconds (float64) from numbers, Arrow timestamps or ISO 8601 strings (naive = UTC).

    Numbers above ``_MAX_EPOCH_S`` (year 5138) are rejected: they are almost surely milliseconds.
    """
    values = _timestamp_values(path, table, name)
    too_big = np.abs(values) > _MAX_EPOCH_S
    if too_big.any():
        i = _first_true(too_big)
        raise TraceError(
            path, f"expected epoch seconds, got {values[i]:.0f} (milliseconds? divide by 1000)", row=i + 1,
            column=name,
        )
    return values


def _timestamp_values(path: PathLike, table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if len(col) == 0:
        return np.empty(0, dtype=np.float64)
    what = "epoch seconds or an ISO 8601 time"
    if col.null_count:
        i = _first_true(pc.is_null(col))
        raise TraceError(path, f"expected {what}, got an empty value", row=i + 1, column=name)
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return _float_column(path, table, name, what)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return _arrow_time_to_s(col)
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise TraceError(path, f"expected {what}, got values of type {t}", column=name)
    col = pc.utf8_trim_whitespace(col)

    def convert(c: pa.ChunkedArray) -> np.ndarray:
        # Per row: a number is epoch seconds; text with a zone suffix is converted to UTC; text
        # without one is taken as UTC.
        out = np.empty(len(c), dtype=np.float64)
        num = np.asarray(pc.match_substring_regex(c, _NUMBER).to_numpy(zero_copy_only=False), dtype=bool)
        zoned = np.asarray(pc.match_substring_regex(c, _ZONE_SUFFIX).to_numpy(zero_copy_only=False), dtype=bool)
        zoned &= ~num
        naive = ~num & ~zoned
        for mask, target in ((num, None), (zoned, pa.timestamp("us", tz="UTC")), (naive, pa.timestamp("us"))):
            if mask.any():
                part = pc.filter(c, pa.array(mask))
                out[mask] = (
                    np.asarray(pc.cast(part, pa.float64()).to_numpy(), dtype=np.float64)
                    if target is None
                    else _arrow_time_to_s(pc.cast(part, target))
                )
        return out

    bad = _first_failing(col, convert)
    if bad is not None:
        raise TraceError(path, f"expected {what}, got {_value(col, bad)}", row=bad + 1, column=name)
    values = convert(col)
    finite = np.isfinite(values)
    if not finite.all():
        i = _first_true(~finite)
        raise TraceError(path, f"expected {what}, got {_value(col, i)}", row=i + 1, column=name)
    return values


def _arrow_time_to_s(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if pa.types.is_date(col.type):
        col = pc.cast(col, pa.timestamp("s"))
    tz = col.type.tz
    us = pc.cast(pc.cast(col, pa.timestamp("us", tz=tz)), pa.int64())
    return np.asarray(us.to_numpy(), dtype=np.float64) / 1e6


def _string_column(path: PathLike, table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(names, codes): the distinct values and each row's index into them (first-seen order for
    plain text; the dictionary's order, without unused entries, for Parquet dictionary columns)."""
    col = table.column(name)
    if col.null_count:
        i = _first_true(pc.is_null(col))
        raise TraceError(path, "expected a non-empty name, got an empty value", row=i + 1, column=name)
    if pa.types.is_dictionary(col.type) and (
        pa.types.is_string(col.type.value_type) or pa.types.is_large_string(col.type.value_type)
    ):
        arr = col.unify_dictionaries().combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        if isinstance(arr, pa.ChunkedArray):  # pragma: no cover - pyarrow version differences
            arr = arr.combine_chunks()
        names, codes = _compact(
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
            i = _first_true(bad_rows)
            raise TraceError(path, "expected a non-empty name, got an empty value", row=i + 1, column=name)
    return names, codes


def _strings(path: PathLike, table: pa.Table, name: str) -> np.ndarray:
    return categorical(*_string_column(path, table, name))


def _check_duplicates(path: PathLike, codes: np.ndarray, names: np.ndarray, ts: np.ndarray) -> None:
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
            f"duplicate (server, timestamp): server {str(names[codes[row]])!r} at {ts[row]:g} "
            f"already appears in row {first + 1}; expected one row per (server, timestamp)",
            row=row + 1,
            column="server",
        )


def _check_known(
    path: PathLike, names: np.ndarray, codes: np.ndarray, known_servers: Iterable[str] | None
) -> None:
    if known_servers is None or len(names) == 0:
        return
    known = set(known_servers)
    unknown = np.fromiter((n not in known for n in names), dtype=bool, count=len(names))
    if unknown.any():
        bad_rows = unknown[codes]
        i = _first_true(bad_rows)
        n_bad = int(unknown.sum())
        raise TraceError(
            path,
            f"unknown server {str(names[codes[i]])!r}: expected a server of the inventory "
            f"({n_bad} unknown server name(s) in this file)",
            row=i + 1,
            column="server",
        )


def load_utilization(
    path: PathLike, *, cpu_percent: bool = False, known_servers: Iterable[str] | None = None
) -> UtilizationSamples:
    """Read and validate utilization samples (see the module docstring for the columns).

    ``cpu_percent``: the file's ``cpu`` (and ``memory``) columns hold 0..100; they are divided by
    100. ``known_servers``: when given (e.g. the inventory's servers), a sample of any other server
    is an error.
    """
    table = _read_table(path, UTILIZATION_COLUMNS, UTILIZATION_OPTIONAL)
    if table.num_rows == 0:
        raise TraceError(path, "no samples: expected at least one data row")
    # Convert column by column, dropping each Arrow column once converted (lower peak memory).
    ts = _timestamp_s(path, table)
    table = table.drop_columns(["timestamp"])
    server_names, server_codes = _string_column(path, table, "server")
    table = table.drop_columns(["server"])
    tenant_names, tenant_codes = _string_column(path, table, "tenant")
    table = table.drop_columns(["tenant"])
    cpu = _fraction_column(path, table, "cpu", percent=cpu_percent)
    table = table.drop_columns(["cpu"])
    memory = None
    if "memory" in table.column_names:
        memory = _fraction_column(path, table, "memory", percent=cpu_percent)
        table = table.drop_columns(["memory"])
    env: tuple[np.ndarray, np.ndarray] | None = None
    if "environment" in table.column_names:
        env = _string_column(path, table, "environment")
    del table
    _check_known(path, server_names, server_codes, known_servers)
    _check_duplicates(path, server_codes, server_names, ts)
    _check_one_tenant_per_server(path, server_names, server_codes, tenant_names, tenant_codes)
    logger.info("%s: %d samples, %d servers", path, len(ts), len(server_names))
    samples = UtilizationSamples(
        timestamp_s=ts,
        server=categorical(server_names, server_codes),
        tenant=categorical(tenant_names, tenant_codes),
        cpu=cpu,
        memory=memory,
        environment=categorical(*env) if env is not None else None,
    )
    if env is not None:
        samples.with_factorized("environment", *env)
    samples.with_factorized("server", server_names, server_codes)
    return samples.with_factorized("tenant", tenant_names, tenant_codes)


def _check_one_tenant_per_server(
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
        i = _first_true(bad)
        s = server_codes[i]
        raise TraceError(
            path,
            f"server {str(server_names[s])!r} is in tenant {str(t_names[t_codes[i]])!r} here but in tenant "
            f"{str(t_names[first_tenant[s]])!r} in row {int(first_row[s]) + 1}; expected one tenant per server",
            row=i + 1,
            column="tenant",
        )


def load_reimages(path: PathLike, *, known_servers: Iterable[str] | None = None) -> ReimageEvents:
    """Read and validate reimage events; the result is sorted by time (stable)."""
    table = _read_table(path, REIMAGE_COLUMNS)
    ts = _timestamp_s(path, table)
    names, codes = _string_column(path, table, "server")
    _check_known(path, names, codes, known_servers)
    _check_duplicates(path, codes, names, ts)
    order = np.argsort(ts, kind="stable")
    return ReimageEvents(timestamp_s=ts[order], server=tuple(categorical(names, codes[order]).tolist()))


def load_inventory(path: PathLike) -> Inventory:
    """Read and validate the inventory: one row per server, unique names, non-negative capacities."""
    table = _read_table(path, INVENTORY_COLUMNS, INVENTORY_OPTIONAL)
    if table.num_rows == 0:
        raise TraceError(path, "no servers: expected at least one data row")
    server_names, server_codes = _string_column(path, table, "server")
    counts = np.bincount(server_codes, minlength=len(server_names))
    if (counts > 1).any():
        # The earliest row whose server already appeared in an earlier row.
        order = np.argsort(server_codes, kind="stable")
        sc = server_codes[order]
        pos = np.flatnonzero(sc[1:] == sc[:-1])
        k = int(np.argmin(order[pos + 1]))
        i, first = int(order[pos[k] + 1]), int(order[pos[k]])
        raise TraceError(
            path,
            f"server {str(server_names[server_codes[i]])!r} already listed in row {first + 1}; "
            "expected one row per server",
            row=i + 1,
            column="server",
        )
    numbers = {}
    for name in ("cores", "memory_mb", "storage_gb"):
        values = _float_column(path, table, name, "a non-negative number")
        if (values < 0).any():
            i = _first_true(values < 0)
            raise TraceError(path, f"expected a non-negative number, got {values[i]:g}", row=i + 1, column=name)
        numbers[name] = values
    cols = {c: tuple(_strings(path, table, c).tolist()) for c in ("tenant", "environment", "rack")}
    optional = {
        c: tuple(_strings(path, table, c).tolist()) if c in table.column_names else ()
        for c in INVENTORY_OPTIONAL
    }
    return Inventory(
        server=tuple(categorical(server_names, server_codes).tolist()),
        tenant=cols["tenant"],
        environment=cols["environment"],
        rack=cols["rack"],
        cores=numbers["cores"],
        memory_mb=numbers["memory_mb"],
        storage_gb=numbers["storage_gb"],
        hardware=optional["hardware"],
        datacenter=optional["datacenter"],
        msb=optional["msb"],
    )


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------


def _time_array(ts: np.ndarray) -> pa.Array:
    ts = np.asarray(ts, dtype=np.float64)
    if len(ts) and np.all(np.isfinite(ts)) and np.all(ts == np.round(ts)):
        return pa.array(ts.astype(np.int64))
    return pa.array(ts)


def _stage(table: pa.Table, path: PathLike) -> str:
    """Write ``table`` to a temporary file next to ``path`` (fsynced); returns the temporary name."""
    p = Path(path)
    kind = _kind(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
    try:
        if kind == "parquet":
            pq.write_table(table, tmp, compression="zstd")
        else:
            plain = pa.table(
                {
                    n: pc.cast(c, c.type.value_type) if pa.types.is_dictionary(c.type) else c
                    for n, c in zip(table.column_names, table.columns, strict=True)
                }
            )
            compression = "gzip" if p.name.lower().endswith(".gz") else None
            with pa.output_stream(tmp, compression=compression) as out:
                pacsv.write_csv(plain, out)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _unlink(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


def write_tables(items: Sequence[tuple[pa.Table, PathLike]]) -> None:
    """Write several tables atomically as a set: all are staged first, then renamed into place.

    If any write fails, no target is touched. (A crash between two renames can still leave a mix
    of new and old files, never a half-written one.)
    """
    staged: list[tuple[str, Path]] = []
    try:
        for table, path in items:
            staged.append((_stage(table, path), Path(path)))
    except BaseException:
        for tmp, _ in staged:
            _unlink(tmp)
        raise
    for tmp, target in staged:
        os.replace(tmp, target)


def _write_table(table: pa.Table, path: PathLike) -> None:
    """Write ``table`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    write_tables([(table, path)])


def _str_array(values: Sequence[str] | np.ndarray) -> pa.Array:
    return pa.array([str(v) for v in values], type=pa.string())


def _dict_array(samples: UtilizationSamples, column: str) -> pa.Array:
    """A text column as a dictionary array (codes + distinct names), built without per-row strings."""
    names, codes = samples.factorize(column)
    return pa.DictionaryArray.from_arrays(
        pa.array(codes.astype(np.int32, copy=False)), pa.array([str(n) for n in names], type=pa.string())
    )


def utilization_table(samples: UtilizationSamples) -> pa.Table:
    cols: dict[str, pa.Array] = {
        "timestamp": _time_array(samples.timestamp_s),
        "server": _dict_array(samples, "server"),
        "tenant": _dict_array(samples, "tenant"),
        "cpu": pa.array(np.asarray(samples.cpu, dtype=np.float64)),
    }
    if samples.memory is not None:
        cols["memory"] = pa.array(np.asarray(samples.memory, dtype=np.float64))
    if samples.environment is not None:
        cols["environment"] = _dict_array(samples, "environment")
    return pa.table(cols)


def write_utilization(samples: UtilizationSamples, path: PathLike) -> None:
    """Write samples (Parquet or CSV by extension) atomically; integral times are written as ints."""
    _write_table(utilization_table(samples), path)


def reimages_table(events: ReimageEvents) -> pa.Table:
    return pa.table({"timestamp": _time_array(events.timestamp_s), "server": _str_array(list(events.server))})


def write_reimages(events: ReimageEvents, path: PathLike) -> None:
    _write_table(reimages_table(events), path)


def inventory_table(inv: Inventory) -> pa.Table:
    cols: dict[str, pa.Array] = {
        "server": _str_array(list(inv.server)),
        "tenant": _str_array(list(inv.tenant)),
        "environment": _str_array(list(inv.environment)),
        "rack": _str_array(list(inv.rack)),
        "cores": pa.array(np.asarray(inv.cores, dtype=np.float64)),
        "memory_mb": pa.array(np.asarray(inv.memory_mb, dtype=np.float64)),
        "storage_gb": pa.array(np.asarray(inv.storage_gb, dtype=np.float64)),
    }
    for name in INVENTORY_OPTIONAL:
        values = getattr(inv, name)
        if len(values):
            cols[name] = _str_array(list(values))
    return pa.table(cols)


def write_inventory(inv: Inventory, path: PathLike) -> None:
    _write_table(inventory_table(inv), path)
