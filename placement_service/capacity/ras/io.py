"""Adapter: capacity files (inventory Parquet/CSV, reservations / assignment JSON, exports).

Every reader names the file, row and column of bad input; every writer writes a temporary file in
the target directory and renames it, so a failed run leaves nothing half-written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from placement_service.atomic import atomic_path
from placement_service.capacity import CapacityError
from placement_service.capacity.ras.domain import (
    ELASTIC_TENANT_PREFIX,
    SHARED_BUFFER_PREFIX,
    Method,
    Region,
    Request,
    Settings,
)
from placement_service.csvsafe import unescape_table, write_arrow_csv
from placement_service.validate import InputError, load_json_file, short_join, short_repr

REQUIRED_COLUMNS = ("server", "hardware", "datacenter", "msb", "rack", "available", "in_use")
OPTIONAL_COLUMNS = ("tenant", "environment", "cores", "memory_mb", "storage_gb", "cluster")
_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n", ""}


def read_table(path: str | Path) -> pa.Table:
    p = Path(path)
    if not p.exists():
        raise CapacityError(f"{p}: file not found")
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            return pq.read_table(p)
        return unescape_table(pacsv.read_csv(p, convert_options=pacsv.ConvertOptions(strings_can_be_null=False)))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CapacityError(f"{p}: cannot read as {'Parquet' if p.suffix == '.parquet' else 'CSV'}: {exc}") from None


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    s = str(value).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise CapacityError(f"{where}: expected true/false, got {value!r}")


def read_inventory(path: str | Path) -> Region:
    """Inventory with ``server, hardware, datacenter, msb, rack, available, in_use`` (+ optional)."""
    table = read_table(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise CapacityError(f"{path}: missing column(s) {missing}; found {short_join(table.column_names) or 'none'}")
    cols = {c: table.column(c).to_pylist() for c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS if c in table.column_names}
    n = table.num_rows
    seen: dict[str, int] = {}
    codes: dict[str, np.ndarray] = {}
    names: dict[str, tuple[str, ...]] = {}
    for c in ("server", "hardware", "datacenter", "msb", "rack"):
        for i, v in enumerate(cols[c]):
            if v is None or str(v).strip() == "":
                raise CapacityError(f"{path}: row {i + 2 if _is_csv(path) else i}: column '{c}' is empty")
    for i, s in enumerate(cols["server"]):
        s = str(s)
        if s in seen:
            raise CapacityError(f"{path}: row {_row(path, i)}: column 'server': {s!r} repeats row {_row(path, seen[s])}")
        seen[s] = i
    for c in ("hardware", "datacenter", "msb", "rack"):
        values = [str(v) for v in cols[c]]
        uniq = tuple(sorted(set(values)))
        lookup = {u: k for k, u in enumerate(uniq)}
        codes[c] = np.array([lookup[v] for v in values], dtype=np.int32)
        names[c] = uniq
    msb_dc: dict[int, int] = {}
    for i in range(n):
        m, d = int(codes["msb"][i]), int(codes["datacenter"][i])
        if msb_dc.setdefault(m, d) != d:
            raise CapacityError(
                f"{path}: row {_row(path, i)}: column 'datacenter': MSB {names['msb'][m]!r} is in datacenter "
                f"{names['datacenter'][msb_dc[m]]!r} on an earlier row, {names['datacenter'][d]!r} here"
            )
    flags = {
        c: np.array([_bool(v, f"{path}: row {_row(path, i)}: column '{c}'") for i, v in enumerate(cols[c])], dtype=bool)
        for c in ("available", "in_use")
    }
    extra: dict[str, tuple[object, ...]] = {}
    for c in OPTIONAL_COLUMNS:
        if c in cols:
            if c in ("cores", "memory_mb", "storage_gb"):
                extra[c] = tuple(_number(v, f"{path}: row {_row(path, i)}: column '{c}'") for i, v in enumerate(cols[c]))
            else:
                extra[c] = tuple(str(v) for v in cols[c])
    return Region(
        server=tuple(str(s) for s in cols["server"]), hardware=codes["hardware"], datacenter=codes["datacenter"],
        msb=codes["msb"], rack=codes["rack"], available=flags["available"], in_use=flags["in_use"],
        hardware_names=names["hardware"], datacenter_names=names["datacenter"], msb_names=names["msb"],
        rack_names=names["rack"], extra=extra,
    )  # fmt: skip


def _is_csv(path: str | Path) -> bool:
    return Path(path).suffix.lower() not in (".parquet", ".pq")


def _row(path: str | Path, i: int) -> int:
    """Human row number: CSV counts the header as line 1; Parquet rows are 0-based."""
    return i + 2 if _is_csv(path) else i


MAX_CAPACITY_RRU = 1e9  # largest request (RRU); a region of 10^6 servers of 1000 RRU each
MIN_SERVER_RRU = 1e-6  # smallest non-zero RRU of one server (smaller would ask for 10^15 servers)
MAX_SERVER_RRU = 1e6
MAX_PRIORITY = 2**31 - 1


def _number(v: Any, where: str, maximum: float = math.inf) -> float:
    if isinstance(v, bool):
        raise CapacityError(f"{where}: expected a number, got {v!r}")
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise CapacityError(f"{where}: expected a finite number, got {short_repr(v)}") from None
    if not math.isfinite(x) or x < 0 or x > maximum:
        bound = f" and <= {maximum:g}" if math.isfinite(maximum) else ""
        raise CapacityError(f"{where}: expected a finite number >= 0{bound}, got {short_repr(v)}")
    return x


def _server_rru(v: Any, where: str) -> float:
    x = _number(v, where, MAX_SERVER_RRU)
    if 0 < x < MIN_SERVER_RRU:
        raise CapacityError(f"{where}: one server's RRU must be 0 or >= {MIN_SERVER_RRU:g}, got {short_repr(v)}")
    return x


def load_json(path: str | Path) -> Any:
    p = Path(path)
    if not p.exists():
        raise CapacityError(f"{p}: file not found")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise CapacityError(f"{p}: key {k!r} appears twice in one object")
            out[k] = v
        return out

    try:
        doc = load_json_file(p, "JSON input", object_pairs_hook=no_duplicates)
    except InputError as exc:
        raise CapacityError(str(exc)) from None
    if not isinstance(doc, dict):  # requests, plans and assignments are all JSON objects
        raise CapacityError(f"{p}: expected a JSON object, got {type(doc).__name__}")
    return doc


def parse_settings(raw: Mapping[str, Any] | None, where: str) -> Settings:
    if raw is None:
        return Settings()
    if not isinstance(raw, Mapping):
        raise CapacityError(f"{where}: 'settings' must be an object")
    known = {f.name: f for f in fields(Settings)}
    kwargs: dict[str, Any] = {}
    for k, v in raw.items():
        if k not in known:
            raise CapacityError(f"{where}: settings.{k}: unknown setting (known: {sorted(known)})")
        default = getattr(Settings(), k)
        try:
            if k == "method":
                kwargs[k] = Method(v)
            elif v is None:
                kwargs[k] = None
            elif isinstance(default, bool):
                kwargs[k] = _bool(v, f"{where}: settings.{k}")
            elif isinstance(default, int):
                kwargs[k] = int(v)
            else:
                kwargs[k] = float(v)
        except (TypeError, ValueError):
            raise CapacityError(f"{where}: settings.{k}: bad value {v!r}") from None
    s = Settings(**kwargs)
    for name in ("random_failure_buffer", "affinity_tolerance", "rack_spread_limit", "rack_phase_share"):
        if not 0 <= getattr(s, name) <= 1:
            raise CapacityError(f"{where}: settings.{name} must be within 0..1, got {getattr(s, name)}")
    if s.time_limit_s <= 0:
        raise CapacityError(f"{where}: settings.time_limit_s must be > 0")
    return s


def parse_requests(doc: Any, where: str) -> tuple[tuple[Request, ...], Settings]:
    """The ``R.json`` contract: ``{"reservations": [...], "settings": {...}}``."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("reservations"), list):
        raise CapacityError(f"{where}: expected an object with a 'reservations' list")
    out: list[Request] = []
    ids: set[str] = set()
    for i, r in enumerate(doc["reservations"]):
        at = f"{where}: reservations[{i}]"
        if not isinstance(r, Mapping):
            raise CapacityError(f"{at}: must be an object")
        rid = r.get("id")
        if (not isinstance(rid, str) or not rid or len(rid) > 253 or not rid.isprintable()
                or rid.startswith((SHARED_BUFFER_PREFIX, ELASTIC_TENANT_PREFIX))):
            raise CapacityError(f"{at}: 'id' must be a printable string of 1..253 characters not starting with "
                                f"{SHARED_BUFFER_PREFIX}/{ELASTIC_TENANT_PREFIX}, got {short_repr(rid)}")
        if rid in ids:
            raise CapacityError(f"{at}: id {rid!r} is used twice")
        ids.add(rid)
        at = f"{where}: reservation {rid!r}"
        cap = _number(r.get("capacity_rru"), f"{at}: capacity_rru", MAX_CAPACITY_RRU)
        rru = r.get("rru")
        if not isinstance(rru, Mapping) or not rru:
            raise CapacityError(f"{at}: 'rru' must be a non-empty object {{hardware: RRU of one server}}")
        rru_f = {str(h): _server_rru(v, f"{at}: rru[{h!r}]") for h, v in rru.items()}
        aff = r.get("datacenter_affinity")
        aff_f = None
        if aff is not None:
            if not isinstance(aff, Mapping) or not aff:
                raise CapacityError(f"{at}: 'datacenter_affinity' must be null or a non-empty {{datacenter: share}}")
            aff_f = {str(d): _number(s, f"{at}: datacenter_affinity[{d!r}]") for d, s in aff.items()}
        limits = {}
        for k in ("msb_spread_limit", "rack_spread_limit"):
            if r.get(k) is not None:
                limits[k] = _number(r[k], f"{at}: {k}")
        prio = r.get("priority", 0)
        if isinstance(prio, bool) or not isinstance(prio, int) or abs(prio) > MAX_PRIORITY:
            raise CapacityError(f"{at}: 'priority' must be an integer of at most {MAX_PRIORITY} in magnitude "
                                f"(higher is served first), got {short_repr(prio)}")
        out.append(Request(id=rid, capacity_rru=cap, rru=rru_f, datacenter_affinity=aff_f, priority=prio, **limits))
    return tuple(out), parse_settings(doc.get("settings"), where)


