"""Issue 36 D1: a re-clustering that drops a class must leave the ResourceManager's queues equal to the
file. The real RM (3.2.1 and 3.3.6) refuses to delete a queue that is not STOPPED, and with it the whole
``-refreshQueues`` (the new class's queue too); the service wrote the file without the dropped queue,
and ``/healthz`` said ok. Queues have a lifecycle: STOPPED, drained, then removed by a later refresh.

The RM here is the suite's fake (``tests.agent.fakes.FakeResourceManager``: all-or-nothing refresh, the
"not yet in stopped state" refusal, labels that must exist, DRAINING while applications run); ``yarn``
is a stand-in that carries ``rmadmin -refreshQueues`` out on it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from placement_service.server.config import build_config
from placement_service.server.queues import plan_queues
from placement_service.server.service import PlacementService
from scheduler_plugin.capacity_scheduler import read_queue_states, render_capacity_scheduler
from tests.agent.fakes import fake_yarn_cli
from tests.plugins.test_capacity_scheduler import check_tree, parse
from tests.server.fake_rm import FakeResourceManager


def table(*class_ids: str) -> dict[str, Any]:
    """A class table with one tenant per class."""
    classes, tenants = [], {}
    for i, cid in enumerate(class_ids):
        t = f"t{i}-{cid}"
        classes.append({"id": cid, "pattern": cid.split("-")[0], "avg_cpu": 0.2, "peak_cpu": 0.4,
                        "current_cpu": 0.25, "servers": 2 + i, "cores": 16, "tenants": [t]})
        tenants[t] = {"class": cid, "pattern": cid.split("-")[0]}
    return {"classes": classes, "tenants": tenants}


def test_plan_keeps_a_dropped_queue_stopped_until_the_rm_has_drained_it() -> None:
    in_file = {"default": "RUNNING", "constant-0": "RUNNING", "periodic-0": "RUNNING"}
    running = {**in_file}
    plan = plan_queues(["constant-0", "constant-1"], in_file, running)
    assert plan.running == ("constant-0", "constant-1") and plan.stopped == ("periodic-0",) and plan.removed == ()
    draining = {**running, "periodic-0": "DRAINING"}
    assert plan_queues(["constant-0", "constant-1"], {**in_file, "periodic-0": "STOPPED"}, draining).stopped == (
        "periodic-0",)
    drained = {**running, "periodic-0": "STOPPED"}
    plan = plan_queues(["constant-0", "constant-1"], {**in_file, "periodic-0": "STOPPED"}, drained)
    assert plan.stopped == () and plan.removed == ("periodic-0",)
    # a queue the RM never loaded (its refresh failed) goes at once; without the RM, nothing is removed
    assert plan_queues(["a-0"], {"default": "RUNNING", "b-0": "RUNNING"}, {"default": "RUNNING"}).removed == ("b-0",)
    assert plan_queues(["a-0"], {"default": "RUNNING", "b-0": "STOPPED"}, None).stopped == ("b-0",)


def test_a_stopped_queue_keeps_the_tree_valid_with_no_default_share() -> None:
    text = render_capacity_scheduler(["constant-0", "constant-1"], stopped=["periodic-0"])
    assert read_queue_states(text) == {"default": "RUNNING", "constant-0": "RUNNING", "constant-1": "RUNNING",
                                       "periodic-0": "STOPPED"}
    props = parse(text)
    check_tree(props, ["constant-0", "constant-1", "periodic-0"])  # capacities add up per partition
    assert float(props["yarn.scheduler.capacity.root.periodic-0.capacity"]) == 0.0


@pytest.fixture
def rm(tmp_path: Path) -> Iterator[FakeResourceManager]:
    with FakeResourceManager(labels={}) as fake:
        fake.capacity_scheduler_file = str(tmp_path / "capacity-scheduler.xml")
        yield fake


@pytest.fixture
def service(tmp_path: Path, rm: FakeResourceManager) -> Iterator[PlacementService]:
    yarn, _ = fake_yarn_cli(str(tmp_path), rm_url=rm.url)
    svc = PlacementService(build_config(env={}, flags={
        "data_dir": str(tmp_path / "d"), "compact_interval_s": 3600, "recluster_interval_s": 0,
        "rm_url": rm.url, "capacity_scheduler_file": rm.capacity_scheduler_file,
        "refresh_queues_command": f"{yarn} rmadmin -refreshQueues", "queue_check_interval_s": 3600}))
    svc.start()
    try:
        yield svc
    finally:
        svc.close()


def _file_queues(rm: FakeResourceManager) -> dict[str, str]:
    assert rm.capacity_scheduler_file is not None
    return read_queue_states(Path(rm.capacity_scheduler_file).read_text())


def _equal(rm: FakeResourceManager) -> bool:
    """The RM runs the file's queues: same names; STOPPED in the file is DRAINING or STOPPED in the RM."""
    in_file = _file_queues(rm)
    return set(in_file) == set(rm.queues) and all(
        (st == "RUNNING") == (rm.queues[q] == "RUNNING") for q, st in in_file.items())


