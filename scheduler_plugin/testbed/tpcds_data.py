"""TPC-DS data, Hive DDL and query text from DuckDB's ``dsdgen``, offline (the ``testbed`` extra).

Both testbeds use it: ``harvest testbed run`` and the ``docker/`` compose (``run-tpcds.sh``:
``python3 -m scheduler_plugin.testbed.tpcds_data --scale S --out DIR``).

DuckDB's own ``INSTALL tpcds`` downloads the extension; here it is loaded by file path from the
``duckdb-extension-tpcds`` wheel (same version as ``duckdb``) with unsigned extensions allowed, so
nothing leaves the machine.

``generate(scale, out)`` writes::

    out/data/<table>/<table>.dat    '|'-separated, no header, NULL as an empty field
                                     (the DDL sets serialization.null.format to '')
    out/ddl.sql                      CREATE EXTERNAL TABLE per table, LOCATION <hdfs_root>/<table>
    out/queries/query<N>.sql         the queries DuckDB ships (the TPC-DS templates, qualification
                                     values), in HiveQL (:func:`to_hiveql`)
    out/manifest.json                {"scale", "tables": {table: rows}, "queries": [N, ...], "duckdb"}

Hive's dialect differs from DuckDB's in a few places; :func:`to_hiveql` rewrites them (each rule is
listed in :data:`ADAPTATIONS` and counted per query by :func:`adapt`):

* ``"order count"`` (a double-quoted identifier) -> ```order count``` (Hive quotes identifiers with
  backticks; a double-quoted text is a string literal);
* the trailing ``;`` is dropped (a statement, not a script).

Not adapted: queries 70 and 86 use ``grouping(col)`` inside a window's ``PARTITION BY``, which Hive 4.1
rejects ("grouping() requires at least 2 argument"); they do not compile.

:func:`schema_ddl` gives the 24 tables alone (no data, no location), for compiling plans.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement_service import HarvestError
from placement_service.atomic import atomic_write_json, atomic_write_text

DUCKDB_VERSION = "1.5.5"


class TpcdsError(HarvestError):
    """The data could not be generated (missing extra, bad scale, bad query number)."""


def connect() -> Any:
    """A DuckDB connection with the TPC-DS extension loaded from the installed wheel (no download)."""
    try:
        import duckdb
        import duckdb_extension_tpcds
    except ImportError as exc:
        raise TpcdsError(f"TPC-DS data needs the 'testbed' extra ({exc.name} is missing): "
                         f"pip install 'harvest[testbed]'") from None
    found = sorted(Path(duckdb_extension_tpcds.__file__).parent.glob("extensions/*/tpcds.duckdb_extension"))
    if not found:
        raise TpcdsError(f"no tpcds.duckdb_extension in {Path(duckdb_extension_tpcds.__file__).parent}")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{found[-1]}'")
    con.execute("SET enable_progress_bar = false")
    return con


_TYPE_RE = re.compile(r"^(DECIMAL|NUMERIC)\((\d+),\s*(\d+)\)$|^(VARCHAR|CHAR|CHARACTER)(?:\((\d+)\))?$")
_SIMPLE = {"BIGINT": "bigint", "INTEGER": "int", "INT": "int", "SMALLINT": "smallint", "DATE": "date",
           "DOUBLE": "double", "FLOAT": "float", "REAL": "float", "BOOLEAN": "boolean", "TIMESTAMP": "timestamp"}


def hive_type(duck_type: str) -> str:
    """The Hive column type of a DuckDB column type (``DECIMAL(7,2)`` -> ``decimal(7,2)``, VARCHAR -> string)."""
    t = duck_type.strip().upper()
    if t in _SIMPLE:
        return _SIMPLE[t]
    m = _TYPE_RE.match(t)
    if m and m.group(1):
        return f"decimal({m.group(2)},{m.group(3)})"
    if m and m.group(4):
        return f"char({m.group(5)})" if m.group(4).startswith("CHAR") and m.group(5) else "string"
    raise TpcdsError(f"no Hive type for DuckDB column type {duck_type!r}")


def table_ddl(table: str, columns: list[tuple[str, str]], location: str) -> str:
    cols = ",\n".join(f"  `{name}` {hive_type(kind)}" for name, kind in columns)
    return (f"DROP TABLE IF EXISTS `{table}`;\nCREATE EXTERNAL TABLE `{table}` (\n{cols}\n)\n"
            f"ROW FORMAT DELIMITED FIELDS TERMINATED BY '|'\nSTORED AS TEXTFILE\nLOCATION '{location}/{table}'\n"
            f"TBLPROPERTIES ('serialization.null.format'='');\n")


@dataclass(frozen=True)
class Adaptation:
    name: str
    pattern: re.Pattern[str]
    replace: Callable[[re.Match[str]], str]


ADAPTATIONS: tuple[Adaptation, ...] = (
    Adaptation("double-quoted identifier to backticks", re.compile(r'"([^"\n]+)"'), lambda m: f"`{m.group(1)}`"),
)


def adapt(sql: str) -> tuple[str, dict[str, int]]:
    """(the HiveQL text, {adaptation name: times applied}) of one DuckDB TPC-DS query."""
    counts: dict[str, int] = {}
    text = sql.strip().rstrip(";").strip()
    for rule in ADAPTATIONS:
        text, n = rule.pattern.subn(rule.replace, text)
        if n:
            counts[rule.name] = n
    return text, counts


def to_hiveql(sql: str) -> str:
    return adapt(sql)[0]


def queries(con: Any) -> dict[int, str]:
    """Query number -> DuckDB's text (1..99), not adapted."""
    return {int(n): str(q) for n, q in con.execute("SELECT query_nr, query FROM tpcds_queries()").fetchall()}


