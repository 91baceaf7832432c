"""``harvest testbed`` without Hadoop: the primary tenant for real, process records and a safe ``down``,
tenants per worker, TPC-DS data from DuckDB, the run loop (real primaries, real mode switches of
the record, records), the report, the CLI's errors. The real cluster: tests/hadoop/test_testbed_up.py."""

from __future__ import annotations

import csv
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from placement_service.cli import main
from scheduler_plugin.testbed import primary, procs, report, runner, testbed
from scheduler_plugin.testbed.testbed import TestbedError

REPO = Path(__file__).resolve().parents[2]


def _utilization(path: Path) -> Path:
    with gzip.open(path, "wt", newline="") as handle:
        w = csv.writer(handle)
        w.writerow(["timestamp", "server", "tenant", "cpu", "environment"])
        for i in range(20):
            w.writerow([i * 300, "s1", "t-a", 0.05 + 0.01 * (i % 5), "e"])
            w.writerow([i * 300, "s2", "t-b", 0.10, "e"])
    return path


def _state(tmp: Path, **extra: Any) -> dict[str, Any]:
    for sub in ("logs", "primary", "runs"):
        (tmp / sub).mkdir(exist_ok=True)
    state = {"dir": str(tmp), "state": "running", "processes": [], "mode": "harvest",
             "utilization_file": str(_utilization(tmp / "utilization.csv.gz")),
             "tenants": {"worker1": "t-a", "worker2": "t-b"},
             "primary": {"cores": 1, "speedup": 3000.0, "window_s": 0.3}, **extra}
    testbed.write_state(tmp, state)
    return state


# ---------------------------------------------------------------- the primary tenant