def test_recluster_that_drops_and_adds_classes_leaves_the_rm_queues_equal_to_the_file(
        service: PlacementService, rm: FakeResourceManager) -> None:
    service.adopt_class_table(0, table("constant-0", "periodic-0"))
    # labels first, then queues: the RM refuses a queue naming a label it does not have
    assert set(rm.labels) == {"constant-0", "periodic-0"}
    assert rm.queues == {"default": "RUNNING", "constant-0": "RUNNING", "periodic-0": "RUNNING"} and _equal(rm)
    rm.queue_apps["periodic-0"] = 1  # a job still runs in the class about to be dropped

    service.adopt_class_table(0, table("constant-0", "constant-1"))
    assert rm.queues == {"default": "RUNNING", "constant-0": "RUNNING", "constant-1": "RUNNING",
                         "periodic-0": "DRAINING"}
    assert _equal(rm) and _file_queues(rm)["periodic-0"] == "STOPPED"
    assert service.health_snapshot()["status"] == "ok" and service.rm_status["stopped_queues"] == ["periodic-0"]

    service.queues.tick()  # still draining: nothing changes
    assert "periodic-0" in rm.queues and _equal(rm)
    rm.finish_apps("periodic-0")
    service.queues.tick()  # drained: the next refresh removes it
    assert rm.queues == {"default": "RUNNING", "constant-0": "RUNNING", "constant-1": "RUNNING"} and _equal(rm)
    assert service.rm_status["stopped_queues"] == [] and service.rm_status["queue_refresh_error"] == ""


def test_a_failed_refresh_makes_the_service_unhealthy_with_the_reason_and_is_retried(
        service: PlacementService, rm: FakeResourceManager, tmp_path: Path) -> None:
    service.adopt_class_table(0, table("constant-0"))
    # a queue (and label) the file does not name, e.g. left by an earlier file, while the RM's queue
    # list cannot be read: the service cannot know it must keep it, and the refresh fails
    with rm.lock:
        rm.queues["legacy-0"] = "RUNNING"
        rm.labels["legacy-0"] = False
    rm.fail_scheduler_reads = 1
    service.adopt_class_table(0, table("constant-0", "constant-1"))
    doc = service.health_snapshot()
    assert doc["status"] == "unhealthy"
    reason = doc["problems"]["queue_refresh"]["reason"]
    assert "not yet in stopped state" in reason and "legacy-0" in reason
    assert "constant-1" not in rm.queues  # all or nothing: the new class's queue is not loaded either
    # the next try reads the RM's queues, keeps legacy-0 (STOPPED), and succeeds
    service.queues.tick()
    assert service.health_snapshot()["status"] == "ok" and _equal(rm)
    assert rm.queues["legacy-0"] == "STOPPED" and rm.queues["constant-1"] == "RUNNING"
    service.queues.tick()  # drained (no applications): removed
    assert "legacy-0" not in rm.queues and _equal(rm)
    assert os.path.exists(rm.capacity_scheduler_file or "")


def test_the_table_it_starts_with_is_published_and_lost_labels_are_added_again(
        tmp_path: Path, rm: FakeResourceManager) -> None:
    """Found on the real RM (tests/hadoop): ``harvest serve --classes-file ... --rm-url ...`` never
    pushed the table it started with (only re-clusterings did); and an RM that lost its labels (a
    restart without a label store) was never given them again."""
    import json

    from tests.agent.procs import wait_until

    classes = tmp_path / "classes.json"
    classes.write_text(json.dumps(table("constant-0", "periodic-0")))
    yarn, _ = fake_yarn_cli(str(tmp_path), rm_url=rm.url)
    svc = PlacementService(build_config(env={}, flags={
        "data_dir": str(tmp_path / "d"), "compact_interval_s": 3600, "recluster_interval_s": 0,
        "classes_file": str(classes), "rm_url": rm.url, "capacity_scheduler_file": rm.capacity_scheduler_file,
        "refresh_queues_command": f"{yarn} rmadmin -refreshQueues", "queue_check_interval_s": 0.2}))
    svc.start()
    try:
        assert wait_until(lambda: set(rm.queues) == {"default", "constant-0", "periodic-0"}, 30)
        assert set(rm.labels) == {"constant-0", "periodic-0"} and svc.rm_status["pushes"] >= 1
        with rm.lock:
            rm.labels.clear()  # the RM restarted without its label store
        assert wait_until(lambda: set(rm.labels) == {"constant-0", "periodic-0"}, 30)
    finally:
        svc.close()
