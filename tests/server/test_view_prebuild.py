"""A rebuilt policy view comes with the placers of every block size the view before it served: the
first decision of a bucket after a rebuild (a re-clustering, a node joining) must not build one on
the request path (~50-100 ms at 15,000 nodes, every call behind it queued)."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from placement_service.server.config import build_config
from placement_service.server.reports import parse_report_batch
from placement_service.server.service import PlacementService
from tests.server.conftest import grid_classes_file, report

TENANTS = {"a": (0, 0), "b": (1, 1), "c": (2, 2), "d": (0, 1)}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[PlacementService]:
    svc = PlacementService(build_config(env={}, flags={
        "data_dir": str(tmp_path / "d"), "compact_interval_s": 3600, "recluster_interval_s": 0,
        "classes_file": str(grid_classes_file(tmp_path, TENANTS, servers=2, cores=24))}))
    svc.start()
    try:
        now = time.time()
        reps = [report(f"{t}-{k}", t, now, seq=1) for t in TENANTS for k in range(2)]
        svc.ingest_and_wait(parse_report_batch({"reports": reps}, now, 300.0, 5000))
        svc.refresh_policy()
        yield svc
    finally:
        svc.close()


def test_a_rebuilt_view_has_the_placers_of_the_buckets_served_before(service: PlacementService) -> None:
    service.place("a-0", 2, [], 128 << 20)  # the 128 MB bucket, built on first use
    service.place("a-0", 2, [], 1 << 20)  # and 1 MB
    old = service.policy
    assert sorted(old.buckets()) == [1.0, 128.0, 256.0]
    now = time.time()
    service.ingest_and_wait(parse_report_batch({"reports": [report("e-0", "a", now, seq=1)]}, now, 300.0, 5000))
    service.refresh_policy()  # a node joined: a new view
    new = service.policy
    assert new is not old
    assert sorted(new.buckets()) == [1.0, 128.0, 256.0]  # built before the swap, not on a request
    placers = dict(new._placers)
    decision = service.place("e-0", 2, [], 128 << 20)
    assert decision.block_mb == 128.0 and decision.targets[0] == "e-0"
    assert new._placers[128.0] is placers[128.0]  # served by the placer built with the view
    assert "e-0" in new.placer_nodes and new._placers[128.0].is_usable("e-0")


def test_a_placer_built_on_a_request_is_kept_out_of_later_collections(service: PlacementService) -> None:
    try:
        service.place("a-0", 2, [], 64 << 20)  # a bucket no view built: built on this request
        placer = service.policy._placers[64.0]
        pool = placer._tenant_pool[0]  # one of the placer's long-lived objects
        assert gc.is_tracked(pool)
        tracked = {id(o) for o in gc.get_objects()}  # every generation the collector walks
        assert id(pool) not in tracked  # frozen: no collection on the request path walks it
        assert gc.isenabled()
    finally:
        gc.unfreeze()
