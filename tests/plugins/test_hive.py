"""``harvest hive`` with a fake ``beeline`` on PATH that prints a fixture plan and records its argv."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from placement_service.cli import main
from scheduler_plugin.history import HistoryStore, RunRecord
from scheduler_plugin.hive import HiveRunError, extract_plan, parse_vertex_summary, split_statements

FAKE_BEELINE = """#!{python}
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_BEELINE_LOG"], "a") as log:
    log.write(json.dumps(argv) + "\\n")
sql = open(argv[argv.index("-f") + 1]).read()
if "EXPLAIN FORMATTED" in sql:
    plan = json.load(open(os.environ["FAKE_BEELINE_EXPLAIN"]))
    sys.stdout.write(json.dumps(plan) + "\\n")
    sys.exit(0)
sys.stdout.write("d_year\\tcnt\\n2001\\t42\\n")
sys.stderr.write("INFO  : Status: Running (Executing on YARN cluster with App id application_1_0001)\\n")
sys.stderr.write("        VERTICES      MODE        STATUS  TOTAL  COMPLETED  RUNNING  PENDING  FAILED  KILLED\\n")
sys.stderr.write("Map 1 .......... container     SUCCEEDED     12         12        0        0       0       2\\n")
sys.stderr.write("Map 3 .......... container     SUCCEEDED      5          5        0        0       1       0\\n")
sys.stderr.write("Reducer 2 ...... container     SUCCEEDED      4          4        0        0       0       1\\n")
sys.exit(int(os.environ.get("FAKE_BEELINE_EXIT", "0")))
"""


@pytest.fixture
def beeline(tmp_path: Path, fixtures: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "beeline"
    exe.write_text(FAKE_BEELINE.format(python=sys.executable))
    exe.chmod(0o755)
    log = tmp_path / "beeline.log"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_BEELINE_LOG", str(log))
    monkeypatch.setenv("FAKE_BEELINE_EXPLAIN", str(fixtures / "ambari_explain_join.json"))
    return log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_explain_route_run_and_record(beeline: Path, tmp_path: Path, fixtures: Path,
                                      capfd: pytest.CaptureFixture[str]) -> None:
    query = tmp_path / "q7.sql"
    query.write_text("-- TPC-DS q7\nset hive.vectorized.execution.enabled=true;\nuse tpcds;\n"
                     "select power.adate from power join power2 on power.adate = power2.adate;\n")
    history = tmp_path / "history.json"
    args = ["hive", str(query), "--url", "jdbc:hive2://hs2:10000/default", "--classes",
            str(fixtures / "classes.json"), "--history", str(history), "--seed", "3", "--hiveconf", "a.b=c"]
    assert main(args) == 0
    explain_call, run_call = calls(beeline)
    assert explain_call[:3] == ["-u", "jdbc:hive2://hs2:10000/default", "--outputformat=tsv2"]
    assert "--hiveconf" in explain_call and "a.b=c" in explain_call
    assert "tez.queue.name" not in " ".join(explain_call)
    queue_settings = [run_call[i + 1] for i, a in enumerate(run_call) if a == "--hiveconf"]
    queue = [s.split("=", 1)[1] for s in queue_settings if s.startswith("tez.queue.name=")]
    assert queue and queue[0] in {"constant-0", "periodic-0", "unpredictable-0"}
    assert run_call[-2:] == ["-f", str(query)]
    assert "2001\t42" in capfd.readouterr().out  # beeline's result passes through
    rec = HistoryStore(history).get("q7")
    assert rec is not None and rec.exit_code == 0 and rec.queue == queue[0]
    assert rec.vertex_tasks == {"Map 1": 12, "Map 3": 5, "Reducer 2": 4}
    assert rec.killed_attempts == 3
    assert rec.last_duration_s is not None and rec.last_duration_s > 0

    # Next time, the recorded run feeds the routing: its duration and its measured task counts.
    HistoryStore(history).record("q7", RunRecord(7200.0, {"Map 1": 400, "Map 3": 5, "Reducer 2": 4}, 0.0, queue[0]))
    capfd.readouterr()
    assert main([*args, "--dry-run"]) == 0
    out = json.loads(capfd.readouterr().out)
    assert out["job"]["last_duration_s"] == 7200.0
    assert out["job"]["vertices"]["Map 1"] == {"tasks": 400}
    assert out["decision"]["job_type"] == "long"
    assert len(calls(beeline)) == 3  # dry run: EXPLAIN only


def test_failed_run_keeps_last_good_duration(beeline: Path, tmp_path: Path, fixtures: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    query = tmp_path / "q.sql"
    query.write_text("select 1 from power join power2 on power.adate = power2.adate")
    history = tmp_path / "h.json"
    HistoryStore(history).record("q", RunRecord(99.0, {"Map 1": 3}, 0.0, "default"))
    monkeypatch.setenv("FAKE_BEELINE_EXIT", "3")
    assert main(["hive", str(query), "--url", "jdbc:hive2://x", "--history", str(history)]) == 3
    rec = HistoryStore(history).get("q")
    assert rec is not None and (rec.exit_code, rec.last_duration_s, dict(rec.vertex_tasks)) == (3, 99.0, {"Map 1": 3})


def test_statement_split_plan_extraction_and_summary() -> None:
    pre, q = split_statements("set a=1;\n-- c\nUSE db;\nselect 1;\nselect 2;\n")
    assert pre == ["set a=1", "USE db"] and q == "select 2"
    with pytest.raises(HiveRunError, match="no statement"):
        split_statements("set a=1;")
    noise = 'WARN: x {not json}\n{"STAGE PLANS": {"Stage-1": {}}}\n'
    assert extract_plan(noise, "q") == {"STAGE PLANS": {"Stage-1": {}}}
    quoted = '"{""STAGE PLANS"": {""Stage-1"": {""Tez"": {}}}}"\n'
    assert extract_plan(quoted, "q") == {"STAGE PLANS": {"Stage-1": {"Tez": {}}}}
    with pytest.raises(HiveRunError, match="no EXPLAIN FORMATTED JSON"):
        extract_plan("Error: table not found", "q.sql")
    s = parse_vertex_summary("Map 1 ..... container  RUNNING 10 2 8 0 0 0\rMap 1 ..... container  SUCCEEDED 10 10 0 0 0 4\n")
    assert (dict(s.tasks), s.killed_attempts) == ({"Map 1": 10}, 4)


def test_corrupt_history_is_reported(tmp_path: Path) -> None:
    p = tmp_path / "h.json"
    p.write_text("{oops")
    with pytest.raises(Exception, match="not valid JSON"):
        HistoryStore(p).get("x")


def test_route_waiting_asks_again_until_a_class_fits(fixtures: Path) -> None:
    from scheduler_plugin.explain import job_document, parse_explain
    from scheduler_plugin.hive import route_waiting
    from scheduler_plugin.router import Router, ServiceEndpoint
    from tests.plugins.fake_service import fake_service

    answers = iter([[], [], ["periodic-0"]])
    now = [0.0]
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    job = job_document("q", parse_explain(json.loads((fixtures / "ambari_explain_join.json").read_text())))
    with fake_service(lambda p, b: (200, {"classes": next(answers)}, 0.0)) as svc:
        router = Router(ServiceEndpoint(svc.url))
        d = route_waiting(router, job, wait_s=100, poll_s=30, clock=lambda: now[0], sleep=sleep)
        assert (d.queue, sleeps) == ("periodic-0", [30, 30])
    with fake_service(lambda p, b: (200, {"classes": []}, 0.0)) as svc:
        now[0], sleeps[:] = 0.0, []
        d = route_waiting(Router(ServiceEndpoint(svc.url)), job, wait_s=50, poll_s=30, clock=lambda: now[0],
                          sleep=sleep)
        assert (d.queue, sleeps) == ("default", [30])
