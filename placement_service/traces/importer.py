"""An operator's own monitoring exports -> the three trace files (``harvest import``).

Monitoring systems export per-server CPU in one of two layouts, as CSV or Parquet:

- **long**: one row per (time, server): ``timestamp, server, cpu[, tenant, memory]`` under any
  column names (mapped with ``--utilization-columns timestamp=ts,server=host,cpu=cpu_pct``);
- **wide**: a time column, then one column per server (the column name is the server).

What this module does that the strict loaders (:mod:`placement_service.traces.io`) refuse:

1. **Gaps stay gaps.** An empty cell (wide) or a row with an empty CPU value (long) is a missing
   sample, not an error: it is dropped and counted. An empty memory cell is a gap in memory only
   (the sample is kept). Tenant series keep long gaps as gaps
   (:func:`placement_service.traces.series.tenant_series`), so a multi-day outage never becomes a
   flat line. Servers may use different sampling intervals and start on different dates. Every
   dropped row is counted by reason in ``ImportReport.dropped`` (:data:`DROP_REASONS`).
2. **The real time is kept.** Timestamps are written as given (epoch seconds or ISO 8601, or
   epoch milliseconds with ``time_unit="ms"``); nothing is moved to a fixed start date. Times
   before 1990 or more than a day after now are refused unless ``allow_any_time``.
3. **CPU above 100%** (hyperthreading, burst credits): refused by default naming the row; with
   ``clip_cpu`` clipped to 100% and counted. The unit (fraction 0..1 or percent 0..100) of the
   CPU and of the memory column is given or decided per column from all its values
   (:func:`decide_unit`; an ambiguous column is refused naming rows), and the report says which.
4. **Inventories as event logs** (one row per change of a machine): ``event_log=True`` keeps the
   last row per server (by the mapped ``timestamp`` column when there is one, else file order).
   Missing inventory columns get stated defaults: ``environment`` = the tenant, ``rack`` =
   ``"unknown-rack"``, capacities from ``defaults`` (an error names the column when none is given).
5. **Reimage logs** are kept whole, whatever their span (the simulator decides how a log longer
   than the utilization window is used, and says so); events of servers outside the inventory
   are dropped and counted. With no log, :func:`synthetic_reimages` draws them from the
   generator's model over the utilization window, and the report says they are synthetic.

Everything is validated in memory with the same column checks as the strict loaders (errors name
the file, the 1-based data row and the column), then the files are written together atomically.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from placement_service.core.types import Inventory, ReimageEvents
from placement_service.csvsafe import unescape_table
from placement_service.traces import io
from placement_service.traces.columns import (
    TraceError,
    categorical,
    check_duplicates,
    check_one_tenant_per_server,
    check_unique_columns,
    file_kind,
    first_true,
    float_column,
    string_column,
    timestamp_s_column,
)
from placement_service.validate import short_join

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
DAY_S = 86400.0
UNKNOWN_RACK = "unknown-rack"
# ``auto`` unit of a CPU or memory column: percent when at least this share of its values is above 1
# and the largest above AUTO_PERCENT_MAX; fraction when none is above 1; anything else is refused.
AUTO_PERCENT_SHARE = 0.05
AUTO_PERCENT_MAX = 2.0
_SLACK = 1e-6  # producer rounding: values up to 1 + 1e-6 are fractions at 100%
MIN_TIME_S = 631_152_000.0  # 1990-01-01T00:00:00Z: earlier "real" times are offsets or unit mistakes
FUTURE_SLACK_S = DAY_S  # times may be up to a day after now (clock skew, time zones)
MAX_NAMED_ROWS = 5  # rows named per drop reason or ambiguity
DROP_REASONS = {
    "empty_cpu": "utilization samples with an empty CPU cell (missing samples: the series keeps the gap)",
    "server_not_in_inventory": "utilization samples of servers not in the inventory",
    "inventory_superseded": "inventory rows replaced by a later row of the same server (--inventory-event-log)",
    "reimage_server_not_in_inventory": "reimage events of servers not in the inventory",
    "reimage_duplicate": "reimage lines repeating an earlier (server, time)",
}
_CONTRACT = {
    "utilization": ("timestamp", "server", "cpu", "tenant", "memory"),
    "inventory": ("server", "tenant", "environment", "rack", "cores", "memory_mb", "storage_gb",
                  "hardware", "datacenter", "msb", "timestamp", "ip"),
    "reimages": ("timestamp", "server"),
}


@dataclass(frozen=True)
class ImportOptions:
    """How to read the user's files. Column maps are ``contract name -> the file's column name``."""

    layout: str = "auto"  # long | wide | auto (long when server/cpu are mapped or columns of those names exist)
    cpu_unit: str = "auto"  # fraction | percent | auto (the CPU column only)
    memory_unit: str = "auto"  # fraction | percent | auto (the memory column only)
    clip_cpu: bool = False
    allow_any_time: bool = False  # keep times before 1990 or more than a day after now
    now_s: float | None = None  # the clock of the "after now + 1 day" check (None: time.time())
    time_unit: str = "s"  # s | ms (numeric timestamps only)
    utilization_columns: Mapping[str, str] = field(default_factory=dict)
    inventory_columns: Mapping[str, str] = field(default_factory=dict)
    reimage_columns: Mapping[str, str] = field(default_factory=dict)
    inventory_event_log: bool = False
    offset_start_s: float = 0.0  # utilization times are offsets from this epoch time (0: absolute)
    defaults: Mapping[str, float] = field(default_factory=dict)  # cores, memory_mb, storage_gb


@dataclass
class ImportReport:
    """What the import did, for the command's summary (every adjustment is counted here)."""

    layout: str = ""
    cpu_unit: str = ""
    cpu_unit_evidence: str = ""
    memory_unit: str = ""
    memory_unit_evidence: str = ""
    samples: int = 0
    servers: int = 0
    tenants: int = 0
    empty_cells: int = 0  # empty CPU cells (missing samples)
    memory_gaps: int = 0  # samples kept with an empty memory cell (a gap in memory only)
    clipped: int = 0
    first_s: float = 0.0
    last_s: float = 0.0
    interval_s_by_server: dict[str, int] = field(default_factory=dict)  # median interval -> servers
    interval_s_per_server: dict[str, float] = field(default_factory=dict)  # server -> median interval
    window_by_tenant: dict[str, dict[str, float]] = field(default_factory=dict)  # first_s, last_s, days, samples
    common_window_s: tuple[float, float] | None = None  # when every tenant was observed (None: no such time)
    # Every dropped row, by reason (DROP_REASONS; 0 when none), with the first rows (or servers) named.
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    dropped_rows: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in DROP_REASONS})
    inventory_rows: int = 0
    inventory_servers: int = 0
    inventory_source: str = ""
    defaults_used: dict[str, str] = field(default_factory=dict)
    reimages: int = 0
    reimages_dropped_unknown: int = 0
    reimage_span_days: float = 0.0
    reimage_source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def parse_column_map(text: str | None, kind: str) -> dict[str, str]:
    """``'timestamp=ts,server=host'`` -> {contract name: file column}; unknown names are errors."""
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise TraceError(f"--{kind}-columns", f"expected NAME=COLUMN pairs separated by commas, got {part!r}")
        if key not in _CONTRACT[kind]:
            raise TraceError(f"--{kind}-columns", f"unknown name {key!r}; expected one of {', '.join(_CONTRACT[kind])}")
        out[key] = value
    return out


# ----------------------------------------------------------------------------------------------
# Reading any CSV / Parquet file whole
# ----------------------------------------------------------------------------------------------


def read_any(path: PathLike, text_columns: tuple[str, ...] = ()) -> pa.Table:
    """All columns of a CSV (optionally gzip) or Parquet file; ``text_columns`` are read as text."""
    p = Path(path)
    kind = file_kind(p)
    if not p.is_file():
        raise TraceError(p, "no such file" if not p.exists() else "not a regular file")
    try:
        if kind == "parquet":
            check_unique_columns(p, pq.read_schema(p).names)
            return pq.read_table(p)
        with pacsv.open_csv(p) as reader:
            names = reader.schema.names
        check_unique_columns(p, names)
        types = {c: pa.string() for c in text_columns if c in names}
        try:
            table = pacsv.read_csv(p, convert_options=pacsv.ConvertOptions(column_types=types))
        except pa.ArrowInvalid:
            # Inference failed on a later block: read all as text, let the column checks name the row.
            table = pacsv.read_csv(p, convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string())))
        return unescape_table(table)  # the project's CSV writers escape formula prefixes (csvsafe)
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(p, f"cannot read the {kind} file: {exc}") from None


def _renamed(path: PathLike, table: pa.Table, mapping: Mapping[str, str], required: tuple[str, ...]) -> pa.Table:
    """The table with mapped columns under their contract names; a missing mapped column is named."""
    names = table.column_names
    out: dict[str, pa.ChunkedArray] = {}
    for contract, source in mapping.items():
        if source not in names:
            raise TraceError(path, f"no column {source!r} (mapped to {contract!r}); the file has {short_join(names)}")
        out[contract] = table.column(source)
    for contract in names:
        if contract not in out and contract not in mapping.values():
            out[contract] = table.column(contract)
    missing = [c for c in required if c not in out]
    if missing:
        raise TraceError(
            path, f"missing column(s) {', '.join(map(repr, missing))}; map them with NAME=COLUMN "
            f"(the file has {short_join(names) or 'none'})",
        )
    return pa.table(out)


