"""``harvest import`` on unlucky and hostile exports (issue 37 finding 8, issue 39 finding 1): absurd
times, duplicated columns, an ambiguous CPU unit, empty optional cells, and every drop reported."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from placement_service.cli import main
from placement_service.traces import io

T0 = 1700006400  # 2023-11-15T00:00:00Z
DAY = 86400
DEFAULTS = ["--default-cores", "32", "--default-memory-mb", "131072", "--default-storage-gb", "2000"]


def _run(tmp_path, capsys, src, *extra, json_out=True):
    out = tmp_path / "dc"
    rc = main(["import", "--utilization", str(src), *DEFAULTS, *extra, *(["--json"] if json_out else []),
               "--out", str(out)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return rc, captured, out


def _long(path, times, server="s1", cpu=0.5):
    path.write_text("timestamp,server,cpu\n" + "".join(f"{t},{server},{cpu}\n" for t in times))
    return path


# -- times ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("times", "needle"),
    [
        ([T0, T0 + 300, -62135596800], "0001-01-01T00:00:00Z"),  # year 1
        (["2100-01-01T00:00:00Z", "2100-01-01T00:05:00Z"], "2100-01-01T00:00:00Z"),  # year 2100
        ([0, 300, 600], "1970-01-01T00:00:00Z"),  # offsets without --offset-start
        ([T0, T0 + 300, 2 * DAY + 1e10], "more than a day after now"),
    ],
)
def test_times_before_1990_or_after_tomorrow_are_refused_with_a_flag_to_keep_them(tmp_path, capsys, times, needle):
    src = _long(tmp_path / "cpu.csv", times)
    rc, cap, out = _run(tmp_path, capsys, src)
    assert rc == 2
    assert needle in cap.err and "column 'timestamp'" in cap.err and "--allow-any-time" in cap.err
    assert len(cap.err.strip().splitlines()) == 1
    rc, cap, out = _run(tmp_path, capsys, src, "--allow-any-time")
    assert rc == 0 and json.loads(cap.out)["samples"] == len(times)


def test_wide_times_and_reimage_times_are_checked_too(tmp_path, capsys):
    src = tmp_path / "wide.csv"
    src.write_text("t,a,b\n0,0.1,0.2\n300,0.3,0.4\n")
    rc, cap, _ = _run(tmp_path, capsys, src)
    assert rc == 2 and "row 1, column 't'" in cap.err and "--offset-start" in cap.err
    rc, cap, _ = _run(tmp_path, capsys, src, "--offset-start", "2023-11-15T00:00:00Z")
    assert rc == 0
    log = tmp_path / "reimages.csv"
    log.write_text(f"timestamp,server\n{T0},a\n5,b\n")
    rc, cap, _ = _run(tmp_path, capsys, src, "--offset-start", "2023-11-15T00:00:00Z", "--reimages", str(log))
    assert rc == 2 and "reimages.csv: row 2, column 'timestamp'" in cap.err


# -- duplicated columns ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "row", "needle"),
    [
        ("time,web-1,web-2,web-1", f"{T0},0.1,0.2,0.3", "'web-1' (columns 2, 4)"),
        ("timestamp,server,cpu,cpu", f"{T0},s1,0.1,0.2", "'cpu' (columns 3, 4)"),
        ("timestamp,server,server,cpu,cpu", f"{T0},s1,s2,0.1,0.2", "'server' (columns 2, 3), 'cpu' (columns 4, 5)"),
    ],
)
def test_duplicated_columns_are_one_line_naming_them(tmp_path, capsys, header, row, needle):
    src = tmp_path / "cpu.csv"
    src.write_text(f"{header}\n{row}\n")
    rc, cap, _ = _run(tmp_path, capsys, src)
    assert rc == 2 and "duplicated column name(s)" in cap.err and needle in cap.err
    assert len(cap.err.strip().splitlines()) == 1


def test_duplicated_columns_in_parquet_inventory_and_the_strict_loader(tmp_path, capsys):
    src = tmp_path / "cpu.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array([T0]), pa.array(["s1"]), pa.array([0.5]), pa.array([0.6])],
                                        names=["timestamp", "server", "cpu", "cpu"]), src)
    rc, cap, _ = _run(tmp_path, capsys, src)
    assert rc == 2 and "'cpu' (columns 3, 4)" in cap.err
    good = _long(tmp_path / "ok.csv", [T0, T0 + 300])
    inv = tmp_path / "inv.csv"
    inv.write_text("server,tenant,cores,cores,memory_mb,storage_gb\ns1,t,8,16,1,1\n")
    rc, cap, _ = _run(tmp_path, capsys, good, "--inventory", str(inv))
    assert rc == 2 and "inv.csv" in cap.err and "'cores' (columns 3, 4)" in cap.err
    strict = tmp_path / "u.csv"
    strict.write_text(f"timestamp,server,tenant,cpu,tenant\n{T0},s1,t,0.5,u\n")
    with pytest.raises(io.TraceError, match=r"duplicated column name\(s\): 'tenant' \(columns 3, 5\)"):
        io.load_utilization(strict)


# -- CPU unit -------------------------------------------------------------------------------------


def _fractions(path, n=200, outlier=None, seed=3):
    rng = np.random.default_rng(seed)
    cpu = rng.uniform(0.05, 0.9, n)
    if outlier is not None:
        cpu[outlier[0]] = outlier[1]
    path.write_text("timestamp,server,cpu\n" + "".join(f"{T0 + 300 * i},s1,{c:.4f}\n" for i, c in enumerate(cpu)))
    return cpu


def test_one_value_above_1_in_a_file_of_fractions_is_ambiguous_not_percent(tmp_path, capsys):
    src = tmp_path / "cpu.csv"
    cpu = _fractions(src, outlier=(16, 1.7))
    rc, cap, out = _run(tmp_path, capsys, src)
    assert rc == 2
    assert "--cpu-unit auto cannot tell fractions from percent" in cap.err
    assert "row 17 (server 's1'): 1.7" in cap.err and "1 of 200 values" in cap.err
    assert not (out / "utilization.parquet").exists()
    # Said explicitly: fraction (the outlier is above 100%: refused, then clipped on request) ...
    rc, cap, _ = _run(tmp_path, capsys, src, "--cpu-unit", "fraction")
    assert rc == 2 and "row 17" in cap.err and "--clip-cpu" in cap.err
    rc, cap, out = _run(tmp_path, capsys, src, "--cpu-unit", "fraction", "--clip-cpu")
    assert rc == 0 and json.loads(cap.out)["clipped"] == 1
    samples = io.load_utilization(out / "utilization.parquet")
    expected = np.minimum(np.round(cpu, 4), 1.0)
    assert np.allclose(samples.cpu, expected)  # the rest of the file is untouched
    # ... or percent.
    rc, cap, out = _run(tmp_path, capsys, src, "--cpu-unit", "percent")
    assert rc == 0 and io.load_utilization(out / "utilization.parquet").cpu.max() == pytest.approx(0.017)


@pytest.mark.parametrize(
    ("values", "unit"),
    [
        ([0.1, 0.5, 1.0, 0.0], "fraction"),
        ([5.0, 60.0, 0.5, 99.0], "percent"),
        ([0.2, 0.3, 0.4, 1.05] * 5, None),  # fractions, 25% a little above 100%: ambiguous
        ([0.2] * 99 + [40.0], None),  # one value of 40: ambiguous (not 1% of the file)
    ],
)
def test_auto_unit_is_decided_from_all_values(tmp_path, capsys, values, unit):
    src = tmp_path / "cpu.csv"
    src.write_text("timestamp,server,cpu\n" + "".join(f"{T0 + 60 * i},s1,{v}\n" for i, v in enumerate(values)))
    rc, cap, _ = _run(tmp_path, capsys, src, "--clip-cpu")
    if unit is None:
        assert rc == 2 and "cannot tell fractions from percent" in cap.err
    else:
        assert rc == 0 and json.loads(cap.out)["cpu_unit"] == unit


# -- issue 39 finding 1: an empty optional cell ---------------------------------------------------


def test_an_empty_memory_cell_keeps_the_sample_and_cpu_unit_leaves_memory_alone(tmp_path, capsys):
    src = tmp_path / "cpu.csv"
    src.write_text(f"timestamp,server,cpu,memory\n{T0},s1,10,0.5\n{T0 + 300},s1,20,\n{T0 + 600},s1,30,0.5\n"
                   f"{T0 + 900},s1,40,0.5\n")
    for fmt, name in (("parquet", "utilization.parquet"), ("csv", "utilization.csv.gz")):
        rc, cap, out = _run(tmp_path, capsys, src, "--cpu-unit", "percent", "--format", fmt)
        assert rc == 0
        summary = json.loads(cap.out)
        assert summary["samples"] == 4 and summary["memory_gaps"] == 1 and summary["dropped_total"] == 0
        assert summary["cpu_unit"] == "percent" and summary["memory_unit"] == "fraction"
        samples = io.load_utilization(out / name)
        assert np.allclose(samples.cpu, [0.1, 0.2, 0.3, 0.4])
        assert np.isnan(samples.memory[1]) and np.allclose(samples.memory[[0, 2, 3]], 0.5)


def test_memory_has_its_own_unit(tmp_path, capsys):
    src = tmp_path / "cpu.csv"
    src.write_text("timestamp,server,cpu,memory\n" + "".join(f"{T0 + 60 * i},s1,0.{i + 1},{40 + i}\n" for i in range(5)))
    rc, cap, out = _run(tmp_path, capsys, src)
    assert rc == 0
    summary = json.loads(cap.out)
    assert summary["cpu_unit"] == "fraction" and summary["memory_unit"] == "percent"
    samples = io.load_utilization(out / "utilization.parquet")
    assert np.allclose(samples.memory, [0.40, 0.41, 0.42, 0.43, 0.44])
    rc, cap, _ = _run(tmp_path, capsys, src, "--memory-unit", "fraction")
    assert rc == 2 and "column 'memory'" in cap.err and "row 1" in cap.err


# -- every drop reported --------------------------------------------------------------------------


def test_every_dropped_row_is_counted_with_its_reason(tmp_path, capsys):
    src = tmp_path / "cpu.csv"
    rows = []
    for i in range(12):
        rows.append(f"{T0 + 60 * i},a1,{'' if i in (3, 7) else 0.5}")  # two missing CPU samples
        rows.append(f"{T0 + 3 * DAY + 300 * i},b1,0.25")  # another tenant, later, every 5 minutes
        rows.append(f"{T0 + 60 * i},ghost,0.1")  # not in the inventory
    src.write_text("timestamp,server,cpu\n" + "\n".join(rows) + "\n")
    inv = tmp_path / "inv.csv"
    inv.write_text("server,tenant,cores,memory_mb,storage_gb\na1,search,8,1,1\nb1,ads,8,1,1\na1,search,16,1,1\n")
    log = tmp_path / "reimages.csv"
    log.write_text(f"timestamp,server\n{T0},a1\n{T0},a1\n{T0 + DAY},nobody\n")
    args = ["--inventory", str(inv), "--inventory-event-log", "--reimages", str(log)]
    rc, cap, _ = _run(tmp_path, capsys, src, *args)
    assert rc == 0
    s = json.loads(cap.out)
    assert s["dropped"] == {"empty_cpu": 2, "server_not_in_inventory": 12, "inventory_superseded": 1,
                            "reimage_server_not_in_inventory": 1, "reimage_duplicate": 1}
    assert s["dropped_total"] == 17 and s["samples"] == 12 + 10
    assert s["dropped_rows"]["empty_cpu"] == ["row 10 (server 'a1')", "row 22 (server 'a1')"]
    assert s["dropped_rows"]["reimage_duplicate"] == ["row 2 (server 'a1')"]
    assert s["dropped_rows"]["inventory_superseded"] == ["row 1 (server 'a1')"]
    assert s["interval_s_per_server"] == {"a1": 60.0, "b1": 300.0}
    assert s["interval_s_by_server"] == {"60": 1, "300": 1}
    assert s["window_by_tenant"]["search"]["first_s"] == T0 and s["window_by_tenant"]["ads"]["first_s"] == T0 + 3 * DAY
    assert s["common_window_s"] is None  # the two tenants were never observed at the same time
    # The text summary says the same: one line per reason, zeros included.
    rc, cap, _ = _run(tmp_path, capsys, src, *args, json_out=False)
    assert rc == 0
    assert "dropped: 17 rows or cells in all" in cap.out
    assert "2 utilization samples with an empty CPU cell" in cap.out
    assert "12 utilization samples of servers not in the inventory: server 'ghost': 12 samples" in cap.out
    assert "1 reimage lines repeating an earlier (server, time): row 2 (server 'a1')" in cap.out
    assert "sampling interval (median per server): 60 s: 1 servers, 300 s: 1 servers" in cap.out
    assert "search: 2023-11-15T00:00:00Z" in cap.out and "disjoint windows" in cap.out


# -- formula injection ----------------------------------------------------------------------------

HOSTILE = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "'=quoted", "plain"]


def test_csv_outputs_escape_formula_prefixes_and_read_back_unchanged(tmp_path, capsys):
    src = tmp_path / "cpu.parquet"
    n = len(HOSTILE)
    pq.write_table(pa.table({"timestamp": [T0] * n, "server": HOSTILE, "cpu": [0.5] * n,
                             "tenant": [f"{h}-t" for h in HOSTILE]}), src)
    rc, cap, out = _run(tmp_path, capsys, src, "--format", "csv")
    assert rc == 0
    with gzip.open(out / "utilization.csv.gz", "rt") as fh:
        text = fh.read()
    cells = [c for line in text.splitlines()[1:] for c in line.split(",")]
    for cell in cells:
        bare = cell.strip('"')
        assert not bare or bare[0] not in "=+-@\t\r", cell
    assert "'=HYPERLINK" in text and "''=quoted" in text
    inv = io.load_inventory(out / "inventory.csv.gz")
    samples = io.load_utilization(out / "utilization.csv.gz", inventory=inv)
    assert sorted(set(samples.server)) == sorted(HOSTILE)  # a round trip keeps every name
    assert sorted(inv.server) == sorted(HOSTILE)
