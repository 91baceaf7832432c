"""``harvest generate``, ``harvest convert-real`` and ``harvest check-traces`` through the real CLI entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placement_service.cli import main
from placement_service.traces import io

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
FILES = ("utilization.parquet", "reimages.parquet", "inventory.parquet")


def test_generate_writes_the_three_files_and_a_summary(tmp_path, capsys):
    out = tmp_path / "dc"
    assert main(["generate", "--servers", "300", "--seed", "4", "--out", str(out), "--days", "2"]) == 0
    text = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    for word in ("periodic", "constant", "unpredictable", "reimages:", "storage for HDFS", "servers 300"):
        assert word in text
    inv = io.load_inventory(out / "inventory.parquet")
    assert len(inv) == 300
    u = io.load_utilization(out / "utilization.parquet", known_servers=inv.server)
    assert set(u.timestamp_s[1:] - u.timestamp_s[:-1]) >= {300.0}


def test_generate_is_byte_identical_for_the_same_seed(tmp_path, capsys):
    args = ["generate", "--servers", "120", "--seed", "9", "--days", "1", "--interval-s", "120", "--json"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    for name in FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert summary["servers"] == 120 and summary["interval_s"] == 120.0
    assert set(summary["patterns"]) <= {"periodic", "constant", "unpredictable"}


def test_generate_options_csv_and_all_servers(tmp_path, capsys):
    out = tmp_path / "csv"
    argv = ["generate", "--servers", "50", "--seed", "1", "--days", "1", "--out", str(out),
            "--format", "csv", "--sampled-servers-per-tenant", "0"]
    assert main(argv) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == sorted(n.replace(".parquet", ".csv.gz") for n in FILES)
    u = io.load_utilization(out / "utilization.csv.gz")
    assert len(u.factorize("server")[0]) == 50  # every server sampled


def test_bad_arguments_exit_2_with_a_message(tmp_path, capsys):
    assert main(["generate", "--servers", "0", "--out", str(tmp_path)]) == 2
    assert "--servers must be >= 1" in capsys.readouterr().err


def test_check_traces_names_file_row_and_column(tmp_path, capsys):
    bad = tmp_path / "utilization.csv"
    bad.write_text("timestamp,server,tenant,cpu\n0,s1,t1,0.5\n120,s1,t1,55\n")
    assert main(["check-traces", "--utilization", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: row 2, column 'cpu'" in err and "--cpu-percent" in err
    assert main(["check-traces", "--utilization", str(bad), "--cpu-percent"]) == 0
    assert "1 tenants" in capsys.readouterr().out


def test_convert_real_and_check_the_result(tmp_path, capsys):
    out = tmp_path / "az"
    argv = ["convert-real", "--source", "azure", "--input", str(FIXTURES / "azure_v1_avg_excerpt.csv.gz"),
            "--out", str(out), "--servers-per-vm", "2"]
    assert main(argv) == 0
    assert "servers 8, tenants 4" in capsys.readouterr().out
    argv = ["check-traces", "--utilization", str(out / "utilization.parquet"),
            "--inventory", str(out / "inventory.parquet"), "--reimages", str(out / "reimages.parquet")]
    assert main(argv) == 0
    assert "4 tenants, 864 slots of 300 s" in capsys.readouterr().out
    argv = ["convert-real", "--source", "planetlab", "--input", str(FIXTURES / "planetlab_excerpt.csv"),
            "--out", str(tmp_path / "pl"), "--grouping", "correlation", "--json", "--min-days", "1"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == 3 * 4 * 288
    argv[-1] = "5"  # no VM of the excerpt is present on 5 days
    assert main(argv) == 2
    assert "no VM left" in capsys.readouterr().err


def test_generate_reads_a_settings_file(tmp_path, capsys):
    cfg = tmp_path / "gen.json"
    cfg.write_text(json.dumps({"periodic_server_share": 0.6, "sampled_servers_per_tenant": 1}))
    out = tmp_path / "dc"
    argv = ["generate", "--servers", "400", "--seed", "2", "--days", "1", "--out", str(out), "--config", str(cfg), "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["patterns"]["periodic"]["servers"] == pytest.approx(240, abs=25)
    assert summary["sampled_servers"] == summary["tenants"]
    cfg.write_text(json.dumps({"no_such_knob": 1}))
    assert main(argv) == 2
    assert "unknown generator setting 'no_such_knob'" in capsys.readouterr().err


def test_check_traces_names_mixed_intervals_and_disjoint_windows(tmp_path, capsys):
    # Tenant a: two servers every 60 s for two days; tenant b: one server every 300 s, 20 days later.
    lines = ["timestamp,server,tenant,cpu"]
    lines += [f"{60 * j},a{k},a,0.2" for k in range(2) for j in range(2880)]
    lines += [f"{86400 * 22 + 300 * j},b0,b,0.3" for j in range(576)]
    path = tmp_path / "utilization.csv"
    path.write_text("\n".join(lines) + "\n")
    assert main(["check-traces", "--utilization", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 tenants, 34556 slots of 60 s" in out
    assert "mixed sampling intervals: 60 s x2, 300 s x1" in out
    assert "2 of 2 tenants observed over part of the 24.0 days only" in out and "do not overlap at all" in out
    assert main(["check-traces", "--utilization", str(path), "--interval-s", "0"]) == 2