def _times(path: PathLike, table: pa.Table, time_unit: str) -> np.ndarray:
    ts = timestamp_s_column(path, table, "timestamp") if time_unit == "s" else None
    if ts is None:  # milliseconds: numbers only
        ts = float_column(path, table, "timestamp", "epoch milliseconds") / 1000.0
    return ts


def _numbers_with_gaps(path: PathLike, table: pa.Table, name: str) -> np.ndarray:
    """A numeric column as float64 with NaN for empty cells; text that is not a number is an error."""
    col = table.column(name)
    if pa.types.is_null(col.type):  # a column with no value at all (a server that never reported)
        return np.full(len(col), np.nan)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        stripped = pc.utf8_trim_whitespace(col)
        col = pc.if_else(pc.equal(pc.utf8_length(stripped), 0), pa.scalar(None, pa.string()), stripped)
    filled = pa.table({name: pc.fill_null(col, "0" if pa.types.is_string(col.type) else 0)})
    values = float_column(path, filled, name, "a number")
    nulls = np.asarray(pc.is_null(col).to_numpy(zero_copy_only=False), dtype=bool)
    values[nulls] = np.nan
    return values


# ----------------------------------------------------------------------------------------------
# Utilization
# ----------------------------------------------------------------------------------------------


def import_utilization(
    path: PathLike, opts: ImportOptions, report: ImportReport, tenant_of: Mapping[str, str] | None = None
) -> io.UtilizationSamples:
    """Read a long or wide utilization export into samples (fractions, real times, gaps dropped).

    Steps: 1. read and map the columns (duplicated names refused); 2. times in the plausible range;
    3. an empty CPU cell is a missing sample (dropped, counted, the first rows named), an empty
    memory cell a gap in the memory column only (the sample is kept); 4. CPU and memory units
    decided per column from all values (:func:`decide_unit`); 5. ranges; 6. tenants; 7. summary.
    """
    mapping = dict(opts.utilization_columns)
    table = read_any(path, text_columns=tuple(mapping.get(c, c) for c in ("server", "tenant")))
    layout = opts.layout
    if layout == "auto":
        names = table.column_names
        mapped_long = any(k in mapping for k in ("server", "cpu", "tenant", "memory"))
        layout = "long" if mapped_long or ("server" in names and "cpu" in names) else "wide"
    report.layout = layout
    if table.num_rows == 0:
        raise TraceError(path, "no data rows: expected at least one sample after the header")
    memory: np.ndarray | None
    if layout == "long":
        table = _renamed(path, table, mapping, ("timestamp", "server", "cpu"))
        ts = _times(path, table, opts.time_unit) + opts.offset_start_s
        check_time_range(path, ts, opts, column=mapping.get("timestamp", "timestamp"))
        server_names, server_codes = string_column(path, table, "server")
        cpu = _numbers_with_gaps(path, table, "cpu")
        memory = _numbers_with_gaps(path, table, "memory") if "memory" in table.column_names else None
        tenant = string_column(path, table, "tenant") if "tenant" in table.column_names else None
        rows = np.arange(len(ts)) + 1
        cpu_column = mapping.get("cpu", "cpu")
    else:
        time_col = mapping.get("timestamp", "timestamp" if "timestamp" in table.column_names else table.column_names[0])
        if time_col not in table.column_names:
            raise TraceError(path, f"no time column {time_col!r}; the file has {short_join(table.column_names)}")
        servers = [c for c in table.column_names if c != time_col]
        if not servers:
            raise TraceError(path, "wide layout: expected a time column and at least one server column")
        times = _times(path, pa.table({"timestamp": table.column(time_col)}), opts.time_unit) + opts.offset_start_s
        check_time_range(path, times, opts, column=time_col)
        cols = [_numbers_with_gaps(path, table, c) for c in servers]
        n = len(times)
        ts = np.tile(times, len(servers))
        cpu = np.concatenate(cols) if cols else np.empty(0)
        server_names = np.asarray(servers, dtype=object)
        server_codes = np.repeat(np.arange(len(servers), dtype=np.int32), n)
        memory, tenant = None, None
        rows = np.tile(np.arange(n) + 1, len(servers))
        cpu_column = None  # the column is the server's

    def where(i: int) -> str:
        """Sample i for a message: long ``row 17 (server 's1')``, wide ``row 17, column 's1'``."""
        server = str(server_names[server_codes[i]])
        return f"row {int(rows[i])}" + (f" (server {server!r})" if cpu_column else f", column {server!r}")

    def at(i: int, column: str | None = None) -> dict[str, Any]:
        """Sample i as TraceError's row and column."""
        return {"row": int(rows[i]), "column": column or cpu_column or str(server_names[server_codes[i]])}

    # 1. Gaps: an empty CPU cell is a missing sample; an empty memory cell is a gap in memory only.
    keep = np.isfinite(cpu)
    report.empty_cells = int((~keep).sum())
    report.dropped["empty_cpu"] = report.empty_cells
    report.dropped_rows["empty_cpu"] = [where(int(i)) for i in np.flatnonzero(~keep)[:MAX_NAMED_ROWS]]
    # 2. Units, decided per column from all its values; a unit flag never rescales another column.
    unit, report.cpu_unit_evidence = decide_unit(path, cpu, keep, opts.cpu_unit, "--cpu-unit", where, at)
    report.cpu_unit = unit
    scale = 100.0 if unit == "percent" else 1.0
    cpu = cpu / scale
    negative = keep & (cpu < 0)
    if negative.any():
        i = first_true(negative)
        raise TraceError(path, f"expected a CPU value >= 0, got {cpu[i] * scale:g}", **at(i))
    over = keep & (cpu > 1.0 + _SLACK)
    if over.any() and not opts.clip_cpu:
        i = first_true(over)
        raise TraceError(
            path, f"CPU {cpu[i] * scale:g} is above 100% ({unit}); pass --clip-cpu to clip such samples to 100% "
            f"(they are counted; {int(over.sum())} such samples)", **at(i),
        )
    report.clipped = int(over.sum())
    cpu = np.minimum(cpu, 1.0)
    if memory is not None:
        mem_column = mapping.get("memory", "memory")
        has_mem = keep & np.isfinite(memory)
        report.memory_gaps = int((keep & ~has_mem).sum())
        m_unit, report.memory_unit_evidence = decide_unit(
            path, memory, has_mem, opts.memory_unit, "--memory-unit", where, lambda i: at(i, mem_column))
        report.memory_unit = m_unit
        m_scale = 100.0 if m_unit == "percent" else 1.0
        memory = memory / m_scale
        bad = has_mem & ((memory < 0) | (memory > 1.0 + _SLACK))
        if bad.any():
            i = first_true(bad)
            raise TraceError(path, f"expected memory in [0, {m_scale:g}] ({m_unit}), got {memory[i] * m_scale:g}",
                             **at(i, mem_column))
        memory = np.where(has_mem, np.clip(memory, 0.0, 1.0), np.nan)
    ts, server_codes, cpu = ts[keep], server_codes[keep], cpu[keep]
    memory = memory[keep] if memory is not None else None
    if not len(ts):
        raise TraceError(path, "no samples: every CPU cell is empty")
    check_duplicates(path, server_codes, server_names, ts)
    # 3. Tenants: the file's column, else the inventory's, else each server is its own tenant.
    if tenant is not None:
        tenant_names, tenant_codes = tenant[0], tenant[1][keep]
        check_one_tenant_per_server(path, server_names, server_codes, tenant_names, tenant_codes)
        tenant_arr = categorical(tenant_names, tenant_codes)
    else:
        lookup = tenant_of or {}
        per_server = np.asarray([lookup.get(str(s), str(s)) for s in server_names], dtype=object)
        tenant_arr = per_server[server_codes]
    order = np.lexsort((ts, server_codes))
    samples = io.UtilizationSamples(
        timestamp_s=ts[order], server=categorical(server_names, server_codes[order]), tenant=tenant_arr[order],
        cpu=cpu[order], memory=memory[order] if memory is not None else None,
    )
    describe(samples, report)
    return samples


