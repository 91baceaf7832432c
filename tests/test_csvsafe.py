"""Spreadsheet formula prefixes are escaped in every CSV the project writes (issue 37, finding 8)."""

from __future__ import annotations

import csv
import io as pyio
import pathlib
import re

import pyarrow as pa
import pytest

from placement_service import csvsafe

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOSTILE = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx", "'=x", "''@x", "'plain", "plain",
           "", "a=b"]


@pytest.mark.parametrize("text", HOSTILE)
def test_escape_is_safe_and_reversible_in_python_and_arrow(text):
    escaped = csvsafe.escape_text(text)
    assert not escaped or escaped[0] not in csvsafe.FORMULA_PREFIXES
    assert csvsafe.unescape_text(escaped) == text
    arrow = csvsafe.escape_array(pa.array([text]))
    assert arrow.to_pylist() == [escaped]
    assert csvsafe.unescape_array(arrow).to_pylist() == [text]


def test_numbers_and_nulls_are_not_escaped():
    assert csvsafe.escape_row([-5, -2.5, None, "-5"]) == [-5, -2.5, None, "'-5"]
    table = csvsafe.escape_table(pa.table({"n": [-1.0], "s": pa.array(["=x"]).dictionary_encode()}))
    assert table.column("n").to_pylist() == [-1.0] and table.column("s").to_pylist() == ["'=x"]


def test_sim_results_csv_is_escaped(tmp_path):
    from placement_service.sim.results import write_results

    write_results(tmp_path, "exp", "=dc", {}, [{"system": "=HYPERLINK(1)", "tenant": "-x", "lost": -1}])
    rows = list(csv.reader((tmp_path / "results.csv").open()))
    assert rows[1][:3] == ["'=HYPERLINK(1)", "'-x", "-1"]


def test_ras_tables_round_trip_and_the_scheduler_plugin_reads_the_names(tmp_path):
    from placement_service.capacity.ras.io import read_table, write_table
    from scheduler_plugin.inventory import read_servers

    path = tmp_path / "inv.csv"
    write_table(path, {"server": ["=cmd", "-s2"], "tenant": ["@t", "t"], "rack": ["+r", "r"], "cores": [-1, 2]})
    text = path.read_text()
    assert '"\'=cmd"' in text and '"\'@t"' in text
    table = read_table(path)
    assert table.column("server").to_pylist() == ["=cmd", "-s2"] and table.column("cores").to_pylist() == [-1, 2]
    rows = read_servers(path)
    assert [(r.server, r.tenant, r.rack) for r in rows] == [("=cmd", "@t", "+r"), ("-s2", "t", "r")]


def test_safe_writers_escape_the_header_too():
    buf = pyio.StringIO()
    w = csvsafe.writer(buf)
    w.writerow(["=h", "ok"])
    w.writerows([["-1", 2]])
    assert buf.getvalue().splitlines() == ["'=h,ok", "'-1,2"]


# The one way to write CSV: no module writes it except through csvsafe.
_RAW_WRITERS = re.compile(r"csv\.writer\(|csv\.DictWriter\(|pacsv\.write_csv\(|\.write_csv\(|\.to_csv\(")


def test_no_csv_writer_bypasses_csvsafe():
    offenders = []
    for folder in ("placement_service", "agent", "scheduler_plugin", "benchmarks", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "csvsafe.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), start=1):
                if _RAW_WRITERS.search(line) and "csvsafe." not in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []
