"""Router against a real local HTTP service: good answer, down, slow, wrong answer; local fallback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from placement_service.core.tpcds import load_tpcds_plans
from placement_service.core.types import ClassTable, JobType
from scheduler_plugin.explain import job_document, parse_dag_description, parse_explain
from scheduler_plugin.router import Engine, MultiClassPolicy, Router, ServiceEndpoint, pick_class
from tests.plugins.fake_service import closed_port_url, fake_service


def table(fixtures: Path) -> ClassTable:
    return ClassTable.from_json(json.loads((fixtures / "classes.json").read_text()))


def small_job(fixtures: Path, last_duration_s: float | None = None) -> dict[str, Any]:
    dag = parse_explain(json.loads((fixtures / "ambari_explain_join.json").read_text()))
    return job_document("join", dag, last_duration_s=last_duration_s)


def answer(classes: list[str], job_type: str = "short") -> Any:
    return lambda path, body: (200, {"classes": classes, "job_type": job_type, "max_concurrency": 3}, 0.0)


def test_service_answer_becomes_queue_settings_and_request_is_the_job(fixtures: Path) -> None:
    job = small_job(fixtures)
    with fake_service(answer(["periodic-0"])) as svc:
        d = Router(ServiceEndpoint(svc.url, token="s3cret", timeout_s=2)).route(job)
    assert (d.source, d.queue, d.label, d.job_type) == ("service", "periodic-0", "periodic-0", JobType.SHORT)
    assert d.settings == {"tez.queue.name": "periodic-0"}
    path, body, headers = svc.requests[0]
    assert path == "/v1/jobs/select"
    assert body == job
    assert headers["Authorization"] == "Bearer s3cret"


@pytest.mark.parametrize(
    "responder",
    [
        lambda p, b: (200, {"classes": ["periodic-0"]}, 1.5),  # slow: beyond the 0.3 s timeout
        lambda p, b: (200, {"queue": "x"}, 0.0),  # wrong: no classes
        lambda p, b: (200, "not json", 0.0),
        lambda p, b: (401, {"error": "bad token"}, 0.0),
        lambda p, b: (200, {"classes": [3]}, 0.0),
    ],
    ids=["slow", "no-classes", "not-json", "http-401", "bad-ids"],
)
def test_unusable_service_falls_back_to_local_selection(fixtures: Path, responder: Any) -> None:
    with fake_service(responder) as svc:
        d = Router(ServiceEndpoint(svc.url, timeout_s=0.3), table(fixtures), seed=1).route(small_job(fixtures))
    assert d.source == "local"
    assert d.classes and set(d.classes) <= {c.id for c in table(fixtures).classes}
    assert d.settings["tez.queue.name"] == d.queue
    assert "service:" in d.reason


def test_service_down_and_no_table_gives_default_queue(fixtures: Path) -> None:
    d = Router(ServiceEndpoint(closed_port_url(), timeout_s=0.5)).route(small_job(fixtures))
    assert (d.source, d.queue, d.label) == ("default", "default", "")
    assert d.settings == {"tez.queue.name": "default"}
    assert "cannot reach" in d.reason


def test_multi_class_selection_maps_to_one_queue(fixtures: Path) -> None:
    t = table(fixtures)
    # Long job: headroom = 1 - max(peak, cur): constant-0 0.55*128 cores, periodic-0 0.2*32.
    assert pick_class(["periodic-0", "constant-0"], MultiClassPolicy.LARGEST_HEADROOM, t, JobType.LONG) == (
        "constant-0", "constant-0")
    # Without a table: the service's first (most preferred) class.
    assert pick_class(["periodic-0", "constant-0"], MultiClassPolicy.LARGEST_HEADROOM, None, None) == (
        "periodic-0", "periodic-0")
    assert pick_class(["periodic-0", "constant-0"], MultiClassPolicy.DEFAULT_PARTITION, t, JobType.LONG) == (
        "default", "")
    with fake_service(answer(["periodic-0", "constant-0"], "long")) as svc:
        d = Router(ServiceEndpoint(svc.url), t, MultiClassPolicy.LARGEST_HEADROOM, Engine.MAPREDUCE).route(
            small_job(fixtures, 7200.0))
    assert d.settings == {"mapreduce.job.queuename": "constant-0",
                          "mapreduce.job.node-label-expression": "constant-0"}
    # The service's own mapping (its real answer shape) wins when it names a queue.
    shaped = {"job": "join", "job_type": "long", "max_concurrency": 3, "classes": ["periodic-0", "constant-0"],
              "queue": "default", "node_label": "", "wait": False, "class_table_version": 4}
    with fake_service(lambda p, b: (200, shaped, 0.0)) as svc:
        d = Router(ServiceEndpoint(svc.url), t, MultiClassPolicy.LARGEST_HEADROOM).route(small_job(fixtures))
    assert (d.queue, d.label, d.settings) == ("default", "", {"tez.queue.name": "default"})
    with fake_service(lambda p, b: (200, {**shaped, "classes": ["periodic-0"], "queue": "periodic-0",
                                          "node_label": "periodic-0"}, 0.0)) as svc:
        d = Router(ServiceEndpoint(svc.url), engine=Engine.MAPREDUCE).route(small_job(fixtures))
    assert d.settings["mapreduce.job.node-label-expression"] == "periodic-0"


def test_empty_selection_waits_in_default_queue(fixtures: Path) -> None:
    with fake_service(answer([])) as svc:
        d = Router(ServiceEndpoint(svc.url)).route(small_job(fixtures))
    assert (d.source, d.queue, d.classes) == ("service", "default", ())


def test_all_99_tpcds_dags_through_service_and_local_fallback(fixtures: Path) -> None:
    plans = load_tpcds_plans()["queries"]
    jobs = [job_document(f"tpcds-q{q}", parse_dag_description(p, f"query{q}")) for q, p in plans.items()]
    seen: list[int] = []

    def responder(path: str, body: dict[str, Any]) -> tuple[int, Any, float]:
        seen.append(len(body["vertices"]))
        return 200, {"classes": ["constant-0"], "job_type": "medium", "max_concurrency": 1}, 0.0

    with fake_service(responder) as svc:
        router = Router(ServiceEndpoint(svc.url))
        decisions = [router.route(j) for j in jobs]
    assert len(seen) == 99 and all(d.queue == "constant-0" for d in decisions)
    # Local: classes without inventory (cores 0) have unknown capacity, so every job gets a class.
    doc = json.loads((fixtures / "classes.json").read_text())
    for c in doc["classes"]:
        c["cores"], c["servers"] = 0, 0
    local = Router(None, ClassTable.from_json(doc), seed=7)
    ids = {c["id"] for c in doc["classes"]}
    for j in jobs:
        d = local.route(j)
        assert d.source == "local" and d.queue in ids and d.max_concurrency and d.max_concurrency >= 1


def test_route_command(fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from placement_service.cli import main

    job_out = tmp_path / "job.json"
    token = tmp_path / "token"
    token.write_text("tok\n")
    with fake_service(answer(["unpredictable-0"])) as svc:
        assert main(["route", str(fixtures / "explain_multi_parent.json"), "--service", svc.url, "--token-file",
                     str(token), "--history", str(tmp_path / "h.json"), "--job-out", str(job_out)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"] == {"tez.queue.name": "unpredictable-0"}
    assert svc.requests[0][1] == json.loads(job_out.read_text())
    assert svc.requests[0][2]["Authorization"] == "Bearer tok"
    assert main(["route", "--tpcds", "3", "--classes", str(fixtures / "classes.json"), "--seed", "1",
                 "--history", str(tmp_path / "h.json")]) == 0
    assert json.loads(capsys.readouterr().out)["job"] == "tpcds-q3"
    assert main(["route", "--tpcds", "100"]) == 2
    assert "no bundled plan" in capsys.readouterr().err
