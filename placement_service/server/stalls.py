"""Stall tracing for latency benchmarks: what the server was doing when a decision waited.

Off unless ``HARVEST_STALL_TRACE=<file>`` is set in the server's environment (the decisions
benchmark sets it). Then, in the server process:

1. every ``ChooseTargets`` call records its handler time and its decision time (epoch seconds and
   milliseconds), so a slow call seen by a client is split into queueing before the handler,
   the decision itself, and what came after;
2. a ticker on the gRPC event loop beats every 1 ms; a watchdog thread that sees no beat for
   ``threshold_ms`` (20) records the stall and, once per stall, every other thread's stack: the
   thread holding the interpreter then is the one not parked in a wait;
3. ``gc.callbacks`` record every collection longer than 2 ms (generation, pause, thread).

On ``stop`` everything is written to the file as one JSON document. Costs a few microseconds per
call and a thread waking every 2 ms: for benchmarks, not production.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

ENV = "HARVEST_STALL_TRACE"


class StallTracer:
    def __init__(self, path: str, threshold_ms: float = 20.0) -> None:
        self.path = path
        self.threshold_s = threshold_ms / 1000.0
        self.requests: list[tuple[float, float, float]] = []  # (epoch start, handler ms, decision ms)
        self.gc_pauses: list[tuple[float, float, int, str]] = []  # (epoch start, ms, generation, thread)
        self.stalls: list[dict[str, Any]] = []
        self._beat = time.perf_counter()
        self._gc_start = 0.0
        self._stop = threading.Event()
        self._offset = time.time() - time.perf_counter()
        gc.callbacks.append(self._on_gc)
        self._thread = threading.Thread(target=self._watch, name="stall-watchdog", daemon=True)
        self._thread.start()

    def epoch(self, t_perf: float) -> float:
        return self._offset + t_perf

    def request(self, start: float, decided: float, end: float) -> None:
        self.requests.append((self.epoch(start), 1000.0 * (end - start), 1000.0 * (decided - start)))

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_start
        if took > 0.002:
            self.gc_pauses.append((self.epoch(self._gc_start), 1000.0 * took, int(info.get("generation", -1)),
                                   threading.current_thread().name))

    async def ticker(self) -> None:
        """Run on the event loop: beat every millisecond."""
        while not self._stop.is_set():
            self._beat = time.perf_counter()
            await asyncio.sleep(0.001)

    def _watch(self) -> None:
        current: dict[str, Any] | None = None
        me = threading.get_ident()
        while not self._stop.wait(0.002):
            now = time.perf_counter()
            lag = now - self._beat
            if lag < self.threshold_s:
                if current is not None:
                    current["ms"] = round(1000.0 * (now - current["_t"]), 1)
                    del current["_t"]
                    self.stalls.append(current)
                    current = None
                continue
            if current is None:
                names = {t.ident: t.name for t in threading.enumerate()}
                stacks = {}
                for ident, frame in sys._current_frames().items():
                    if ident == me:
                        continue
                    lines = traceback.format_stack(frame, limit=8)
                    stacks[names.get(ident, str(ident))] = [ln.strip().split("\n")[0] for ln in lines]
                current = {"at": self.epoch(self._beat), "_t": self._beat, "seen_after_ms": round(1000 * lag, 1),
                           "stacks": stacks}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        doc = {"pid": os.getpid(), "requests": self.requests, "gc_pauses": self.gc_pauses, "stalls": self.stalls}
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
        os.replace(tmp, self.path)


def from_env() -> StallTracer | None:
    path = os.environ.get(ENV, "")
    return StallTracer(path) if path else None