def decide_unit(
    path: PathLike, values: np.ndarray, seen: np.ndarray, given: str, flag: str,
    where: Callable[[int], str], at: Callable[[int], dict[str, Any]],
) -> tuple[str, str]:
    """(unit, why): ``fraction`` (0..1) or ``percent`` (0..100) for one column, from all its values.

    ``given`` other than ``auto`` wins. ``auto``: fraction when every value is at most 1; percent
    when at least ``AUTO_PERCENT_SHARE`` of the values are above 1 and the largest is above
    ``AUTO_PERCENT_MAX``; anything else (a few values above 1 in a column of fractions, or a
    column of percents of nearly idle servers) is ambiguous and refused, naming the rows.
    """
    idx = np.flatnonzero(seen)
    v = values[idx]
    if given != "auto":
        return given, f"given ({flag} {given})"
    over = v > 1.0 + _SLACK
    k, n = int(over.sum()), int(v.size)
    if k == 0:
        return "fraction", f"auto: all {n} values are in [0, 1]"
    share, top = k / n, float(v.max())
    if share >= AUTO_PERCENT_SHARE and top > AUTO_PERCENT_MAX:
        return "percent", f"auto: {k} of {n} values ({share:.0%}) are above 1, up to {top:g}"
    named = idx[over][:MAX_NAMED_ROWS]
    examples = "; ".join(f"{where(int(i))}: {values[i]:g}" for i in named)
    raise TraceError(
        path, f"{flag} auto cannot tell fractions from percent: {k} of {n} values ({share:.2%}) are above 1 "
        f"(up to {top:g}: {examples}{'; ...' if k > len(named) else ''}) and the rest are in [0, 1] "
        f"(auto reads percent only when at least {AUTO_PERCENT_SHARE:.0%} of the values are above 1 and one is "
        f"above {AUTO_PERCENT_MAX:g}); say which with {flag} fraction (values above 1 are then above 100%) or "
        f"{flag} percent", **at(int(named[0])),
    )


