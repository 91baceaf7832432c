"""Live placement quality, the strict-mode switch, a bounded decision log, and loop heartbeats.

Placement quality (pure bookkeeping, fed by every placement decision): over the last ``window``
blocks, the share whose replicas sit in distinct grid rows, distinct grid columns and distinct
environments, and the share that needed a relaxation. The paper's production lesson: when replica
diversity quietly degrades, durability does too, so the service should refuse a target rather
than keep placing without diversity. :class:`StrictSwitch` turns strict mode on when the share of
fully diverse blocks drops below ``enter_below`` (over at least ``min_blocks`` blocks) and off
again only once it is back above ``leave_above`` (hysteresis, so it does not flap).

:class:`DecisionLog` keeps a sampled, bounded record of decisions (block id -> targets, cells,
relaxation, reason) to answer "why did block X go there" without unbounded memory.

:class:`Heartbeats` records when each periodic loop last finished a round; its ages are exported
as metrics and in health, so a loop that stalls is visible even when the process still answers.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Diversity:
    """What one block's replicas achieved."""

    rows: bool
    columns: bool
    environments: bool
    relaxed: bool

    @property
    def full(self) -> bool:
        return self.rows and self.columns and self.environments


def diversity_of(rows: Sequence[int | None], columns: Sequence[int | None], environments: Sequence[str],
                 relaxed: bool) -> Diversity:
    """Distinctness of a block's replicas (a replica outside the grid, None, breaks distinctness)."""
    n = len(environments)

    def distinct(xs: Sequence[Any]) -> bool:
        return None not in xs and len(set(xs)) == len(xs)

    k = min(n, 3)  # a 3x3 grid has 3 rows and 3 columns: the first 3 replicas must differ
    return Diversity(rows=distinct(list(rows)[:k]), columns=distinct(list(columns)[:k]),
                     environments=distinct(list(environments)), relaxed=relaxed)


class QualityTracker:
    """Rolling shares over the last ``window`` blocks; thread-safe, O(1) per block (running sums
    over the window, the block leaving the window subtracted)."""

    _KEYS = ("rows", "columns", "environments", "full", "relaxed")

    def __init__(self, window: int = 10_000) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self._recent: deque[Diversity] = deque()
        self._window = window
        self._sums = dict.fromkeys(self._KEYS, 0)
        self._lock = threading.Lock()
        self.total_blocks = 0
        self.total_relaxed = 0

    @staticmethod
    def _flags(d: Diversity) -> tuple[bool, ...]:
        return d.rows, d.columns, d.environments, d.full, d.relaxed

    def record(self, d: Diversity) -> None:
        with self._lock:
            self._recent.append(d)
            for k, v in zip(self._KEYS, self._flags(d), strict=True):
                self._sums[k] += v
            if len(self._recent) > self._window:
                old = self._recent.popleft()
                for k, v in zip(self._KEYS, self._flags(old), strict=True):
                    self._sums[k] -= v
            self.total_blocks += 1
            self.total_relaxed += int(d.relaxed)

    def shares(self) -> dict[str, float]:
        with self._lock:
            n = len(self._recent)
            sums = dict(self._sums)
        if n == 0:
            return {"blocks": 0.0, **dict.fromkeys(self._KEYS, math.nan)}
        return {"blocks": float(n), **{k: sums[k] / n for k in self._KEYS}}


@dataclass(frozen=True)
class StrictPolicy:
    """When to switch to strict placement (refuse rather than place without diversity)."""

    enabled: bool = True
    enter_below: float = 0.95  # share of fully diverse blocks
    leave_above: float = 0.99
    min_blocks: int = 200

    def __post_init__(self) -> None:
        for name in ("enter_below", "leave_above"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and 0.0 <= v <= 1.0):
                raise ValueError(f"strict policy: {name} must be in [0, 1], got {v!r}")
        if self.leave_above < self.enter_below:
            raise ValueError("strict policy: leave_above must be >= enter_below")
        if not (isinstance(self.min_blocks, int) and self.min_blocks >= 1):
            raise ValueError(f"strict policy: min_blocks must be an integer >= 1, got {self.min_blocks!r}")


