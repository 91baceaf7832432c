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
_ZONE_SUFFIX = r"(Z|z|[+-]\d\d(:?\d\d)?)$"


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

    ``server`` / ``tenant`` / ``environment`` are numpy unicode arrays; ``cpu`` and ``memory`` are
    float64 fractions (0..1). ``memory`` and ``environment`` are None when the file has no such
    column. Rows keep the file order.
    """

    timestamp_s: np.ndarray
    server: np.ndarray
    tenant: np.ndarray
    cpu: np.ndarray
    memory: np.ndarray | None = None
    environment: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.timestamp_s.shape[0])


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
    """Epoch seconds (float64) from numbers, Arrow timestamps or ISO 8601 strings (naive = UTC)."""
    col = table.column(name)
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
    numeric_ok = _first_failing(col, lambda c: pc.cast(c, pa.float64())) is None
    if numeric_ok:
        return _float_column(path, pa.table({name: col}), name, what)
    def convert(c: pa.ChunkedArray) -> np.ndarray:
        z = pc.match_substring_regex(c, _ZONE_SUFFIX)
        out = np.empty(len(c), dtype=np.float64)
        zmask = np.asarray(z.to_numpy(zero_copy_only=False), dtype=bool)
        if zmask.any():
            out[zmask] = _arrow_time_to_s(pc.cast(pc.filter(c, z), pa.timestamp("us", tz="UTC")))
        if not zmask.all():
            out[~zmask] = _arrow_time_to_s(pc.cast(pc.filter(c, pc.invert(z)), pa.timestamp("us")))
        return out

    bad = _first_failing(col, convert)
    if bad is not None:
        raise TraceError(path, f"expected {what}, got {_value(col, bad)}", row=bad + 1, column=name)
    return convert(col)


def _arrow_time_to_s(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if pa.types.is_date(col.type):
        col = pc.cast(col, pa.timestamp("s"))
    tz = col.type.tz
    us = pc.cast(pc.cast(col, pa.timestamp("us", tz=tz)), pa.int64())
    return np.asarray(us.to_numpy(), dtype=np.float64) / 1e6


def _string_column(path: PathLike, table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(names, codes): the distinct non-empty values and each row's index into them."""
    col = table.column(name)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        col = pc.cast(col, pa.string())  # dictionary-encoded text, or numbers used as names
    if col.null_count:
        i = _first_true(pc.is_null(col))
        raise TraceError(path, "expected a non-empty name, got an empty value", row=i + 1, column=name)
    empty = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(col)), 0)
    if pc.any(empty).as_py():
        i = _first_true(empty)
        raise TraceError(path, "expected a non-empty name, got an empty value", row=i + 1, column=name)
    enc = pc.dictionary_encode(col.combine_chunks())
    names = np.asarray(enc.dictionary.to_numpy(zero_copy_only=False).astype(str))
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return names, codes


def _strings(path: PathLike, table: pa.Table, name: str) -> np.ndarray:
    names, codes = _string_column(path, table, name)
    return names[codes] if len(names) else np.empty(0, dtype=str)


def _check_duplicates(path: PathLike, codes: np.ndarray, names: np.ndarray, ts: np.ndarray) -> None:
    """Reject two rows with the same (server, timestamp); names the later row and the earlier one."""
    if len(ts) < 2:
        return
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
    ts = _timestamp_s(path, table)
    server_names, server_codes = _string_column(path, table, "server")
    tenant = _strings(path, table, "tenant")
    cpu = _fraction_column(path, table, "cpu", percent=cpu_percent)
    memory = (
        _fraction_column(path, table, "memory", percent=cpu_percent)
        if "memory" in table.column_names
        else None
    )
    environment = _strings(path, table, "environment") if "environment" in table.column_names else None
    _check_known(path, server_names, server_codes, known_servers)
    _check_duplicates(path, server_codes, server_names, ts)
    _check_one_tenant_per_server(path, server_names, server_codes, tenant)
    logger.info("%s: %d samples, %d servers", path, len(ts), len(server_names))
    return UtilizationSamples(
        timestamp_s=ts,
        server=server_names[server_codes] if len(server_names) else np.empty(0, dtype=str),
        tenant=tenant,
        cpu=cpu,
        memory=memory,
        environment=environment,
    )


def _check_one_tenant_per_server(
    path: PathLike, server_names: np.ndarray, server_codes: np.ndarray, tenant: np.ndarray
) -> None:
    """A server belongs to exactly one tenant over the whole file."""
    if len(tenant) == 0:
        return
    t_names, t_codes = np.unique(tenant, return_inverse=True)
    first_tenant = np.full(len(server_names), -1, dtype=np.int64)
    # The first row of each server fixes its tenant; rows disagreeing with it are errors.
    first_row = np.full(len(server_names), len(tenant), dtype=np.int64)
    np.minimum.at(first_row, server_codes, np.arange(len(tenant)))
    first_tenant = t_codes[first_row]
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
    servers = names[codes[order]] if len(names) else np.empty(0, dtype=str)
    return ReimageEvents(timestamp_s=ts[order], server=tuple(servers.tolist()))


def load_inventory(path: PathLike) -> Inventory:
    """Read and validate the inventory: one row per server, unique names, non-negative capacities."""
    table = _read_table(path, INVENTORY_COLUMNS, INVENTORY_OPTIONAL)
    server_names, server_codes = _string_column(path, table, "server")
    counts = np.bincount(server_codes, minlength=len(server_names))
    if (counts > 1).any():
        # First row whose server already appeared: with codes in first-seen order, a row is a repeat
        # when its code is not larger than the running maximum code before it.
        running = np.maximum.accumulate(np.concatenate([[-1], server_codes[:-1]]))
        repeat = server_codes <= running
        i = _first_true(repeat)
        first = int(np.argmax(server_codes == server_codes[i]))
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
        server=tuple(server_names[server_codes].tolist()),
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


def _write_table(table: pa.Table, path: PathLike) -> None:
    """Write ``table`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    p = Path(path)
    kind = _kind(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    try:
        if kind == "parquet":
            pq.write_table(table, tmp, compression="zstd")
        else:
            compression = "gzip" if p.name.lower().endswith(".gz") else None
            with pa.output_stream(tmp, compression=compression) as out:
                pacsv.write_csv(table, out)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _str_array(values: Sequence[str] | np.ndarray) -> pa.Array:
    return pa.array(np.asarray(values, dtype=str).tolist() if not isinstance(values, np.ndarray) else values)


def utilization_table(samples: UtilizationSamples) -> pa.Table:
    cols: dict[str, pa.Array] = {
        "timestamp": _time_array(samples.timestamp_s),
        "server": _str_array(samples.server),
        "tenant": _str_array(samples.tenant),
        "cpu": pa.array(np.asarray(samples.cpu, dtype=np.float64)),
    }
    if samples.memory is not None:
        cols["memory"] = pa.array(np.asarray(samples.memory, dtype=np.float64))
    if samples.environment is not None:
        cols["environment"] = _str_array(samples.environment)
    return pa.table(cols)


def write_utilization(samples: UtilizationSamples, path: PathLike) -> None:
    """Write samples (Parquet or CSV by extension) atomically; integral times are written as ints."""
    _write_table(utilization_table(samples), path)


def write_reimages(events: ReimageEvents, path: PathLike) -> None:
    _write_table(
        pa.table({"timestamp": _time_array(events.timestamp_s), "server": _str_array(list(events.server))}),
        path,
    )


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
