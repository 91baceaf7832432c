"""Adapter: run sub-problems as Dask tasks, on a LocalCluster or an existing scheduler.

- The shared input (the whole region) is scattered once, to every worker (``broadcast``), so a task
  that Dask resubmits after its worker died finds its input on the survivors; each task then gets
  only its small part description.
- ``LocalCluster`` default: one worker process per core, one thread each (HiGHS runs one thread per
  sub-problem); ``scheduler`` connects to an existing cluster instead (``tcp://HOST:PORT``).
- A task that raises, or is still running at its deadline, or whose scheduler went away, is reported
  by index with the reason; the others' results are kept. Progress (done/total and the gaps of the
  finished parts) goes to ``progress`` and the log.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from placement_service.capacity import CapacityError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    index: int
    value: Any = None
    error: str | None = None


def connect(scheduler: str | None, workers: int | None, timeout_s: float = 10.0) -> tuple[Any, Any]:
    """A ``distributed.Client`` (and the LocalCluster it owns, or None); a clear error if unreachable."""
    from distributed import Client, LocalCluster

    if not logger.isEnabledFor(logging.DEBUG):  # Dask's own INFO chatter and shutdown noise stay out of stderr
        for name in ("distributed", "tornado", "asyncio"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    if scheduler:
        if "://" not in scheduler:
            scheduler = f"tcp://{scheduler}"
        try:
            return Client(scheduler, timeout=f"{timeout_s}s", set_as_default=True), None
        except (OSError, TimeoutError) as exc:
            raise CapacityError(f"--dask-scheduler {scheduler}: cannot reach the scheduler ({exc.__class__.__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else 'no answer'})") from None  # fmt: skip
    n = workers or os.cpu_count() or 1
    if n < 1:
        raise CapacityError(f"--workers must be >= 1, got {n}")
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0",
                           host="127.0.0.1", silence_logs=logging.CRITICAL)  # fmt: skip
    return Client(cluster, set_as_default=True), cluster


def run_parts(
    client: Any,
    fn: Callable[..., Any],
    shared: Any,
    specs: Sequence[Any],
    args: tuple[Any, ...] = (),
    *,
    timeout_s: float,
    extra: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]] = (),
    progress: Callable[[int, int, list[Any]], None] | None = None,
) -> tuple[list[Outcome], list[Outcome]]:
    """``fn(shared, spec, *args)`` per spec on the cluster; ``extra`` tasks ``f(shared, *a)`` alongside.

    Returns the outcomes of the specs (in order) and of the extra tasks; never raises for a task's
    failure, a timeout or a lost scheduler (they become ``Outcome.error``).
    """
    from distributed import wait

    n = len(specs)
    outcomes: dict[int, Outcome] = {}
    tag = uuid.uuid4().hex[:12]
    try:
        shared_f = client.scatter(shared, broadcast=True, hash=False)
        futs = [client.submit(fn, shared_f, spec, *args, key=f"pop-part-{i}-{tag}", pure=False, retries=1)
                for i, spec in enumerate(specs)]  # fmt: skip
        futs += [client.submit(f, shared_f, *a, key=f"pop-extra-{i}-{tag}", pure=False, priority=-1)
                 for i, (f, a) in enumerate(extra)]  # fmt: skip
    except Exception as exc:  # noqa: BLE001 (scheduler gone before submission: every part is lost)
        msg = f"could not submit to the Dask scheduler: {exc.__class__.__name__}: {exc}"
        return [Outcome(i, error=msg) for i in range(n)], [Outcome(i, error=msg) for i in range(len(extra))]
    index_of = {f.key: i for i, f in enumerate(futs)}
    pending = set(futs)
    deadline = time.monotonic() + timeout_s
    done_values: list[Any] = []
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            done, pending_now = wait(list(pending), timeout=min(left, 5.0), return_when="FIRST_COMPLETED")
        except TimeoutError:
            continue
        except Exception as exc:  # noqa: BLE001 (connection to the scheduler lost)
            msg = f"lost the Dask scheduler: {exc.__class__.__name__}: {exc}"
            for f in pending:
                outcomes[index_of[f.key]] = Outcome(index_of[f.key], error=msg)
            pending = set()
            break
        parts_done = False
        for f in done:
            i = index_of[f.key]
            parts_done |= i < n
            try:
                value = f.result(timeout=30)
                outcomes[i] = Outcome(i, value=value)
                if i < n:
                    done_values.append(value)
            except Exception as exc:  # noqa: BLE001 (the task raised, or its worker died too often)
                outcomes[i] = Outcome(i, error=f"{exc.__class__.__name__}: {exc}")
        pending = set(pending_now)
        if parts_done and progress is not None:
            progress(sum(1 for i in outcomes if i < n), n, done_values)
        if client.status not in ("running", "connecting", "newly-created"):
            msg = f"lost the Dask scheduler (client {client.status})"
            for f in pending:
                outcomes[index_of[f.key]] = Outcome(index_of[f.key], error=msg)
            pending = set()
    for f in pending:
        i = index_of[f.key]
        outcomes[i] = Outcome(i, error=f"timed out after {timeout_s:.0f} s")
        try:
            f.cancel()
        except Exception:  # noqa: BLE001,S110 (best effort)
            pass
    parts = [outcomes[i] for i in range(n)]
    extras = [Outcome(j, value=outcomes[n + j].value, error=outcomes[n + j].error) for j in range(len(extra))]
    return parts, extras


def map_parts(client: Any, timeout_s: float) -> Callable[[Callable[..., Any], Any, Sequence[Any], tuple[Any, ...]], list[Any]]:
    """A runner ``(fn, shared, specs, args) -> [fn(shared, spec, *args) ...]`` on ``client`` that needs
    every part: the first part that failed or timed out raises, naming its index and reason."""

    def run(fn: Callable[..., Any], shared: Any, specs: Sequence[Any], args: tuple[Any, ...]) -> list[Any]:
        def progress(done: int, total: int, _values: list[Any]) -> None:
            logger.warning("pop: %d/%d sub-problems done", done, total)

        parts, _ = run_parts(client, fn, shared, specs, args, timeout_s=timeout_s, progress=progress)
        for o in parts:
            if o.error is not None:
                raise CapacityError(f"sub-problem {o.index} did not finish: {o.error}")
        return [o.value for o in parts]

    return run
