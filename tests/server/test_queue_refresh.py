"""After re-clustering rewrites capacity-scheduler.xml, the service asks YARN to load it
(``--refresh-queues-command``, e.g. ``yarn rmadmin -refreshQueues``), only when the queues changed,
and a failing command is reported, not fatal. ``yarn`` here is a stand-in script that records how it
was called and what the queue file held at that moment."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.server.conftest import RECLUSTER_WAIT_S, start_server
from tests.server.test_recluster import ingest_history

FAKE_YARN = """\
import json, pathlib, sys
log, xml, fail = sys.argv[1], sys.argv[2], sys.argv[3]
text = pathlib.Path(xml).read_text()
with open(log, "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[4:], "queues": text.count("<name>")}) + "\\n")
if pathlib.Path(fail).exists():
    sys.stderr.write("refreshQueues: Failed to re-init queues\\n")
    sys.exit(255)
"""


def _setup(tmp_path: Path) -> tuple[Path, Path, Path, list[str]]:
    script = tmp_path / "fake_yarn.py"
    script.write_text(FAKE_YARN)
    log, xml, fail = tmp_path / "yarn.log", tmp_path / "capacity-scheduler.xml", tmp_path / "fail"
    command = f"{sys.executable} {script} {log} {xml} {fail} rmadmin -refreshQueues"
    args = ["--capacity-scheduler-file", str(xml), "--refresh-queues-command", command, "--recluster-interval-s", "0"]
    return log, xml, fail, args


def _calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_queues_are_refreshed_after_the_file_changes_and_only_then(tmp_path: Path) -> None:
    log, xml, _, args = _setup(tmp_path)
    server = start_server(tmp_path / "data", *args, "--recluster-priority", "normal")
    try:
        ingest_history(server, n_tenants=6, nodes_per_tenant=2, seed=3)
        status, st = server.call("POST", "/v1/recluster?wait=1", timeout_s=RECLUSTER_WAIT_S)
        assert status == 200 and st["failures"] == 0, st
        calls = _calls(log)
        assert len(calls) == 1 and calls[0]["argv"] == ["rmadmin", "-refreshQueues"]
        assert calls[0]["queues"] > 0  # the file was complete when YARN was asked to load it
        _, status_doc = server.call("GET", "/v1/recluster")
        rm = status_doc["resource_manager"]
        assert rm["queue_refreshes"] == 1 and rm["queue_refresh_error"] == ""
        before = xml.read_text()
        # Same history, same classes: the queues did not change, so nothing is rewritten or refreshed.
        assert server.call("POST", "/v1/recluster?wait=1", timeout_s=RECLUSTER_WAIT_S)[0] == 200
        assert len(_calls(log)) == 1 and xml.read_text() == before
    finally:
        server.stop()


def test_a_failing_refresh_is_reported_and_the_service_keeps_serving(tmp_path: Path) -> None:
    log, xml, fail, args = _setup(tmp_path)
    fail.write_text("1")
    server = start_server(tmp_path / "data", *args, "--recluster-priority", "normal")
    try:
        ingest_history(server, n_tenants=6, nodes_per_tenant=2, seed=3)
        assert server.call("POST", "/v1/recluster?wait=1", timeout_s=RECLUSTER_WAIT_S)[0] == 200
        assert len(_calls(log)) == 1 and xml.exists()
        _, status_doc = server.call("GET", "/v1/recluster")
        rm = status_doc["resource_manager"]
        assert rm["queue_refreshes"] == 0
        assert "exit 255" in rm["queue_refresh_error"] and "Failed to re-init queues" in rm["queue_refresh_error"]
        status, _ = server.call("GET", "/v1/classes")
        assert status == 200
        # the RM's queues are not the file's: unhealthy, with the reason (issue 36 D1)
        status, health = server.call("GET", "/healthz")
        assert status == 503 and health["status"] == "unhealthy"
        assert "Failed to re-init queues" in health["problems"]["queue_refresh"]["reason"]
        _, metrics = server.call("GET", "/metrics")
        assert "harvest_queue_refresh_failures_total 1" in str(metrics)
    finally:
        server.stop()