def check_time_range(path: PathLike, ts: np.ndarray, opts: ImportOptions, *, column: str,
                     rows: np.ndarray | None = None) -> None:
    """Sample and event times from 1990-01-01 to now + 1 day, unless ``opts.allow_any_time``."""
    if opts.allow_any_time or not len(ts):
        return
    now_s = time.time() if opts.now_s is None else opts.now_s
    hi = now_s + FUTURE_SLACK_S
    early, late = ts < MIN_TIME_S, ts > hi
    bad = early | late
    if not bad.any():
        return
    i = first_true(bad)
    row = int(rows[i]) if rows is not None else i + 1
    what = ("before 1990-01-01" if early[i] else f"more than a day after now ({_iso(now_s)})")
    hint = ("offsets from a start time? give --offset-start TIME; " if early[i] and opts.offset_start_s == 0.0
            else "") + ("milliseconds? --time-unit ms; " if opts.time_unit == "s" and late[i] else "")
    raise TraceError(
        path, f"time {_iso(float(ts[i]))} ({ts[i]:.0f}) is {what}: expected real times from 1990-01-01 to now + "
        f"1 day ({int(bad.sum())} of {len(ts)} times are outside; {hint}pass --allow-any-time to keep them)",
        row=row, column=column,
    )


def _iso(t: float) -> str:
    try:
        return f"{np.datetime64(int(t), 's')}Z"
    except (OverflowError, ValueError):
        return f"{t:g}"


