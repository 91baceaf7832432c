"""Re-clustering off the critical path: a worker thread that runs the clustering in a child process.

Steps of one run:

1. the worker thread snapshots what the clustering needs from the live state (servers, cores and
   storage per tenant, reimage rates) and hands it to a child process (``spawn``, lowered
   priority, started for this run and gone once it answered), so the heavy FFT / K-means work
   never competes with request threads for the GIL;
2. the child reads the Parquet history of the last ``history_days`` (:func:`compute_class_table`),
   builds each tenant's average-server series, fits ``UtilizationClustering`` and the 3x3 grid
   (and, when asked, the busy-hour profiles and the co-busy estimates on the same series), stores
   the ``classes.json`` document, its co-busy estimates and the node -> label mapping in SQLite in
   one transaction (the child does the serialization work, not the serving process) and returns
   the document with its version;
3. the worker hands both to ``on_table`` (the service loads the estimates stored under that version
   and swaps its policy view with one reference assignment), which then pushes labels to the ResourceManager and writes the Capacity Scheduler
   queue config (both optional, failures logged, never fatal).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReclusterInput:
    history_dir: Path
    slot_s: int
    since_s: float
    until_s: float
    servers_per_tenant: Mapping[str, int]
    cores_per_tenant: Mapping[str, float]
    storage_gb_per_tenant: Mapping[str, float]
    reimage_rate_per_tenant: Mapping[str, float] = field(default_factory=dict)
    seed: int = 0
    max_fill_slots: int = 3
    state_path: Path | None = None  # SQLite state to store the result in (None: do not store)
    node_tenant: Mapping[str, str] = field(default_factory=dict)
    # The service incarnation that asked (``meta.instance_id``): storing is refused once another
    # incarnation owns the database, so a child that outlived its parent cannot write into the next.
    instance_id: str = ""
    # Busy-hour profiles (``core.busy_hours``) for the replica placement: CPU above this is busy
    # (None: no profiles in the table).
    busy_profile_cpu: float | None = None
    # Co-busy estimates (``core.cobusy``, HDFS-H-cobusy) for the replica placement: CPU above this
    # is busy (None: not fitted, nothing stored).
    cobusy_cpu: float | None = None


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent_pid: int) -> None:
    """Child: get SIGKILL when the parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``), and in any case
    watch the parent from a thread (every second: re-parented means orphaned), so a ``kill -9`` of
    the service never leaves a re-clustering running (and writing) on its own.

    The kernel sends the signal when the *thread* that started the child exits: the pool is started
    from the re-clustering worker thread, which lives as long as the service.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError) as exc:
            logger.warning("prctl(PR_SET_PDEATHSIG) unavailable: %s", exc)
    if os.getppid() != parent_pid:  # the parent died before the line above
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _child_init(priority: str, parent_pid: int) -> None:
    _die_with_parent(parent_pid)
    _set_priority(priority)


def _set_priority(priority: str = "idle") -> None:
    """Child initializer: one compute thread (set before numpy / scikit-learn / pyarrow load) and the
    configured CPU priority, so a re-clustering takes at most one core away from the request threads.

    ``idle``: SCHED_IDLE, run only on an otherwise idle CPU, so the clustering never delays a request
    thread (it still finishes in seconds when the machine has any idle time, but waits for as long
    as the machine stays saturated); ``low``: nice 19, always progresses; ``normal``: unchanged.
    """
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        os.environ[var] = "1"
    if priority == "idle":
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return
        except (AttributeError, OSError):
            pass  # no SCHED_IDLE here: fall back to the lowest nice level
    if priority in ("idle", "low"):
        try:
            os.nice(19)
        except OSError:
            pass


def recluster_and_store(inp: ReclusterInput) -> tuple[int, dict[str, Any], dict[str, float]]:
    """Child process: :func:`compute_class_table`, then store it (version 0 when not stored). Also
    returns what the run cost the child: new pages touched (minor faults) and its peak RSS so far."""
    import resource

    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    doc, cobusy = compute_policy_inputs(inp)
    version = 0
    if inp.state_path is not None:
        from placement_service.server.state import StateStore

        tenant_class = {t: v["class"] for t, v in doc["tenants"].items()}
        labels = {n: tenant_class.get(t, "") for n, t in inp.node_tenant.items()}
        store = StateStore(inp.state_path)
        try:
            version = store.save_class_table(doc, labels, instance_id=inp.instance_id or None, cobusy=cobusy)
        finally:
            store.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cost = {"page_faults": float(usage.ru_minflt - faults0), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}
    return version, doc, cost


