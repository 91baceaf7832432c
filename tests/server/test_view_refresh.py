"""The compaction tick's policy refresh rebuilds only what changed: job-type thresholds learned from
the jobs seen move with almost every tick, and must swap the class selector alone, never rebuild the
replica placers over every node (that rebuild was a ChooseTargets stall of up to 200 ms per tick)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from placement_service.core.types import Job
from placement_service.server.config import build_config
from placement_service.server.reports import parse_report_batch
from placement_service.server.service import PlacementService
from tests.server.conftest import grid_classes_file, report

TENANTS = {"a": (0, 0), "b": (1, 1), "c": (2, 2)}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[PlacementService]:
    svc = PlacementService(build_config(env={}, flags={
        "data_dir": str(tmp_path / "d"), "compact_interval_s": 3600, "recluster_interval_s": 0,
        "classes_file": str(grid_classes_file(tmp_path, TENANTS, servers=3, cores=24)), "selection_min_jobs": 3}))
    svc.start()
    try:
        now = time.time()
        reps = [report(f"{t}-{k}", t, now, cpu=2.0 + i, seq=1) for i, t in enumerate(TENANTS) for k in range(3)]
        svc.ingest_and_wait(parse_report_batch({"reports": reps}, now, 300.0, 5000))
        svc.refresh_policy()
        yield svc
    finally:
        svc.close()


def _job(duration_s: float) -> Job:
    return Job("q", duration_s, {"Map 1": 4})


def test_new_thresholds_swap_the_selector_and_keep_the_placers(service: PlacementService) -> None:
    view = service.policy
    placer = view.placer
    assert placer is not None and view.selector is not None
    current = view.selector.current()
    assert service.select(_job(600.0)).selection.job_type == "medium"  # configured: 300 s < 600 s < 3600 s
    for d in (10.0, 20.0, 30.0, 40.0):
        service.select(_job(d))
    service.refresh_policy()  # the compaction tick
    assert service.policy is view and view.placer is placer  # nothing rebuilt over the nodes
    assert view.selector.config.long_min_s < 600.0  # thresholds now the thirds of the lengths seen
    assert service.select(_job(600.0)).selection.job_type == "long"
    assert view.selector.current() == current  # each class's current CPU carried over
    # A change of the nodes still rebuilds the view.
    now = time.time()
    service.ingest_and_wait(parse_report_batch({"reports": [report("a-9", "a", now, seq=1)]}, now, 300.0, 5000))
    service.refresh_policy()
    assert service.policy is not view and "a-9" in service.policy.placer_nodes


def test_a_rebuild_started_before_an_adoption_never_swaps_the_old_table_back(
    service: PlacementService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A compaction tick's rebuild (the node set changed) is still building over the current table
    # when the re-clustering adopts a new one. Both swap in a view when done: the tick's, built
    # over the old table, must not land after the adoption's (before, it did, and the service
    # served the old classes until the next re-clustering, a day later).
    import placement_service.server.service as service_module

    real = service_module.build_policy_view
    entered, release = threading.Event(), threading.Event()

    def paused_in_the_tick(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "tick":
            entered.set()
            release.wait(10.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(service_module, "build_policy_view", paused_in_the_tick)
    old = service.policy
    assert old.doc is not None
    now = time.time()
    service.ingest_and_wait(parse_report_batch({"reports": [report("b-9", "b", now, seq=1)]}, now, 300.0, 5000))
    tick = threading.Thread(target=service.refresh_policy, name="tick")
    tick.start()
    assert entered.wait(10.0)
    adopt = threading.Thread(target=service.adopt_class_table, args=(0, dict(old.doc)), name="adopt")
    adopt.start()
    adopt.join(1.0)  # time for an unserialized adoption to finish first
    release.set()
    tick.join(10.0)
    adopt.join(10.0)
    assert not tick.is_alive() and not adopt.is_alive()
    new = service.policy
    assert new.version > old.version, (old.version, new.version)
    assert "b-9" in new.placer_nodes  # and the tick's node is in it