def read_requests(path: str | Path) -> tuple[tuple[Request, ...], Settings]:
    return parse_requests(load_json(path), str(path))


def requests_to_json(requests: Sequence[Request], settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "reservations": [
            {"id": r.id, "capacity_rru": r.capacity_rru, "rru": dict(r.rru),
             "datacenter_affinity": dict(r.datacenter_affinity) if r.datacenter_affinity else None,
             **({"priority": r.priority} if r.priority else {})}
            for r in requests
        ],  # fmt: skip
        "settings": dict(settings or {}),
    }


def read_assignment(path: str | Path, region: Region | None = None) -> dict[str, str | None]:
    """``{"assignment": {server: entity | null}}`` (an ``A.json``); servers not in the region are dropped."""
    doc = load_json(path)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("assignment"), Mapping):
        raise CapacityError(f"{path}: expected an object with an 'assignment' object {{server: id|null}}")
    out: dict[str, str | None] = {}
    for s, e in doc["assignment"].items():
        if e is not None and not isinstance(e, str):
            raise CapacityError(f"{path}: assignment[{s!r}]: expected a reservation id or null, got {e!r}")
        out[str(s)] = e
    if region is not None:
        known = set(region.server)
        out = {s: e for s, e in out.items() if s in known}
    return out


def atomic_write(path: str | Path, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` then rename onto ``path`` (same directory, so the rename is atomic)."""
    with atomic_path(path, suffix=Path(path).suffix) as tmp:
        write(tmp)


def write_json(path: str | Path, doc: Any) -> None:
    def w(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=False)
            f.write("\n")

    atomic_write(path, w)


def write_table(path: str | Path, columns: Mapping[str, Sequence[Any]]) -> None:
    table = pa.table({k: list(v) for k, v in columns.items()})

    def w(tmp: str) -> None:
        if Path(path).suffix.lower() in (".parquet", ".pq"):
            pq.write_table(table, tmp)
        else:
            write_arrow_csv(table, tmp)  # formula prefixes escaped (placement_service/csvsafe.py)

    atomic_write(path, w)


def region_columns(region: Region) -> dict[str, list[Any]]:
    """The inventory contract's columns of ``region`` (for ``harvest ras generate``)."""
    cols: dict[str, list[Any]] = {
        "server": list(region.server),
        "hardware": [region.hardware_names[i] for i in region.hardware],
        "datacenter": [region.datacenter_names[i] for i in region.datacenter],
        "msb": [region.msb_names[i] for i in region.msb],
        "rack": [region.rack_names[i] for i in region.rack],
        "available": region.available.astype(bool).tolist(),
        "in_use": region.in_use.astype(bool).tolist(),
    }
    for k, v in region.extra.items():
        cols[k] = list(v)
    return cols