def compute_class_table(inp: ReclusterInput) -> dict[str, Any]:
    """Cluster the stored history into a ``classes.json`` document (runs in the child process)."""
    return compute_policy_inputs(inp)[0]


def compute_policy_inputs(inp: ReclusterInput) -> tuple[dict[str, Any], bytes | None]:
    """The ``classes.json`` document and, with ``inp.cobusy_cpu``, the co-busy estimates fitted on
    the same tenant series, in their stored form (``server/cobusy_store.py``; None otherwise)."""
    import numpy as np
    import pyarrow as pa

    from placement_service.core.clustering import UtilizationClustering
    from placement_service.core.grid import build_grid
    from placement_service.core.types import TenantSeries
    from placement_service.server.history import HistoryStore
    from placement_service.traces.series import fill_gaps

    pa.set_cpu_count(1)
    store = HistoryStore(inp.history_dir, inp.slot_s, cleanup=False)
    tenants, first_slot_s, cpu = store.tenant_matrix(inp.since_s, inp.until_s)
    if not tenants:
        raise ValueError("no history stored in the re-clustering window")
    filled, gaps = fill_gaps(cpu, inp.max_fill_slots)
    # Tenants with no sample at all cannot be clustered; they stay unclassified.
    keep = ~np.all(np.isnan(filled), axis=1)
    names = tuple(t for t, k in zip(tenants, keep, strict=True) if k)
    series = TenantSeries(
        tenants=names, start_s=float(first_slot_s), interval_s=float(inp.slot_s), cpu=filled[keep],
        long_gaps=tuple((tenants[r], c, n) for r, c, n in gaps if keep[r]),
    )
    model = UtilizationClustering(random_state=inp.seed).fit(
        series,
        servers_per_tenant={t: int(inp.servers_per_tenant.get(t, 1)) for t in names},
        cores_per_tenant={t: float(inp.cores_per_tenant.get(t, 0.0)) for t in names},
    )
    grid = build_grid(
        {t: float(inp.reimage_rate_per_tenant.get(t, 0.0)) for t in names},
        {t: float(model.tenant_grid_peak_cpu_[t]) for t in names},
        {t: float(inp.storage_gb_per_tenant.get(t, 0.0)) for t in names},
    )
    table = model.class_table(grid)
    if inp.busy_profile_cpu is not None:
        from dataclasses import replace

        from placement_service.core.busy_hours import busy_hour_profiles

        table = replace(table, busy_hours=busy_hour_profiles(series, inp.busy_profile_cpu))
    cobusy = None
    if inp.cobusy_cpu is not None:
        from placement_service.core.cobusy import fit_cobusy
        from placement_service.server.cobusy_store import encode_cobusy

        estimates = fit_cobusy(series.tenants, series.cpu, series.start_s, series.interval_s, inp.cobusy_cpu)
        cobusy = encode_cobusy(estimates, inp.cobusy_cpu, series.start_s, series.interval_s, series.cpu.shape[1])
    doc = table.to_json()
    doc[FORECAST_KEY] = forecast_doc(series)
    return doc, cobusy


FORECAST_KEY = "headroom_forecast"


def forecast_doc(series: Any) -> dict[str, Any]:
    """The headroom forecast of every tenant (``core.forecast.fit_headroom_forecast``, its defaults:
    the 0.9 quantile of the next hour's peak per UTC hour of day), for the class table document:
    ``{"horizon_s", "quantile", "hourly_peak_frac": {tenant: [24 fractions]}}``. Each fraction is
    rounded *up* to 1e-4 (a smaller document; the forecast's growth can only grow by it)."""
    import numpy as np

    from placement_service.core.forecast import fit_headroom_forecast

    fc = fit_headroom_forecast(series)
    hourly = np.minimum(1.0, np.ceil(fc.hourly * 1e4 - 1e-9) / 1e4)
    return {"horizon_s": fc.horizon_s, "quantile": fc.quantile,
            "hourly_peak_frac": {t: [float(x) for x in row] for t, row in zip(fc.tenants, hourly, strict=True)}}


