"""The Hive role on real daemons: HiveServer2 4.1.0 + Tez 0.10.5 on Hadoop 3.4.2, one TPC-DS query
through ``harvest hive`` on the queue the router picks.

Its own small cluster (1 DataNode, 2 NodeManagers, hosts on 127.0.0.1: the namespace variant, which
``up --hive`` supports, timed out once on a NameNode call at load 41 and is not yet the smoke's, see
docs/hadoop.md "Hive on Tez"), with one queue per class of
``tests/fixtures/plugins/classes.json``. Under CI=true a cluster or HiveServer2 that does not start
is a failure. Figures (time to bring Hive up, the query's duration) go to docs/hadoop-verified.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler_plugin.testbed import cluster as testbed
from scheduler_plugin.testbed import tpcds_data
from scheduler_plugin.testbed.versions import HIVE_HADOOP_VERSION, HIVE_VERSION
from tests.hadoop.conftest import FIGURES, IN_CI, REPO, RUNS, require_tools

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(900)]

CLASSES = REPO / "tests" / "fixtures" / "plugins" / "classes.json"
QUERY = 52  # store_sales x date_dim x item, group by + order by: Map -> Reducer -> Reducer
TABLES = ("store_sales", "date_dim", "item")


def _queue_overrides() -> dict[tuple[str, str], str]:
    ids = [c["id"] for c in json.loads(CLASSES.read_text())["classes"]]
    queues = ["default", *ids]
    out = {("capacity-scheduler", "yarn.scheduler.capacity.root.queues"): ",".join(queues)}
    for q in queues:
        out[("capacity-scheduler", f"yarn.scheduler.capacity.root.{q}.capacity")] = str(100 // len(queues)
                                                                                         + (100 % len(queues) if q == "default" else 0))
        out[("capacity-scheduler", f"yarn.scheduler.capacity.root.{q}.maximum-capacity")] = "100"
    return out


@pytest.fixture(scope="module")
def hive_cluster() -> Iterator[dict[str, Any]]:
    require_tools()
    tmp = RUNS / f"hive-{HIVE_VERSION}"
    if (tmp / "cluster" / testbed.STATE_FILE).exists():
        try:
            testbed.down(tmp / "cluster", quiet=True)
        except Exception:  # noqa: BLE001 (best effort: a stale cluster from a killed run)
            pass
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    plan = testbed.make_plan(HIVE_HADOOP_VERSION, datanodes=1, nodemanagers=2, directory=tmp / "cluster",
                             overrides=_queue_overrides(), isolate=False)
    try:
        info = testbed.up(plan, timeout_s=420, hive=True)
    except Exception as exc:  # a cluster that does not start: skip locally, fail under CI
        message = f"Hadoop {HIVE_HADOOP_VERSION} with Hive {HIVE_VERSION} did not start: {exc}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    FIGURES[("Hive up: cluster + HiveServer2 (1 DataNode, 2 NodeManagers)", HIVE_HADOOP_VERSION)] = (
        f"{info['startup_s']:.0f} s, HiveServer2 {info['hiveserver2']['startup_s']:.0f} s "
        f"(load {os.getloadavg()[0]:.0f})")
    try:
        yield dict(info, tmp=str(tmp))
    finally:
        testbed.down(plan.dir, quiet=True)


def _rm_apps(info: dict[str, Any]) -> list[dict[str, Any]]:
    url = f"http://{info['resourcemanager']['http']}/ws/v1/cluster/apps?applicationTypes=TEZ"
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (our own RM)
        return list((json.loads(resp.read()).get("apps") or {}).get("app") or [])


def _load_tables(info: dict[str, Any], tmp: Path) -> None:
    """The three tables of the query, with DuckDB's dsdgen rows at scale 0.01 (LOAD DATA LOCAL: HiveServer2
    runs on this machine)."""
    con = tpcds_data.connect()
    ddl = {d.split()[5]: d for d in tpcds_data.schema_ddl(con)}
    con.execute("CALL dsdgen(sf=0.01)")
    stmts = []
    for table in TABLES:
        path = tmp / f"{table}.dat"
        con.execute(f"COPY {table} TO '{path}' (DELIMITER '|', HEADER false)")
        stmts += [ddl[table], f"LOAD DATA LOCAL INPATH '{path}' OVERWRITE INTO TABLE {table}"]
    hs2 = info["hiveserver2"]
    proc = subprocess.run([hs2["beeline"], "-u", hs2["jdbc"], "-e", ";\n".join(stmts)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.feature("Hive 4.1 on Tez: a TPC-DS query through harvest hive on the routed queue, 0 FAILED attempts")
@pytest.mark.parametrize("hadoop_version", [HIVE_HADOOP_VERSION])  # the verified-on table's column
def test_a_tpcds_query_runs_on_the_routed_queue_without_failed_attempts(hive_cluster: dict[str, Any],
                                                                         hadoop_version: str) -> None:
    tmp = Path(hive_cluster["tmp"])
    began = time.monotonic()
    _load_tables(hive_cluster, tmp)
    query = tmp / f"q{QUERY}.sql"
    query.write_text(tpcds_data.to_hiveql(tpcds_data.queries(tpcds_data.connect())[QUERY]) + ";\n")
    before = {a["id"] for a in _rm_apps(hive_cluster)}
    result_json = tmp / "result.json"
    hs2 = hive_cluster["hiveserver2"]
    proc = subprocess.run(
        [sys.executable, "-m", "placement_service.cli", "hive", str(query), "--url", hs2["jdbc"],
         "--beeline", hs2["beeline"], "--classes", str(CLASSES), "--seed", "7", "--history", str(tmp / "history.json"),
         "--result-json", str(result_json)],
        capture_output=True, text=True, timeout=600, check=False, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    took = time.monotonic() - began
    FIGURES[("Hive smoke: load 3 tables + q52 via harvest hive", HIVE_HADOOP_VERSION)] = (
        f"{took:.0f} s (load {os.getloadavg()[0]:.0f})")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(result_json.read_text())
    queue = result["decision"]["queue"]
    assert result["decision"]["source"] == "local" and queue != "default", result["decision"]
    assert result["vertex_tasks"], "no Tez vertex table in beeline's output"
    assert result["failed_attempts"] == 0
    apps = [a for a in _rm_apps(hive_cluster) if a["id"] not in before]
    assert apps, "the query started no Tez application"
    for app in apps:  # the RM's view: the session's AM ran in the routed queue and was not retried
        assert app["queue"].split(".")[-1] == queue, app
        assert app["finalStatus"] in ("SUCCEEDED", "UNDEFINED") and app["state"] in ("FINISHED", "RUNNING"), app
        url = f"http://{hive_cluster['resourcemanager']['http']}/ws/v1/cluster/apps/{app['id']}/appattempts"
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (our own RM)
            attempts = json.loads(resp.read())["appAttempts"]["appAttempt"]
        assert len(attempts) == 1, attempts
