"""TPC-DS in HiveQL: the schema and the 99 queries of DuckDB's ``tpcds`` extension, adapted to Hive.

DuckDB (``duckdb`` + ``duckdb-extension-tpcds`` from PyPI, loaded from the package's own
``.duckdb_extension`` file, so nothing is downloaded) gives the schema (``CALL dsdgen(sf=0)``) and the
query texts (``tpcds_queries()``). Hive's dialect differs in a few places; :func:`to_hiveql` rewrites
them (each rule is listed in :data:`ADAPTATIONS` and counted per query by :func:`adapt`):

* ``"order count"`` (a double-quoted identifier) -> ```order count``` (Hive quotes identifiers with
  backticks; a double-quoted text is a string literal);
* the trailing ``;`` is dropped (a statement, not a script).

Not adapted: queries 70 and 86 use ``grouping(col)`` inside a window's ``PARTITION BY``, which Hive 4.1
rejects ("grouping() requires at least 2 argument"); they do not compile.

Tables (:func:`schema_ddl`): ``INTEGER`` -> ``INT``, ``VARCHAR`` -> ``STRING``, other types as they are;
text files with ``|`` between fields (what ``dsdgen`` writes), so data can be loaded with ``LOAD DATA``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement_service import HarvestError


class TpcdsError(HarvestError):
    """DuckDB's TPC-DS extension could not be loaded."""


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


def connect() -> Any:
    """A DuckDB connection with the ``tpcds`` extension loaded from its PyPI package (offline)."""
    try:
        import duckdb
        import duckdb_extension_tpcds
    except ImportError as exc:
        raise TpcdsError(f"TPC-DS needs duckdb and duckdb-extension-tpcds (pip install ...==1.5.5): {exc}") from None
    found = sorted(Path(duckdb_extension_tpcds.__file__).parent.glob("**/*.duckdb_extension"))
    if not found:
        raise TpcdsError(f"no .duckdb_extension file in {Path(duckdb_extension_tpcds.__file__).parent}")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{found[-1]}'")
    return con


def queries(con: Any) -> dict[int, str]:
    """Query number -> DuckDB's text (1..99)."""
    return {int(n): str(q) for n, q in con.execute("SELECT query_nr, query FROM tpcds_queries()").fetchall()}


_HIVE_TYPE = {"INTEGER": "INT", "VARCHAR": "STRING"}


def schema_ddl(con: Any) -> list[str]:
    """``CREATE TABLE`` statements (HiveQL) for the 24 TPC-DS tables, from DuckDB's schema."""
    # Empty tables in a schema of their own, so that the connection's main schema stays free for data.
    con.execute("CREATE SCHEMA IF NOT EXISTS harvest_ddl")
    con.execute("CALL dsdgen(sf=0, schema='harvest_ddl')")
    rows = con.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                       "WHERE table_schema = 'harvest_ddl' ORDER BY table_name, ordinal_position").fetchall()
    tables: dict[str, list[str]] = {}
    for table, column, dtype in rows:
        tables.setdefault(str(table), []).append(f"  {column} {_HIVE_TYPE.get(str(dtype), str(dtype))}")
    return [f"CREATE TABLE IF NOT EXISTS {t} (\n" + ",\n".join(cols) + "\n)\n"
            "ROW FORMAT DELIMITED FIELDS TERMINATED BY '|'\nSTORED AS TEXTFILE" for t, cols in tables.items()]
