"""DuckDB's TPC-DS texts -> HiveQL (scheduler_plugin/testbed/tpcds_data.py)."""

from __future__ import annotations

from scheduler_plugin.testbed import tpcds_data


def test_double_quoted_identifiers_become_backticks_and_the_semicolon_goes() -> None:
    text, counts = tpcds_data.adapt('SELECT count(DISTINCT cs_order_number) AS "order count"\nFROM t\nLIMIT 100;\n')
    assert text == "SELECT count(DISTINCT cs_order_number) AS `order count`\nFROM t\nLIMIT 100"
    assert counts == {"double-quoted identifier to backticks": 1}


def test_single_quoted_literals_are_left_alone() -> None:
    sql = "SELECT * FROM s WHERE s_state = 'TN' AND d_date BETWEEN cast('2000-01-27' AS date) AND x"
    assert tpcds_data.adapt(sql) == (sql, {})


def test_the_schema_has_the_24_tables_in_hive_types() -> None:
    con = tpcds_data.connect()
    ddl = tpcds_data.schema_ddl(con)
    assert len(ddl) == 24
    store_sales = next(d for d in ddl if d.split()[5] == "store_sales")
    assert "ss_sold_date_sk bigint" in store_sales and "ss_sales_price decimal(7,2)" in store_sales
    assert "VARCHAR" not in store_sales.upper() and "INTEGER" not in store_sales.upper()
    assert len(tpcds_data.queries(con)) == 99
    assert con.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main'").fetchone() == (0,)
