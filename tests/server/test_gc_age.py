"""Full garbage collections stay short: what the service keeps leaves the collector's walks after a
compaction tick, and cyclic garbage is still freed by the periodic full pass (``age_out_of_gc``)."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from placement_service.server.config import build_config
from placement_service.server.reports import parse_report_batch
from placement_service.server.service import PlacementService
from tests.server.conftest import report


@pytest.fixture
def service(tmp_path: Path) -> Iterator[PlacementService]:
    svc = PlacementService(build_config(env={}, flags={
        "data_dir": str(tmp_path / "d"), "compact_interval_s": 3600, "gc_full_collect_interval_s": 600}))
    svc.start()
    try:
        yield svc
    finally:
        svc.close()
        gc.unfreeze()  # the rest of the test session walks everything again


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_what_the_service_keeps_leaves_full_collections(service: PlacementService) -> None:
    now = time.time()
    batch = parse_report_batch({"reports": [report(f"n{i:05d}", f"t{i % 50}", now, seq=1) for i in range(3000)]},
                               now, 300.0, 5000)
    service.ingest_and_wait(batch)
    del batch
    kept = [[i] for i in range(50_000)]  # more long-lived state, as a big decision log would be
    gc.collect()
    walked_before = len(gc.get_objects())  # what a full collection walks (frozen objects are not)
    assert service.age_out_of_gc(time.monotonic() + 1) == "froze"
    walked_after = len(gc.get_objects())
    assert walked_after < walked_before - 50_000
    assert len(kept) == 50_000  # still alive: freezing frees nothing


def test_cyclic_garbage_that_was_frozen_is_freed_by_the_periodic_full_pass(service: PlacementService) -> None:
    t0 = time.monotonic()
    cycle = _Cycle()
    ref = weakref.ref(cycle)
    assert service.age_out_of_gc(t0 + 1) == "froze"  # alive at the tick: frozen with the rest
    del cycle
    gc.collect()
    assert ref() is not None  # a frozen cycle is out of every ordinary collection's reach ...
    assert service.age_out_of_gc(t0 + 2) == "froze"
    assert ref() is not None
    assert service.age_out_of_gc(t0 + 700) == "full"  # ... until the periodic full pass
    assert ref() is None


def test_zero_interval_turns_freezing_off(tmp_path: Path) -> None:
    svc = PlacementService(build_config(env={}, flags={"data_dir": str(tmp_path / "d"),
                                                       "gc_full_collect_interval_s": 0}))
    svc.start()
    try:
        frozen = gc.get_freeze_count()
        assert svc.age_out_of_gc() == "off"
        assert gc.get_freeze_count() == frozen
    finally:
        svc.close()
