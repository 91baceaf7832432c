"""``harvest serve`` helpers: the GC pause watcher must never take a lock inside the collector."""

from __future__ import annotations

import gc
import threading

from placement_service.server.cli import _watch_gc
from placement_service.server.metrics import Metrics


def test_gc_callback_takes_no_lock_and_pauses_reach_metrics() -> None:
    metrics = Metrics()
    before = list(gc.callbacks)
    _watch_gc(metrics)
    try:
        done = threading.Event()

        def collect_while_holding_the_metrics_lock() -> None:
            with metrics._lock:  # a collection can start inside any allocation, e.g. here
                gc.collect()
            done.set()

        worker = threading.Thread(target=collect_while_holding_the_metrics_lock, daemon=True)
        worker.start()
        worker.join(timeout=10)
        assert done.is_set(), "the GC callback blocked on the metrics lock (deadlock)"
        assert 'harvest_gc_pause_seconds_count{generation="2"}' in metrics.render()
    finally:
        gc.callbacks[:] = before