def describe(samples: io.UtilizationSamples, report: ImportReport) -> None:
    """Counts, the time span, each server's median sampling interval, each tenant's window."""
    names, codes = samples.factorize("server")
    report.samples = len(samples)
    report.servers = len(names)
    report.tenants = len(samples.factorize("tenant")[0])
    report.first_s = float(samples.timestamp_s.min())
    report.last_s = float(samples.timestamp_s.max())
    # Median sampling interval per server (samples are sorted by server, then time).
    same = codes[1:] == codes[:-1]
    dt = np.diff(samples.timestamp_s)[same]
    per_server: dict[str, float] = {}
    if dt.size:
        who = codes[1:][same]
        order = np.argsort(who, kind="stable")
        bounds = np.flatnonzero(np.diff(who[order])) + 1
        for code, part in zip(who[order][np.r_[0, bounds]], np.split(dt[order], bounds), strict=True):
            per_server[str(names[code])] = float(np.median(part))
    by: dict[str, int] = {}
    for value in per_server.values():
        key = f"{value:g}"
        by[key] = by.get(key, 0) + 1
    report.interval_s_by_server = dict(sorted(by.items(), key=lambda kv: -kv[1]))
    report.interval_s_per_server = dict(sorted(per_server.items()))
    # Each tenant's observation window: its first and last sample, and how many samples.
    t_names, t_codes = samples.factorize("tenant")
    first = np.full(len(t_names), np.inf)
    last = np.full(len(t_names), -np.inf)
    np.minimum.at(first, t_codes, samples.timestamp_s)
    np.maximum.at(last, t_codes, samples.timestamp_s)
    count = np.bincount(t_codes, minlength=len(t_names))
    report.window_by_tenant = {
        str(t): {"first_s": float(first[k]), "last_s": float(last[k]), "days": float((last[k] - first[k]) / DAY_S),
                 "samples": int(count[k])}
        for k, t in enumerate(t_names)
    }
    report.common_window_s = ((float(first.max()), float(last.min())) if len(t_names) and first.max() <= last.min()
                              else None)


def keep_inventory_servers(samples: io.UtilizationSamples, inventory: Inventory,
                           report: ImportReport) -> io.UtilizationSamples:
    """The samples of the inventory's servers; the others are dropped and counted (servers named)."""
    names, codes = samples.factorize("server")
    known = np.isin(names.astype(str), np.asarray(inventory.server, dtype=str))
    keep = known[codes]
    dropped = int((~keep).sum())
    report.dropped["server_not_in_inventory"] = dropped
    report.dropped_rows["server_not_in_inventory"] = [
        f"server {str(s)!r}: {int(c)} samples" for s, c in
        zip(names[~known][:MAX_NAMED_ROWS], np.bincount(codes, minlength=len(names))[~known][:MAX_NAMED_ROWS],
            strict=True)
    ]
    if not dropped:
        return samples
    if not keep.any():
        raise TraceError("--inventory", "no server of the utilization file is in the inventory "
                         f"(e.g. {str(names[0])!r}); check --inventory-columns server=COLUMN")
    out = io.UtilizationSamples(
        timestamp_s=samples.timestamp_s[keep], server=categorical(names, codes[keep]),
        tenant=np.asarray(samples.tenant, dtype=object)[keep], cpu=samples.cpu[keep],
        memory=samples.memory[keep] if samples.memory is not None else None,
    )
    describe(out, report)
    return out


# ----------------------------------------------------------------------------------------------
# Inventory and reimages
# ----------------------------------------------------------------------------------------------


