"""Duty-cycling of background Python work in the serving process.

A background thread that rebuilds the policy view (a new class table, nodes that joined) runs
~100 ms of pure-Python CPU work. Under the GIL it takes turns with the request threads, and every
turn the gRPC event loop gives up (each read, each write) costs it a switch interval to get back: at
1,000 ``ChooseTargets`` per second the loop then falls behind and calls queue for 100-200 ms. Sleeping
between short slices of the build leaves the loop whole windows to drain its queue; the build takes
a few times longer (once per table or node-set change), no request waits behind it.

The slices are cut by a profile hook (called on every function call and return of this thread
only), so the code being throttled needs no pause points of its own.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

CHECK_EVERY = 64  # profile events between two looks at the clock (keeps the hook cheap)


@contextmanager
def duty_cycle(work_s: float = 0.001, rest_s: float = 0.002,
               clock: Callable[[], float] = time.perf_counter,
               sleep: Callable[[float], None] = time.sleep) -> Iterator[dict[str, int]]:
    """Within the block, this thread sleeps ``rest_s`` after each ``work_s`` of wall time it ran.

    Yields a dict whose ``rests`` counts the sleeps taken (for logs and tests). ``work_s`` or
    ``rest_s`` <= 0 turns the throttle off. Nested use keeps the outer hook.
    """
    stats = {"rests": 0}
    if work_s <= 0 or rest_s <= 0 or sys.getprofile() is not None:
        yield stats
        return
    state = {"since": clock(), "events": 0}

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        state["events"] += 1
        if state["events"] % CHECK_EVERY:
            return
        if clock() - state["since"] >= work_s:
            sleep(rest_s)
            stats["rests"] += 1
            state["since"] = clock()

    sys.setprofile(hook)
    try:
        yield stats
    finally:
        sys.setprofile(None)