class ReclusterWorker:
    """Runs re-clustering on a schedule and on demand, one run at a time (see the module docstring)."""

    def __init__(
        self,
        make_input: Callable[[], ReclusterInput],
        on_table: Callable[[int, dict[str, Any]], None],
        interval_s: float,
        priority: str = "idle",
    ) -> None:
        self._make_input = make_input
        self._on_table = on_table
        self._interval_s = interval_s
        self._priority = priority
        self._cond = threading.Condition()
        self._requested = False
        self._stopping = False
        self.running = False
        self.runs = 0
        self.failures = 0
        self.last_error = ""
        self.last_duration_s = 0.0
        self.last_finished_s = 0.0
        # Wall time of each step of the last good run (input snapshot, child, adoption in the server).
        self.last_phases_s: dict[str, float] = {}
        # The child's side of the last good run: pages it touched (minor faults) and its peak
        # resident memory.
        self.last_child: dict[str, float] = {}
        self._pool: ProcessPoolExecutor | None = None
        self._thread = threading.Thread(target=self._loop, name="recluster", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self) -> bool:
        """Ask for a run; False when one is already queued (a running one still counts as fresh)."""
        with self._cond:
            already = self._requested
            self._requested = True
            self._cond.notify_all()
            return not already

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=5)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def status(self) -> dict[str, Any]:
        return {
            "running": self.running, "queued": self._requested, "runs": self.runs, "failures": self.failures,
            "last_error": self.last_error, "last_duration_s": self.last_duration_s,
            "last_finished_s": self.last_finished_s, "last_phases_s": dict(self.last_phases_s),
            "last_child": dict(self.last_child),
        }

    def _loop(self) -> None:
        next_due = time.monotonic() + self._interval_s if self._interval_s > 0 else float("inf")
        while True:
            due = next_due
            with self._cond:
                self._cond.wait_for(
                    lambda due=due: self._requested or self._stopping or time.monotonic() >= due,  # type: ignore[misc]
                    timeout=max(0.0, min(due - time.monotonic(), 60.0)),
                )
                if self._stopping:
                    return
                if not self._requested and time.monotonic() < next_due:
                    continue
                self._requested = False
                self.running = True
            self._run_once()
            with self._cond:
                self.running = False
                self._cond.notify_all()
            if self._interval_s > 0:
                next_due = time.monotonic() + self._interval_s

    def _run_once(self) -> None:
        start = time.monotonic()
        try:
            inp = self._make_input()
            t_input = time.monotonic()
            # A new process per run, gone once it answered: between the daily runs the service holds
            # no second process with the clustering's libraries and its last run's memory.
            pool = self._pool = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_child_init,
                initargs=(self._priority, os.getpid()),
            )
            try:
                version, doc, child = pool.submit(recluster_and_store, inp).result()
            finally:
                pool.shutdown(wait=True)
                self._pool = None
            t_child = time.monotonic()
            self._on_table(version, doc)
            t_adopt = time.monotonic()
            self.runs += 1
            self.last_error = ""
            self.last_phases_s = {"input": round(t_input - start, 3), "child": round(t_child - t_input, 3),
                                  "adopt": round(t_adopt - t_child, 3)}
            self.last_child = child
            logger.info("re-clustering v%d took %.1f s: input %.3f s, child %.1f s (%d new pages, peak %.0f MB), "
                        "adoption %.3f s", version, t_adopt - start, t_input - start, t_child - t_input,
                        child["page_faults"], child["peak_rss_mb"], t_adopt - t_child)
        except Exception as exc:  # a failed run keeps the old table (the safe side)
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            logger.warning("re-clustering failed, keeping the current class table: %s", self.last_error)
        finally:
            self.last_duration_s = time.monotonic() - start
            self.last_finished_s = time.time()

    def wait_idle(self, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._requested and not self.running, timeout=timeout_s)
