"""The router and the Java shim against the real placement service (``harvest serve``) on 127.0.0.1."""

from __future__ import annotations

import csv
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from placement_service.core.types import ClassTable
from scheduler_plugin.explain import job_document, parse_explain
from scheduler_plugin.router import Router, ServiceEndpoint
from tests.plugins.real_service import RealService, real_service


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealService]:
    from tests.plugins.conftest import FIXTURES

    tmp = tmp_path_factory.mktemp("e2e")
    with real_service(tmp, FIXTURES / "classes.json") as svc:
        rows = list(csv.DictReader((FIXTURES / "inventory.csv").open()))
        now = time.time()
        reports = [{"node": r["server"], "tenant": r["tenant"], "timestamp": now, "primary_cpu_cores": 2.0,
                    "primary_memory_mb": 1024.0, "capacity_cores": float(r["cores"]), "capacity_memory_mb": 65536.0,
                    "busy": False, "free_storage_gb": 500.0} for r in rows]
        status, answer = svc.call("POST", "/v1/reports", {"reports": reports})
        assert status == 202, answer
        yield svc


def test_router_gets_its_queue_from_the_real_service(service: RealService, fixtures: Path) -> None:
    table = ClassTable.from_json(json.loads((fixtures / "classes.json").read_text()))
    job = job_document("e2e-join", parse_explain(json.loads((fixtures / "ambari_explain_join.json").read_text())))
    d = Router(ServiceEndpoint(service.http, service.token)).route(job)
    assert d.source == "service", d.reason
    assert d.classes and set(d.classes) <= {c.id for c in table.classes}
    assert d.settings["tez.queue.name"] == d.queue
    if len(d.classes) == 1:
        assert d.queue == d.label == d.classes[0]


def test_shim_places_blocks_where_the_real_service_says(service: RealService, shim_classes: Path,
                                                        fixtures: Path) -> None:
    build = subprocess.run(["java", "-cp", str(shim_classes), "org.harvest.hdfs.ShimTests", "--e2e",
                            service.http + "/v1/blocks/place", str(service.token_file), "4"],
                           capture_output=True, text=True, timeout=240, check=False)
    assert build.returncode == 0, build.stdout + build.stderr
    chosen = [ln.split(" ", 1)[1].split(",") for ln in build.stdout.splitlines() if ln.startswith("CHOSEN ")]
    assert len(chosen) == 4
    tenant = {r["server"]: r["tenant"] for r in csv.DictReader((fixtures / "inventory.csv").open())}
    for hosts in chosen:
        assert len(set(hosts)) == 3 and hosts[0] == "dn1.example.com"
        # The stock stand-in alone would pick dn1, dn2, dn3 (all tenant "search"); the service spreads
        # the replicas over the grid's rows, i.e. over tenants.
        assert len({tenant[h] for h in hosts}) >= 2, hosts