def import_inventory(path: PathLike, opts: ImportOptions, report: ImportReport) -> Inventory:
    """Read an inventory table or event log (last row per server) into an :class:`Inventory`."""
    table = _renamed(path, read_any(path, text_columns=tuple(opts.inventory_columns.get(c, c) for c in
                                                              ("server", "tenant", "environment", "rack"))),
                     opts.inventory_columns, ("server",))
    report.inventory_rows = table.num_rows
    if table.num_rows == 0:
        raise TraceError(path, "no servers: expected at least one data row")
    names, codes = string_column(path, table, "server")
    if opts.inventory_event_log:
        order = np.arange(len(codes))
        if "timestamp" in table.column_names:
            order = np.argsort(_times(path, table, opts.time_unit), kind="stable")
        last = np.full(len(names), -1, dtype=np.int64)
        last[codes[order]] = order  # later rows overwrite earlier ones
        superseded = np.ones(len(codes), dtype=bool)
        superseded[last] = False
        report.dropped["inventory_superseded"] = int(superseded.sum())
        report.dropped_rows["inventory_superseded"] = [
            f"row {int(i) + 1} (server {str(names[codes[i]])!r})" for i in np.flatnonzero(superseded)[:MAX_NAMED_ROWS]]
        table = table.take(pa.array(np.sort(last)))
        names, codes = string_column(path, table, "server")
    elif len(codes) != len(names):
        counts = np.bincount(codes)
        i = first_true(counts[codes] > 1)
        raise TraceError(path, f"server {str(names[codes[i]])!r} is listed more than once; pass "
                         "--inventory-event-log to keep the last row per server", row=i + 1, column="server")
    server = categorical(names, codes)
    n = len(server)
    tenant = _text(path, table, "tenant", server.astype(str), report)
    cols = {
        "environment": _text(path, table, "environment", tenant, report),
        "rack": _text(path, table, "rack", np.full(n, UNKNOWN_RACK, dtype=object), report),
    }
    numbers = {}
    for name in ("cores", "memory_mb", "storage_gb"):
        if name in table.column_names:
            values = float_column(path, table, name, "a non-negative number")
            if (values < 0).any():
                i = first_true(values < 0)
                raise TraceError(path, f"expected a non-negative number, got {values[i]:g}", row=i + 1, column=name)
        elif name in opts.defaults:
            values = np.full(n, float(opts.defaults[name]))
            report.defaults_used[name] = f"{opts.defaults[name]:g} (--default-{name.replace('_', '-')})"
        else:
            raise TraceError(path, f"no {name!r} column; map one with --inventory-columns {name}=COLUMN or "
                             f"give --default-{name.replace('_', '-')}")
        numbers[name] = values
    optional = {c: tuple(str(v) for v in _text(path, table, c, None, report)) if c in table.column_names else ()
                for c in ("hardware", "datacenter", "msb")}
    report.inventory_servers = n
    return Inventory(
        server=tuple(str(s) for s in server), tenant=tuple(str(t) for t in tenant),
        environment=tuple(str(e) for e in cols["environment"]), rack=tuple(str(r) for r in cols["rack"]),
        cores=numbers["cores"], memory_mb=numbers["memory_mb"], storage_gb=numbers["storage_gb"], **optional,
    )


def _text(path: PathLike, table: pa.Table, name: str, default: np.ndarray | None, report: ImportReport) -> np.ndarray:
    if name in table.column_names:
        return categorical(*string_column(path, table, name))
    assert default is not None
    report.defaults_used[name] = "the tenant" if name == "environment" else (
        "the server's name" if name == "tenant" else repr(default[0]) if len(default) else "-")
    return default


def inventory_from_samples(samples: io.UtilizationSamples, opts: ImportOptions, report: ImportReport) -> Inventory:
    """An inventory for the servers that report, when the user has none (capacities from defaults)."""
    names, codes = samples.factorize("server")
    first = np.full(len(names), -1, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes))[::-1]
    tenants = np.asarray(samples.tenant, dtype=object)[first]
    missing = [c for c in ("cores", "memory_mb", "storage_gb") if c not in opts.defaults]
    if missing:
        raise TraceError("--inventory", "no inventory file: give one, or --default-cores, --default-memory-mb and "
                         "--default-storage-gb for the servers of the utilization file")
    n = len(names)
    report.inventory_source = "built from the utilization file's servers with the default capacities"
    report.inventory_servers = n
    report.defaults_used.update({"environment": "the tenant", "rack": repr(UNKNOWN_RACK)})
    return Inventory(
        server=tuple(str(s) for s in names), tenant=tuple(str(t) for t in tenants),
        environment=tuple(str(t) for t in tenants), rack=(UNKNOWN_RACK,) * n,
        cores=np.full(n, float(opts.defaults["cores"])), memory_mb=np.full(n, float(opts.defaults["memory_mb"])),
        storage_gb=np.full(n, float(opts.defaults["storage_gb"])),
    )


