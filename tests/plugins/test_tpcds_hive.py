"""DuckDB's TPC-DS texts -> HiveQL (scheduler_plugin/testbed/tpcds_hive.py)."""

from __future__ import annotations

import pytest

from scheduler_plugin.testbed import tpcds_hive


def test_double_quoted_identifiers_become_backticks_and_the_semicolon_goes() -> None:
    text, counts = tpcds_hive.adapt('SELECT count(DISTINCT cs_order_number) AS "order count"\nFROM t\nLIMIT 100;\n')
    assert text == "SELECT count(DISTINCT cs_order_number) AS `order count`\nFROM t\nLIMIT 100"
    assert counts == {"double-quoted identifier to backticks": 1}


def test_single_quoted_literals_are_left_alone() -> None:
    sql = "SELECT * FROM s WHERE s_state = 'TN' AND d_date BETWEEN cast('2000-01-27' AS date) AND x"
    assert tpcds_hive.adapt(sql) == (sql, {})


def test_the_schema_has_the_24_tables_in_hive_types() -> None:
    pytest.importorskip("duckdb_extension_tpcds")
    con = tpcds_hive.connect()
    ddl = tpcds_hive.schema_ddl(con)
    assert len(ddl) == 24
    store_sales = next(d for d in ddl if d.split()[5] == "store_sales")
    assert "ss_sold_date_sk BIGINT" in store_sales and "VARCHAR" not in store_sales and "INTEGER" not in store_sales
    assert len(tpcds_hive.queries(con)) == 99
    assert con.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main'").fetchone() == (0,)