def query_text(con: Any, number: int) -> str:
    """Query ``number`` in HiveQL, ending in ``;`` and a newline (a script of one statement)."""
    row = con.execute("SELECT query FROM tpcds_queries() WHERE query_nr = ?", [number]).fetchone()
    if row is None:
        raise TpcdsError(f"no TPC-DS query {number} (1..99)")
    return to_hiveql(str(row[0])) + ";\n"


def schema_ddl(con: Any) -> list[str]:
    """``CREATE TABLE IF NOT EXISTS <table> (...)`` (HiveQL) for the 24 TPC-DS tables, no data."""
    # Empty tables in a schema of their own, so that the connection's main schema stays free for data.
    con.execute("CREATE SCHEMA IF NOT EXISTS harvest_ddl")
    con.execute("CALL dsdgen(sf=0, schema='harvest_ddl')")
    rows = con.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                       "WHERE table_schema = 'harvest_ddl' ORDER BY table_name, ordinal_position").fetchall()
    tables: dict[str, list[str]] = {}
    for table, column, dtype in rows:
        tables.setdefault(str(table), []).append(f"  {column} {hive_type(str(dtype))}")
    return [f"CREATE TABLE IF NOT EXISTS {t} (\n" + ",\n".join(cols) + "\n)\n"
            "ROW FORMAT DELIMITED FIELDS TERMINATED BY '|'\nSTORED AS TEXTFILE" for t, cols in tables.items()]


def generate(scale: float, out: Path, *, hdfs_root: str = "/tpcds", queries: list[int] | None = None) -> dict[str, Any]:
    """Generate the data at ``scale`` into ``out`` (see the module doc); returns the manifest.

    Reuses ``out`` when its manifest has the same scale (the data is deterministic)."""
    if not (0 < scale <= 100):
        raise TpcdsError(f"--scale: expected 0 < scale <= 100, got {scale}")
    manifest_path = out / "manifest.json"
    numbers = sorted(set(queries)) if queries else list(range(1, 100))
    if manifest_path.exists():
        old = json.loads(manifest_path.read_text())
        if old.get("scale") == scale and set(numbers) <= set(old.get("queries", [])):
            return dict(old)
    con = connect()
    con.execute(f"CALL dsdgen(sf={float(scale)})")
    tables = [r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY table_name").fetchall()]
    rows: dict[str, int] = {}
    ddl = []
    for table in tables:
        columns = [(str(n), str(t)) for n, t in con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
            "ORDER BY ordinal_position", [table]).fetchall()]
        ddl.append(table_ddl(table, columns, hdfs_root.rstrip("/")))
        (out / "data" / table).mkdir(parents=True, exist_ok=True)
        target = out / "data" / table / f"{table}.dat"
        con.execute(f"COPY {table} TO '{target}' (DELIMITER '|', HEADER false, NULLSTR '')")
        count = con.execute(f"SELECT count(*) FROM {table}").fetchone()
        rows[table] = int(count[0]) if count else 0
    atomic_write_text(out / "ddl.sql", "\n".join(ddl))
    (out / "queries").mkdir(parents=True, exist_ok=True)
    for number in numbers:
        atomic_write_text(out / "queries" / f"query{number}.sql", query_text(con, number))
    import duckdb

    manifest = {"scale": scale, "tables": rows, "queries": numbers, "hdfs_root": hdfs_root,
                "duckdb": duckdb.__version__}
    atomic_write_json(manifest_path, manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scheduler_plugin.testbed.tpcds_data", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, required=True, help="TPC-DS scale factor (GB), e.g. 0.1")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--hdfs-root", default="/tpcds", help="HDFS directory of the tables (the DDL's LOCATION)")
    args = ap.parse_args(argv)
    try:
        manifest = generate(args.scale, args.out, hdfs_root=args.hdfs_root)
    except HarvestError as exc:
        print(f"tpcds_data: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
