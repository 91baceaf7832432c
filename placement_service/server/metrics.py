"""Prometheus text-format metrics (counters, gauges, latency histograms) without extra dependencies."""

from __future__ import annotations

import threading
from collections.abc import Callable

from placement_service import __version__

# Latency buckets (seconds): fine below 10 ms, where the block-placement path must stay.
BUCKETS_S: tuple[float, ...] = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)

Labels = tuple[tuple[str, str], ...]


def _fmt_labels(labels: Labels, extra: tuple[tuple[str, str], ...] = ()) -> str:
    items = labels + extra
    if not items:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in items) + "}"


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, Labels], float] = {}
        self._gauges: dict[tuple[str, Labels], float] = {}
        self._hist: dict[tuple[str, Labels], list[float]] = {}  # bucket counts..., count, sum
        self._collectors: list[Callable[[], dict[str, float]]] = []
        self.set("harvest_build_info", 1.0, version=__version__)  # which release of the service runs

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._counters[key] = self._counters.get(key, 0.0) + value

    def set(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self._gauges[(name, tuple(sorted(labels.items())))] = float(value)

    def observe(self, name: str, seconds: float, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            h = self._hist.get(key)
            if h is None:
                h = self._hist[key] = [0.0] * (len(BUCKETS_S) + 2)
            for i, b in enumerate(BUCKETS_S):
                if seconds <= b:
                    h[i] += 1
                    break
            h[-2] += 1
            h[-1] += seconds

    def add_collector(self, fn: Callable[[], dict[str, float]]) -> None:
        """``fn`` returns gauges computed at scrape time."""
        self._collectors.append(fn)

    def counter(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._counters.get((name, tuple(sorted(labels.items()))), 0.0)

    def gauge(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._gauges.get((name, tuple(sorted(labels.items()))), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        collected = {}
        for fn in self._collectors:  # outside the lock: a collector may record metrics itself
            collected.update(fn())
        with self._lock:
            counters = dict(self._counters)
            gauges = dict(self._gauges)
            hist = {k: list(v) for k, v in self._hist.items()}
        for name, value in collected.items():
            gauges[(name, ())] = value
        seen: set[str] = set()
        for (name, labels), value in sorted(counters.items()):
            if name not in seen:
                lines.append(f"# TYPE {name} counter")
                seen.add(name)
            lines.append(f"{name}{_fmt_labels(labels)} {value:g}")
        for (name, labels), value in sorted(gauges.items()):
            if name not in seen:
                lines.append(f"# TYPE {name} gauge")
                seen.add(name)
            lines.append(f"{name}{_fmt_labels(labels)} {value:g}")
        for (name, labels), h in sorted(hist.items()):
            if name not in seen:
                lines.append(f"# TYPE {name} histogram")
                seen.add(name)
            cum = 0.0
            for i, b in enumerate(BUCKETS_S):
                cum += h[i]
                lines.append(f"{name}_bucket{_fmt_labels(labels, (('le', f'{b:g}'),))} {cum:g}")
            lines.append(f"{name}_bucket{_fmt_labels(labels, (('le', '+Inf'),))} {h[-2]:g}")
            lines.append(f"{name}_count{_fmt_labels(labels)} {h[-2]:g}")
            lines.append(f"{name}_sum{_fmt_labels(labels)} {h[-1]:g}")
        return "\n".join(lines) + "\n"