class StrictSwitch:
    """Strict mode on below ``enter_below``, off above ``leave_above``; records why it last changed."""

    def __init__(self, policy: StrictPolicy, clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.strict = False
        self.reason = "placement diversity not yet measured"
        self.changed_at: float | None = None
        self._clock = clock

    def update(self, shares: Mapping[str, float]) -> bool:
        """Re-evaluate from the tracker's shares; returns whether strict mode is on."""
        p = self.policy
        n, full = shares.get("blocks", 0.0), shares.get("full", math.nan)
        if not p.enabled or n < p.min_blocks or math.isnan(full):
            return self.strict
        if not self.strict and full < p.enter_below:
            self.strict, self.changed_at = True, self._clock()
            self.reason = (f"strict: only {100 * full:.1f}% of the last {int(n)} blocks had distinct rows, columns "
                           f"and environments (threshold {100 * p.enter_below:.1f}%)")
        elif self.strict and full >= p.leave_above:
            self.strict, self.changed_at = False, self._clock()
            self.reason = (f"relaxed placement allowed again: {100 * full:.1f}% of the last {int(n)} blocks fully "
                           f"diverse (>= {100 * p.leave_above:.1f}%)")
        return self.strict


class DecisionLog:
    """The last sampled decisions, looked up by key (e.g. block id); thread-safe.

    Bounded twice: at most ``capacity`` entries and at most ``max_bytes`` bytes, the oldest going
    first. Each entry is held as its compact JSON encoding (decoded again when read), so its size
    in memory is its counted size (``len(json) + len(key) + ENTRY_OVERHEAD_BYTES``) and no caller
    can keep more than the budget, however large its request; an entry larger than the whole
    budget is not kept.
    """

    ENTRY_OVERHEAD_BYTES = 200  # the bytes object, the key string and the ordered-dict slot

    def __init__(self, capacity: int = 10_000, sample: float = 1.0, seed: int = 0,
                 max_bytes: int = 16 * 1024 * 1024) -> None:
        if capacity < 1 or not (0.0 <= sample <= 1.0) or max_bytes < 1:
            raise ValueError("decision log: capacity >= 1, max_bytes >= 1 and 0 <= sample <= 1")
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._sample = sample
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.bytes = 0  # counted size of what is held now
        self.recorded = 0
        self.too_large = 0  # entries not kept because each alone exceeded the budget

    def _size(self, key: str, blob: bytes) -> int:
        return len(blob) + len(key) + self.ENTRY_OVERHEAD_BYTES

    def record(self, key: str, entry: Mapping[str, Any], *, force: bool = False) -> bool:
        """Keep ``entry`` under ``key`` if sampled (always when ``force``); returns whether kept."""
        with self._lock:
            if not force and self._rng.random() >= self._sample:
                return False
        blob = json.dumps({**entry, "key": key, "at": time.time()}, separators=(",", ":"), default=str).encode()
        size = self._size(key, blob)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= self._size(key, old)
            if size > self._max_bytes:
                self.too_large += 1
                return False
            self._items[key] = blob
            self.bytes += size
            while len(self._items) > self._capacity or self.bytes > self._max_bytes:
                k, b = self._items.popitem(last=False)
                self.bytes -= self._size(k, b)
            self.recorded += 1
            return True

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            blob = self._items.get(key)
        return json.loads(blob) if blob is not None else None

    def recent(self, n: int = 20) -> list[dict[str, Any]]:
        with self._lock:
            blobs = list(self._items.values())[-n:] if n > 0 else []
        return [json.loads(b) for b in blobs]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class Heartbeats:
    """Last completed round per named loop (monotonic clock); ages in seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._beats: dict[str, float] = {}
        self._expected: dict[str, float] = {}
        self._lock = threading.Lock()

    def register(self, loop: str, expected_interval_s: float) -> None:
        """A loop expected to beat every ``expected_interval_s`` (counted from registration)."""
        with self._lock:
            self._expected[loop] = float(expected_interval_s)
            self._beats.setdefault(loop, self._clock())

    def beat(self, loop: str) -> None:
        with self._lock:
            self._beats[loop] = self._clock()

    def ages(self) -> dict[str, float]:
        now = self._clock()
        with self._lock:
            return {loop: now - t for loop, t in self._beats.items()}

    def stalled(self, factor: float = 3.0) -> dict[str, float]:
        """Loops whose age exceeds ``factor`` x their expected interval: {loop: age_s}."""
        ages = self.ages()
        with self._lock:
            expected = dict(self._expected)
        return {k: a for k, a in ages.items() if k in expected and a > factor * max(expected[k], 1e-3)}

    def export(self, set_gauge: Callable[..., None], name: str) -> dict[str, float]:
        """Write each loop's age as gauge ``name{loop=...}`` (a metrics collector; returns no extra gauges)."""
        for loop, age in self.ages().items():
            set_gauge(name, age, loop=loop)
        return {}