def import_reimages(path: PathLike, opts: ImportOptions, inventory: Inventory, report: ImportReport) -> ReimageEvents:
    """A reimage (or repair) log, kept whole; events of servers not in the inventory are dropped."""
    table = _renamed(path, read_any(path, text_columns=(opts.reimage_columns.get("server", "server"),)),
                     opts.reimage_columns, ("timestamp", "server"))
    ts = _times(path, table, opts.time_unit)
    check_time_range(path, ts, opts, column=opts.reimage_columns.get("timestamp", "timestamp"))
    names, codes = string_column(path, table, "server")
    known = np.isin(names.astype(str), np.asarray(inventory.server, dtype=str))
    keep = known[codes]
    report.reimages_dropped_unknown = int((~keep).sum())
    report.dropped["reimage_server_not_in_inventory"] = report.reimages_dropped_unknown
    report.dropped_rows["reimage_server_not_in_inventory"] = [
        f"row {int(i) + 1} (server {str(names[codes[i]])!r})" for i in np.flatnonzero(~keep)[:MAX_NAMED_ROWS]]
    if report.reimages_dropped_unknown:
        logger.warning("%s: %d reimage events name servers not in the inventory; dropped",
                       path, report.reimages_dropped_unknown)
    file_rows = np.flatnonzero(keep)
    ts, codes = ts[keep], codes[keep]
    # The same server twice at one instant is one event (logs often repeat a line).
    order = np.lexsort((file_rows, ts, codes))
    dup = np.zeros(len(order), dtype=bool)
    dup[1:] = (codes[order][1:] == codes[order][:-1]) & (ts[order][1:] == ts[order][:-1])
    report.dropped["reimage_duplicate"] = int(dup.sum())
    report.dropped_rows["reimage_duplicate"] = [
        f"row {int(file_rows[i]) + 1} (server {str(names[codes[i]])!r})" for i in np.sort(order[dup])[:MAX_NAMED_ROWS]]
    order = order[~dup]
    order = order[np.argsort(ts[order], kind="stable")]
    events = ReimageEvents(timestamp_s=ts[order], server=tuple(str(s) for s in names[codes[order]]))
    report.reimages = len(events.server)
    report.reimage_span_days = float((ts.max() - ts.min()) / DAY_S) if len(ts) else 0.0
    report.reimage_source = f"{os.fspath(path)} (kept whole: {report.reimage_span_days:.1f} days)"
    return events


def synthetic_reimages(inventory: Inventory, *, start_s: float, days: float, seed: int,
                       report: ImportReport | None = None) -> ReimageEvents:
    """Reimages drawn from the generator's model (docs/generator.md) for a user's own inventory."""
    from placement_service.traces.fleet import generate_reimages

    events = generate_reimages(inventory, days=days, seed=seed, start_s=start_s)
    if report is not None:
        report.reimages = len(events.server)
        report.reimage_span_days = days
        report.reimage_source = (f"synthetic: the generator's reimage model over {days:g} days, seed {seed} "
                                 "(no reimage log was given)")
    return events


def write_import(out_dir: PathLike, samples: io.UtilizationSamples, inventory: Inventory, events: ReimageEvents,
                 *, fmt: str = "parquet") -> dict[str, Path]:
    """The three trace files, written together atomically (all or nothing)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise TraceError(out, "--out must be a directory")
    out.mkdir(parents=True, exist_ok=True)
    suffix = {"parquet": ".parquet", "csv": ".csv.gz"}[fmt]
    paths = {name: out / f"{name}{suffix}" for name in ("utilization", "reimages", "inventory")}
    io.write_tables([
        (io.utilization_table(samples), paths["utilization"]),
        (io.reimages_table(events), paths["reimages"]),
        (io.inventory_table(inventory), paths["inventory"]),
    ])
    return paths
