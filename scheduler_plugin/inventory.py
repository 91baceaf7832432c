"""Read the server inventory columns the plugins need (server, tenant, rack, datacenter, ip).

The inventory contract (``docs/contracts.md``) has more columns; the plugins only need who owns a
server and where it sits. CSV is read with the standard library, Parquet with pyarrow (imported
only then). Errors name the file, the row and the column.
"""

from __future__ import annotations

import csv
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from placement_service import HarvestError
from placement_service.csvsafe import unescape_text
from placement_service.validate import short_join


class InventoryError(HarvestError):
    """The inventory file is missing, unreadable or lacks a required column or value."""


@dataclass(frozen=True)
class ServerRow:
    server: str
    tenant: str
    rack: str = ""
    datacenter: str = ""
    ip: str = ""  # optional ``ip`` column: the address the server's DataNode registers with


def _rows_from_parquet(path: Path) -> list[dict[str, str]]:
    import pyarrow.parquet as pq  # lazy: only Parquet inventories need it

    table = pq.read_table(path)
    cols = {name: [("" if v is None else str(v)) for v in table.column(name).to_pylist()] for name in table.column_names}
    return [{name: cols[name][i] for name in cols} for i in range(table.num_rows)]


def read_servers(path: str | Path, require_rack: bool = False, require_tenant: bool = True) -> list[ServerRow]:
    """Rows of ``path`` (CSV or Parquet) with at least a ``server`` column, ``tenant`` unless
    ``require_tenant`` is false (the topology map needs only where a server sits) and ``rack`` if
    ``require_rack``."""
    p = Path(path)
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            records = _rows_from_parquet(p)
            header = list(records[0]) if records else []
        else:
            with p.open(newline="", encoding="utf-8") as handle:
                reader = csv.DictReader(handle)
                # the project's CSV writers escape formula prefixes (placement_service/csvsafe.py)
                header = [unescape_text(h) for h in reader.fieldnames or []]
                records = [{(unescape_text(k) if isinstance(k, str) else k): (unescape_text(v) if isinstance(v, str)
                                                                                else v) for k, v in r.items()}
                           for r in reader]
    except OSError as exc:
        raise InventoryError(f"{p}: cannot read inventory: {exc}") from None
    except (csv.Error, ValueError) as exc:  # not CSV / Parquet, not UTF-8, a field beyond the csv limit
        raise InventoryError(f"{p}: not a readable inventory (CSV or Parquet): {exc}") from None
    needed = ["server"] + (["tenant"] if require_tenant else []) + (["rack"] if require_rack else [])
    missing = [c for c in needed if c not in header]
    if missing:
        raise InventoryError(f"{p}: missing column(s) {', '.join(missing)} (found: {short_join(header) or 'none'})")
    rows: list[ServerRow] = []
    seen: dict[str, int] = {}
    for i, rec in enumerate(records, start=2):  # row 1 is the header
        server = (rec.get("server") or "").strip()
        tenant = (rec.get("tenant") or "").strip()
        rack = (rec.get("rack") or "").strip()
        if not server:
            raise InventoryError(f"{p}: row {i}: column 'server' is empty")
        if require_tenant and not tenant:
            raise InventoryError(f"{p}: row {i}: column 'tenant' is empty for server {server!r}")
        if require_rack and not rack:
            raise InventoryError(f"{p}: row {i}: column 'rack' is empty for server {server!r}")
        if server in seen:
            raise InventoryError(f"{p}: row {i}: server {server!r} already listed on row {seen[server]}")
        seen[server] = i
        ip = (rec.get("ip") or "").strip()
        if ip:
            try:
                ip = str(ipaddress.ip_address(ip))
            except ValueError:
                raise InventoryError(f"{p}: row {i}: column 'ip' is not an IP address for server {server!r}: "
                                     f"{ip!r}") from None
        rows.append(ServerRow(server, tenant, rack, (rec.get("datacenter") or "").strip(), ip))
    if not rows:
        raise InventoryError(f"{p}: the inventory has no servers")
    return rows
