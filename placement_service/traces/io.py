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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from placement_service.core.types import Inventory, ReimageEvents
from placement_service.csvsafe import write_arrow_csv
from placement_service.traces.columns import (
    TraceError,
    categorical,
    check_duplicates,
    check_inventory_tenants,
    check_known,
    check_one_tenant_per_server,
    file_kind,
    first_true,
    float_column,
    fraction_column,
    read_table,
    sorted_codes,
    string_column,
    strings,
    timestamp_s_column,
)

__all__ = [
    "TraceError",
    "UtilizationSamples",
    "categorical",
    "load_inventory",
    "load_reimages",
    "load_utilization",
    "write_inventory",
    "write_reimages",
    "write_tables",
    "write_utilization",
]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

UTILIZATION_COLUMNS = ("timestamp", "server", "tenant", "cpu")
UTILIZATION_OPTIONAL = ("memory", "environment")
REIMAGE_COLUMNS = ("timestamp", "server")
INVENTORY_COLUMNS = ("server", "tenant", "environment", "rack", "cores", "memory_mb", "storage_gb")
INVENTORY_OPTIONAL = ("hardware", "datacenter", "msb")


@dataclass(frozen=True)
class UtilizationSamples:
    """Utilization samples, column-wise: row i is server ``server[i]`` at ``timestamp_s[i]``.

    ``server`` / ``tenant`` / ``environment`` are numpy arrays of ``str`` (dtype object when read or
    generated: each row points at one shared string per distinct name, 8 bytes a row instead of 4
    bytes per character); ``cpu`` and ``memory`` are float64 fractions (0..1). ``memory`` and
    ``environment`` are None when the file has no such column; a NaN ``memory`` is a gap (an empty cell:
the sample's CPU is known, its memory is not). Rows keep the file order.
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
            cached = sorted_codes(
                np.asarray(enc.dictionary.to_numpy(zero_copy_only=False), dtype=object),
                np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64),
            )
            self.__dict__[key] = cached
        return cached

    def with_factorized(self, column: str, names: np.ndarray, codes: np.ndarray) -> UtilizationSamples:
        """Record a known factorization of ``column`` (names need not be sorted); returns self."""
        self.__dict__[f"_factorized_{column}"] = sorted_codes(names, codes)
        return self


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------


def load_utilization(
    path: PathLike,
    *,
    cpu_percent: bool = False,
    known_servers: Iterable[str] | None = None,
    inventory: Inventory | None = None,
    optional_columns: bool = True,
) -> UtilizationSamples:
    """Read and validate utilization samples (see the module docstring for the columns).

    ``optional_columns=False`` skips ``memory`` and ``environment`` even when the file has them
    (what tenant series and clustering need: ~20 bytes a row less).

    ``cpu_percent``: the file's ``cpu`` (and ``memory``) columns hold 0..100; they are divided by
    100. ``known_servers``: when given (e.g. the inventory's servers), a sample of any other server
    is an error. ``inventory``: implies ``known_servers`` and also requires each sample's tenant to
    be its server's tenant in the inventory.
    """
    if inventory is not None and known_servers is None:
        known_servers = inventory.server
    table = read_table(path, UTILIZATION_COLUMNS, UTILIZATION_OPTIONAL if optional_columns else ())
    if table.num_rows == 0:
        raise TraceError(path, "no samples: expected at least one data row")
    # Convert column by column, dropping each Arrow column once converted (lower peak memory).
    ts = timestamp_s_column(path, table)
    table = table.drop_columns(["timestamp"])
    server_names, server_codes = string_column(path, table, "server")
    table = table.drop_columns(["server"])
    tenant_names, tenant_codes = string_column(path, table, "tenant")
    table = table.drop_columns(["tenant"])
    cpu = fraction_column(path, table, "cpu", percent=cpu_percent)
    table = table.drop_columns(["cpu"])
    memory = None
    if "memory" in table.column_names:
        memory = fraction_column(path, table, "memory", percent=cpu_percent, gaps=True)  # empty: a gap (NaN)
        table = table.drop_columns(["memory"])
    env: tuple[np.ndarray, np.ndarray] | None = None
    if "environment" in table.column_names:
        env = string_column(path, table, "environment")
    del table
    # Arrow's allocator keeps freed pages for reuse; hand them back now that the table is gone
    # (on a 42M-row month this returns ~1.5 GB to the system).
    pa.default_memory_pool().release_unused()
    check_known(path, server_names, server_codes, known_servers)
    check_duplicates(path, server_codes, server_names, ts)
    check_one_tenant_per_server(path, server_names, server_codes, tenant_names, tenant_codes)
    if inventory is not None:
        check_inventory_tenants(path, server_names, server_codes, tenant_names, tenant_codes, inventory)
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


def load_reimages(path: PathLike, *, known_servers: Iterable[str] | None = None) -> ReimageEvents:
    """Read and validate reimage events; the result is sorted by time (stable)."""
    table = read_table(path, REIMAGE_COLUMNS)
    ts = timestamp_s_column(path, table)
    names, codes = string_column(path, table, "server")
    check_known(path, names, codes, known_servers)
    check_duplicates(path, codes, names, ts)
    order = np.argsort(ts, kind="stable")
    return ReimageEvents(timestamp_s=ts[order], server=tuple(categorical(names, codes[order]).tolist()))


def load_inventory(path: PathLike) -> Inventory:
    """Read and validate the inventory: one row per server, unique names, non-negative capacities."""
    table = read_table(path, INVENTORY_COLUMNS, INVENTORY_OPTIONAL)
    if table.num_rows == 0:
        raise TraceError(path, "no servers: expected at least one data row")
    server_names, server_codes = string_column(path, table, "server")
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
        values = float_column(path, table, name, "a non-negative number")
        if (values < 0).any():
            i = first_true(values < 0)
            raise TraceError(path, f"expected a non-negative number, got {values[i]:g}", row=i + 1, column=name)
        numbers[name] = values
    cols = {c: tuple(strings(path, table, c).tolist()) for c in ("tenant", "environment", "rack")}
    optional = {
        c: tuple(strings(path, table, c).tolist()) if c in table.column_names else ()
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
    kind = file_kind(p)
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
                write_arrow_csv(plain, out)  # formula prefixes escaped (placement_service/csvsafe.py)
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
        cols["memory"] = pa.array(np.asarray(samples.memory, dtype=np.float64), from_pandas=True)  # NaN: empty
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