def test_primary_reads_csv_gz_and_refuses_missing_columns(tmp_path: Path) -> None:
    rows = list(primary.read_rows(str(_utilization(tmp_path / "u.csv.gz"))))
    series = primary.tenant_series(rows, "t-b")
    assert len(series) == 20 and series[0] == (0.0, 0.10)
    assert primary.step_seconds(series, 60.0) == 5.0 and primary.step_seconds(series, 6000.0) == 0.5
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,cpu\n0,0.1\n")
    with pytest.raises(primary.PrimaryError, match="missing column.*tenant"):
        primary.read_rows(str(bad))
    done = subprocess.run([sys.executable, "-m", "scheduler_plugin.testbed.primary", "--utilization", str(bad),
                           "--tenant", "x", "--latency-out", str(tmp_path / "l.csv"), "--window-s", "0"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert done.returncode == 2 and "--window-s: must be a positive number" in done.stderr


def test_primary_writes_latency_windows_and_stops_with_its_workers(tmp_path: Path) -> None:
    state = _state(tmp_path)
    rec = testbed.start_primary(state, tmp_path, "worker1")
    out = Path(rec["latency_file"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(runner.latency_rows(out)) < 2:
            time.sleep(0.2)
        rows = runner.latency_rows(out)
        assert len(rows) >= 2 and all(r["p99_ms"] >= r["p50_ms"] > 0 for r in rows)
        group = [rec["pid"], *procs.descendants(rec["pid"])]
        assert len(group) >= 2  # the busy-loop worker
    finally:
        assert testbed.stop_processes([rec]) >= 2
    assert all(procs.start_time(pid) is None for pid in group)


# ---------------------------------------------------------------- process records and down


def test_down_stops_what_it_started_and_nothing_else(tmp_path: Path) -> None:
    state = _state(tmp_path)
    # a process group with a grandchild: the shell, its sleep
    rec = testbed.start_process(state, tmp_path, "service", "master", ["sh", "-c", "sleep 300 & wait"],
                                tmp_path / "logs" / "svc.log")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not procs.descendants(rec["pid"]):
        time.sleep(0.05)
    child = procs.descendants(rec["pid"])
    # not ours: a live PID whose command line differs from the record (PID reuse), and a dead one
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        fake = {"role": "agent", "host": "worker1", "pid": stranger.pid, "start_time": procs.start_time(stranger.pid),
                "cmd": ["python", "-m", "placement_service.cli", "agent"], "log": "x"}
        dead = {"role": "primary", "host": "worker2", "pid": 2 ** 22 + 7, "start_time": 1, "cmd": ["x"], "log": "x"}
        state = testbed.read_state(tmp_path)
        state["processes"] += [fake, dead]
        testbed.write_state(tmp_path, state)
        assert testbed.ours(rec) and not testbed.ours(fake) and not testbed.ours(dead)
        result = testbed.down(tmp_path, quiet=True)
        assert result["stopped"] == 1 + len(child) and result["state"] == "stopped"
        assert procs.start_time(rec["pid"]) is None and all(procs.start_time(p) is None for p in child)
        assert stranger.poll() is None, "down killed a process it did not start"
        assert not [p for p in testbed.read_state(tmp_path)["processes"] if testbed.ours(p)]
        # a stale directory: down again is safe
        assert testbed.down(tmp_path, quiet=True)["stopped"] == 0
    finally:
        stranger.kill()
        stranger.wait()


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    state = _state(tmp_path)
    rec = testbed.start_process(state, tmp_path, "service", "master",
                                [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                 "print('ready', flush=True); time.sleep(300)"], tmp_path / "logs" / "stubborn.log")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "ready" not in (tmp_path / "logs" / "stubborn.log").read_text():
        time.sleep(0.05)
    assert testbed.stop_processes([rec], grace_s=0.5) == 1
    assert procs.start_time(rec["pid"]) is None


def test_up_refuses_a_directory_with_a_running_testbed(tmp_path: Path) -> None:
    state = _state(tmp_path)
    rec = testbed.start_process(state, tmp_path, "service", "master", ["sleep", "300"], tmp_path / "logs" / "s.log")
    try:
        with pytest.raises(TestbedError, match=r"holds a running testbed \(service@master"):
            testbed.up(testbed.UpConfig(workers=1, directory=tmp_path))
    finally:
        testbed.stop_processes([rec])


def test_up_that_fails_early_says_why_and_leaves_a_stopped_state(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match=r"--trace .*nope.csv.gz: no such file"):
        testbed.up(testbed.UpConfig(workers=2, directory=tmp_path, trace=tmp_path / "nope.csv.gz"))
    state = testbed.read_state(tmp_path)
    assert state["state"] == "stopped" and "no such file" in state["error"] and state["processes"] == []
    with pytest.raises(TestbedError, match="--workers: expected 1..40"):
        testbed.up(testbed.UpConfig(workers=0, directory=tmp_path))


def test_history_is_learnt_again_for_another_trace_or_size(tmp_path: Path) -> None:
    params = {"trace": "/a.csv.gz", "history_vms": 12}
    assert not testbed.history_is_current(tmp_path, params)
    (tmp_path / "classes.json").write_text("{}")
    assert not testbed.history_is_current(tmp_path, params)  # of unknown origin
    (tmp_path / "params.json").write_text(json.dumps(params))
    assert testbed.history_is_current(tmp_path, params)
    assert not testbed.history_is_current(tmp_path, {**params, "history_vms": 20})
    assert not testbed.history_is_current(tmp_path, {**params, "trace": "/b.csv.gz"})


def test_tenants_are_taken_pattern_by_pattern() -> None:
    doc = {"classes": [{"id": "p0", "pattern": "periodic", "tenants": ["a", "b"]},
                       {"id": "c0", "pattern": "constant", "tenants": ["c"]},
                       {"id": "c1", "pattern": "constant", "tenants": ["d"]},
                       {"id": "u0", "pattern": "unpredictable", "tenants": []}]}
    assert testbed.choose_tenants(doc, 4) == ["a", "c", "d", "a"]
    with pytest.raises(TestbedError, match="no tenants"):
        testbed.choose_tenants({"classes": [{"id": "u", "pattern": "x", "tenants": []}]}, 1)


# ---------------------------------------------------------------- data, routing, the run loop


@pytest.fixture(scope="module")
def tpcds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import duckdb  # noqa: F401  (harvest[testbed], in the dev install: a missing one is a failure)
    out = tmp_path_factory.mktemp("tpcds")
    from scheduler_plugin.testbed import tpcds_data

    tpcds_data.generate(0.01, out, hdfs_root="/tpcds/sf0.01", queries=[3, 42])
    return out


def test_tpcds_data_files_ddl_and_queries(tpcds: Path) -> None:
    manifest = json.loads((tpcds / "manifest.json").read_text())
    assert manifest["queries"] == [3, 42] and manifest["duckdb"] == "1.5.5"
    assert len(manifest["tables"]) == 24 and manifest["tables"]["customer"] == 1000
    lines = (tpcds / "data" / "customer" / "customer.dat").read_text().splitlines()
    assert len(lines) == 1000 and lines[0].count("|") == 17  # 18 columns
    ddl = (tpcds / "ddl.sql").read_text()
    assert ddl.count("CREATE EXTERNAL TABLE") == 24
    assert "LOCATION '/tpcds/sf0.01/store_sales'" in ddl and "`ss_ext_sales_price` decimal(7,2)" in ddl
    assert "i_manufact_id = 128" in (tpcds / "queries" / "query3.sql").read_text()


def test_hive_types_of_duckdb_types() -> None:
    from scheduler_plugin.testbed.tpcds_data import TpcdsError, hive_type

    assert [hive_type(t) for t in ("BIGINT", "DECIMAL(7,2)", "VARCHAR", "CHAR(16)", "DATE", "INTEGER")] == [
        "bigint", "decimal(7,2)", "string", "char(16)", "date", "int"]
    with pytest.raises(TpcdsError, match="MAP"):
        hive_type("MAP(INT, INT)")


def test_routing_per_mode(tmp_path: Path) -> None:
    state = _state(tmp_path, service={"http": "http://127.0.0.1:1", "token_file": "/t"}, classes_file="/c.json")
    harvest = runner.routing_args(state, "harvest", tmp_path / "runs")
    assert harvest[:2] == ["--service", "http://127.0.0.1:1"] and "--classes" in harvest
    (tmp_path / "runs" / "history-pt.json").write_text("{}")
    for mode in ("pt", "stock"):
        args = runner.routing_args(state, mode, tmp_path / "runs")
        assert args == ["--history", str(tmp_path / "runs" / f"history-{mode}.json")]
        assert not Path(args[1]).exists()  # no history: a fresh file each run
    with pytest.raises(TestbedError, match="no HiveServer2"):
        runner.hiveserver2(state)
    state["cluster"] = {"bin": "/c/bin"}
    state["hiveserver2"] = "10.0.0.1:10000"
    assert runner.hiveserver2(state) == ("jdbc:hive2://10.0.0.1:10000", "/c/bin/beeline")
    state["hiveserver2"] = None
    state["cluster"]["hiveserver2"] = {"jdbc": "jdbc:hive2://10.0.0.2:10001/default", "beeline": "/b"}
    assert runner.hiveserver2(state) == ("jdbc:hive2://10.0.0.2:10001", "/b")
    state["cluster"]["hiveserver2"] = {"port": 1}
    with pytest.raises(TestbedError, match="expected 'host:port' or an object"):
        runner.hiveserver2(state)


def test_run_query_goes_through_harvest_hive(tmp_path: Path, fixtures: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The query step for real through ``harvest hive``, with tests/plugins/test_hive.py's fake beeline
    (it prints a fixture plan and a Tez summary with 3 killed and 1 failed attempt)."""
    from tests.plugins.test_hive import FAKE_BEELINE

    exe = tmp_path / "beeline"
    exe.write_text(FAKE_BEELINE.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("FAKE_BEELINE_LOG", str(tmp_path / "beeline.log"))
    monkeypatch.setenv("FAKE_BEELINE_EXPLAIN", str(fixtures / "ambari_explain_join.json"))
    state = _state(tmp_path, hiveserver2={"address": "hs2:10000", "beeline": str(exe)}, cluster={"bin": "/none"})
    sql = tmp_path / "query7.sql"
    sql.write_text("select power.adate from power join power2 on power.adate = power2.adate;\n")
    rec = runner.run_query(state, sql, "pt")
    assert rec["exit_code"] == 0 and rec["error"] == "", rec
    assert (rec["killed_attempts"], rec["failed_attempts"], rec["queue"], rec["source"]) == (3, 1, "default", "default")
    calls = [json.loads(line) for line in (tmp_path / "beeline.log").read_text().splitlines()]
    assert calls[-1][:2] == ["-u", "jdbc:hive2://hs2:10000/tpcds"]
    monkeypatch.setenv("FAKE_BEELINE_EXIT", "2")
    rec = runner.run_query(state, sql, "stock")
    assert rec["exit_code"] == 2 and rec["error"].startswith("exit 2")


def test_run_loop_switches_modes_and_records_probe_and_outcome(tmp_path: Path, tpcds: Path) -> None:
    state = _state(tmp_path)
    for host in state["tenants"]:
        testbed.start_primary(state, tmp_path, host)
    calls: list[tuple[str, str, str]] = []

    def mode_fn(directory: Path, mode: str) -> dict[str, Any]:
        st = testbed.read_state(directory)
        st["mode"] = mode
        testbed.write_state(directory, st)
        return st

    def query_fn(st: dict[str, Any], sql: Path, mode: str) -> dict[str, Any]:
        calls.append((st["mode"], mode, sql.name))
        assert sql.exists()
        time.sleep(0.4)
        return {"job_time_s": 0.4, "exit_code": 0 if sql.name != "query42.sql" else 1, "killed_attempts": 1,
                "failed_attempts": 0, "queue": "default" if mode != "harvest" else "constant-0", "classes": "",
                "error": ""}

    try:
        records = runner.run(tmp_path, queries=[3, 42], rounds=1, modes=["harvest", "stock"], scale=0.01,
                             baseline_s=0.7, query_fn=query_fn, mode_fn=mode_fn,
                             load_fn=lambda st, scale, qs: tpcds / "queries")
    finally:
        testbed.down(tmp_path, quiet=True)
    assert calls == [("harvest", "harvest", "query3.sql"), ("harvest", "harvest", "query42.sql"),
                     ("stock", "stock", "query3.sql"), ("stock", "stock", "query42.sql")]
    assert [(r["mode"], r["query"]) for r in records] == [("baseline", None), ("harvest", 3), ("harvest", 42),
                                                          ("stock", 3), ("stock", 42)]
    for r in records:
        assert r["primary_p50_ms"] and r["primary_p99_ms"] >= r["primary_p50_ms"], r
    saved = json.loads((tmp_path / "runs" / "records.json").read_text())
    assert saved["records"] == records and set(records[1]) == set(runner.RECORD_FIELDS)


def test_run_refuses_a_stopped_testbed_and_bad_modes(tmp_path: Path) -> None:
    _state(tmp_path, state="stopped")
    with pytest.raises(TestbedError, match="is stopped, not running"):
        runner.run(tmp_path, queries=[3], rounds=1, modes=["pt"])
    with pytest.raises(TestbedError, match="'fast' is not one of"):
        runner.run(tmp_path, queries=[3], rounds=1, modes=["fast"])


# ---------------------------------------------------------------- report


def test_report_page_figures_and_csv(tmp_path: Path) -> None:
    import matplotlib  # noqa: F401  (harvest[sim], in the dev install)
    recs = [{"round": 1, "mode": "baseline", "query": None, "job_time_s": 30, "primary_p50_ms": 1.0, "primary_p99_ms": 2.0},
            {"round": 1, "mode": "harvest", "query": 3, "job_time_s": 10, "exit_code": 0, "killed_attempts": 2,
             "failed_attempts": 0, "queue": "constant-0", "primary_p50_ms": 1.1, "primary_p99_ms": 2.2},
            {"round": 1, "mode": "harvest", "query": 7, "job_time_s": 20, "exit_code": 0, "killed_attempts": 0,
             "failed_attempts": 0, "queue": "constant-0", "primary_p50_ms": 1.2, "primary_p99_ms": 2.1},
            {"round": 1, "mode": "stock", "query": 3, "job_time_s": 12, "exit_code": 1, "killed_attempts": None,
             "failed_attempts": None, "queue": "default", "primary_p50_ms": 1.5, "primary_p99_ms": 4.0,
             "error": "exit 1: line one\nline two"}]
    path = tmp_path / "records.json"
    path.write_text(json.dumps({"queries": [3, 7], "rounds": 1, "modes": ["harvest", "stock"], "scale": 0.1,
                                "records": recs}))
    page = report.write_report(path, tmp_path / "out")
    rows = {r["mode"]: r for r in report.summarize(recs)}
    assert rows["harvest"]["mean_job_time_s"] == 15.0 and rows["harvest"]["killed_attempts"] == 2
    assert rows["harvest"]["p99_vs_baseline"] == 1.1 and rows["stock"]["p99_vs_baseline"] == 2.0
    assert rows["stock"]["killed_attempts"] is None and rows["stock"]["succeeded"] == 0
    text = page.read_text()
    assert "| harvest | 2 | 2 | 15.0 | 2 | 0 |" in text and "![latency](latency.png)" in text
    assert "q3 stock: exit 1: line one line two" in text
    for name in ("job_time.png", "kills.png", "latency.png"):
        assert (tmp_path / "out" / name).read_bytes()[:4] == b"\x89PNG"
    with (tmp_path / "out" / "records.csv").open() as handle:
        assert [r["mode"] for r in csv.DictReader(handle)] == ["baseline", "harvest", "harvest", "stock"]


def test_cli_errors_name_the_bad_argument(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["testbed", "run", "--dir", str(tmp_path), "--queries", "3,x"]) == 2
    assert "'x' in '3,x': expected TPC-DS query numbers" in capsys.readouterr().err
    assert main(["testbed", "run", "--dir", str(tmp_path), "--modes", "harvest,fast"]) == 2
    assert "modes are harvest, pt, stock" in capsys.readouterr().err
    assert main(["testbed", "up", "--workers", "0", "--dir", str(tmp_path)]) == 2
    assert main(["testbed", "down", "--dir", str(tmp_path / "none")]) == 2
    assert "no testbed here" in capsys.readouterr().err
    assert main(["testbed", "report", "--dir", str(tmp_path)]) == 2
    assert "no records" in capsys.readouterr().err
