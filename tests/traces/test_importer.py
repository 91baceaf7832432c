"""``harvest import`` (placement_service/traces/importer.py, cli_import.py): an operator's own exports."""

from __future__ import annotations

import gzip
import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from placement_service.cli import main
from placement_service.traces import io
from placement_service.traces.series import tenant_series

DAY = 86400
SHARED = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "cpu"
T0 = 1700006400  # 2023-11-15T00:00:00Z, a Wednesday


def _wide_csv(path: pathlib.Path) -> dict[str, int]:
    """Three servers, 5-minute samples over 6 days, in percent; a 2-day outage, stray empty cells, >100%."""
    rng = np.random.default_rng(7)
    n = 6 * 288
    cols = {f"web-{i}": rng.uniform(5, 60, n) for i in range(3)}
    cols["web-0"][288:3 * 288] = np.nan  # two days without data (an outage)
    cols["web-1"][[10, 20, 30]] = np.nan
    cols["web-2"][[100, 200]] = [130.0, 250.0]  # hyperthreading reports above 100%
    lines = ["time," + ",".join(cols)]
    for j in range(n):
        t = np.datetime64(T0 + 300 * j, "s")
        cells = ["" if np.isnan(cols[c][j]) else f"{cols[c][j]:.3f}" for c in cols]
        lines.append(f"{t}Z," + ",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return {"samples": 3 * n - 2 * 288 - 3, "empty": 2 * 288 + 3, "over": 2}


DEFAULTS = ["--default-cores", "32", "--default-memory-mb", "131072", "--default-storage-gb", "2000"]


def test_wide_csv_keeps_gaps_and_real_time_and_clips_only_on_request(tmp_path, capsys):
    src = tmp_path / "cpu.csv"
    want = _wide_csv(src)
    out = tmp_path / "dc"
    # Without --clip-cpu a sample above 100% is refused, naming its row and the server's column.
    assert main(["import", "--utilization", str(src), *DEFAULTS, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "row 101" in err and "'web-2'" in err and "--clip-cpu" in err
    assert not out.exists() or not any(out.iterdir())  # nothing half-written
    assert main(["import", "--utilization", str(src), "--clip-cpu", *DEFAULTS, "--synthetic-reimages",
                 "--json", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["layout"] == "wide" and summary["cpu_unit"] == "percent"
    assert summary["samples"] == want["samples"] and summary["empty_cells"] == want["empty"]
    assert summary["clipped"] == want["over"]
    inv = io.load_inventory(out / "inventory.parquet")
    samples = io.load_utilization(out / "utilization.parquet", inventory=inv)
    assert samples.timestamp_s.min() == T0  # the real start, not a fixed date
    assert samples.cpu.max() == 1.0 and samples.cpu.min() >= 0.0
    # The outage stays a gap in the tenant series (not a flat interpolated line).
    series = tenant_series(samples)
    assert any(g[0] == "web-0" and g[2] == 2 * 288 for g in series.long_gaps)
    assert np.isnan(series.cpu[list(series.tenants).index("web-0")]).sum() == 2 * 288
    # Synthetic reimages start in the window and are said to be synthetic.
    ev = io.load_reimages(out / "reimages.parquet")
    assert summary["reimage_source"].startswith("synthetic")
    assert len(ev.server) == summary["reimages"] and (len(ev.server) == 0 or ev.timestamp_s.min() >= T0)


def test_long_parquet_mapped_columns_mixed_intervals_and_start_dates(tmp_path, capsys):
    rows_t, rows_s, rows_c = [], [], []
    for server, start, step in (("a1", T0, 60), ("b1", T0 + 3 * DAY, 300)):
        t = np.arange(start, start + 2 * DAY, step)
        rows_t += t.tolist()
        rows_s += [server] * len(t)
        rows_c += np.linspace(0.1, 0.9, len(t)).tolist()
    src = tmp_path / "export.parquet"
    pq.write_table(pa.table({"ts_ms": np.asarray(rows_t) * 1000, "host": rows_s, "util": rows_c,
                             "svc": ["search" if s == "a1" else "ads" for s in rows_s]}), src)
    inv = tmp_path / "inv.csv"
    inv.write_text("host,service,row,ncpu,mem,disk,when\n"
                   "a1,search,r1,16,65536,100,1\n"
                   "b1,old,r9,8,1,1,1\n"
                   "b1,ads,r2,32,131072,500,5\n"
                   "c9,ads,r2,32,131072,500,2\n")
    out = tmp_path / "dc"
    args = ["import", "--utilization", str(src), "--utilization-columns", "timestamp=ts_ms,server=host,cpu=util,tenant=svc",
            "--time-unit", "ms", "--inventory", str(inv), "--inventory-event-log",
            "--inventory-columns", "server=host,tenant=service,rack=row,cores=ncpu,memory_mb=mem,storage_gb=disk,timestamp=when",
            "--json", "--out", str(out)]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["cpu_unit"] == "fraction" and summary["layout"] == "long"
    assert summary["interval_s_by_server"] == {"60": 1, "300": 1}
    assert summary["inventory_rows"] == 4 and summary["inventory_servers"] == 3
    inventory = io.load_inventory(out / "inventory.parquet")
    b1 = inventory.server.index("b1")
    assert inventory.tenant[b1] == "ads" and inventory.cores[b1] == 32  # the last row of b1 wins
    assert inventory.environment[b1] == "ads"  # default environment: the tenant
    samples = io.load_utilization(out / "utilization.parquet", inventory=inventory)
    b_times = samples.timestamp_s[samples.server == "b1"]
    assert b_times.min() == T0 + 3 * DAY  # each server keeps its own start
    # Without the event-log flag the repeated server is an error naming the flag.
    args2 = [a for a in args if a != "--inventory-event-log"]
    assert main(args2) == 2
    assert "--inventory-event-log" in capsys.readouterr().err


def test_reimage_log_longer_than_the_window_is_kept_whole(tmp_path, capsys):
    src = tmp_path / "cpu.csv"
    t = np.arange(T0, T0 + 2 * DAY, 300)
    src.write_text("timestamp,server,cpu\n" + "".join(f"{x},s1,0.5\n{x},s2,0.25\n" for x in t))
    log = tmp_path / "repairs.csv"
    log.write_text("when,machine\n" + "".join(f"{T0 - 300 * DAY + d * DAY},s{1 + d // 30 % 2}\n" for d in range(0, 300, 30))
                   + f"{T0},ghost\n{T0},s1\n{T0},s1\n")
    out = tmp_path / "dc"
    assert main(["import", "--utilization", str(src), *DEFAULTS, "--reimages", str(log),
                 "--reimage-columns", "timestamp=when,server=machine", "--json", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    ev = io.load_reimages(out / "reimages.parquet")
    assert len(ev.server) == 10 + 1  # 10 old events + one (de-duplicated) at T0; ghost dropped
    assert summary["reimages_dropped_unknown"] == 1
    assert ev.timestamp_s.min() == T0 - 300 * DAY  # not clipped to the utilization window
    assert "kept whole" in summary["reimage_source"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--utilization-columns", "stamp=x"], "unknown name 'stamp'"),
        (["--utilization-columns", "server=nohost"], "no column 'nohost'"),
        (["--default-cores", "nan"], "--default-cores"),
        (["--offset-start", "yesterday"], "--offset-start"),
    ],
)
def test_bad_flags_name_what_is_wrong(tmp_path, capsys, extra, needle):
    src = tmp_path / "cpu.csv"
    src.write_text(f"timestamp,server,cpu\n{T0},s1,0.5\n")
    assert main(["import", "--utilization", str(src), *DEFAULTS, *extra, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_text_in_a_cpu_cell_names_the_row(tmp_path, capsys):
    src = tmp_path / "cpu.csv"
    src.write_text(f"timestamp,server,cpu\n{T0},s1,0.5\n{T0 + 1},s1,\n{T0 + 2},s1,high\n")
    assert main(["import", "--utilization", str(src), *DEFAULTS, "--out", str(tmp_path / "o")]) == 2
    assert "row 3" in capsys.readouterr().err


@pytest.mark.skipif(not (SHARED / "azure_v1_microsoft_avg_100.csv.gz").exists(), reason="needs ../shared/data")
def test_shared_azure_trace_imports_as_a_wide_export(tmp_path, capsys):
    src = SHARED / "azure_v1_microsoft_avg_100.csv.gz"
    out = tmp_path / "azure"
    assert main(["import", "--utilization", str(src), "--layout", "wide", "--offset-start", "2017-11-15T00:00:00Z",
                 *DEFAULTS, "--synthetic-reimages", "--json", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    with gzip.open(src, "rt") as f:
        header = f.readline().strip().split(",")
    assert summary["servers"] == len(header) - 1 == 100
    assert summary["cpu_unit"] == "percent" and summary["interval_s_by_server"] == {"300": 100}
    assert summary["first_s"] == 1510704000.0
