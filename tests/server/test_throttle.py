"""Background work in the serving process is duty-cycled (server/throttle.py): it sleeps between
short slices without needing pause points of its own."""

from __future__ import annotations

import sys
import threading

from placement_service.server.throttle import duty_cycle


class FakeClock:
    """Advances 0.1 ms per look; sleeping advances it by the sleep."""

    def __init__(self) -> None:
        self.t = 0.0
        self.slept = 0.0

    def __call__(self) -> float:
        self.t += 0.0001
        return self.t

    def sleep(self, s: float) -> None:
        self.slept += s
        self.t += s


def _work(n: int) -> int:
    total = 0
    for i in range(n):
        total += abs(-i)  # a builtin call: one profile event pair each
    return total


def test_sleeps_after_each_slice_and_only_inside_the_block() -> None:
    clock = FakeClock()
    with duty_cycle(0.001, 0.002, clock=clock, sleep=clock.sleep) as stats:
        _work(20_000)
    assert stats["rests"] >= 10  # 20,000 calls, a look every 64 events, a rest every 10 looks
    assert abs(clock.slept - 0.002 * stats["rests"]) < 1e-9
    assert sys.getprofile() is None  # the hook is gone after the block
    rests = stats["rests"]
    _work(20_000)
    assert stats["rests"] == rests


def test_off_and_nested_and_other_threads_untouched() -> None:
    clock = FakeClock()
    with duty_cycle(0.0, 0.002, clock=clock, sleep=clock.sleep) as off:
        _work(5_000)
    assert off["rests"] == 0 and clock.slept == 0.0
    seen: list[object] = []
    with duty_cycle(0.001, 0.002, clock=clock, sleep=clock.sleep) as outer:
        with duty_cycle(0.001, 0.002, clock=clock, sleep=clock.sleep) as inner:
            _work(5_000)
        thread = threading.Thread(target=lambda: seen.append(sys.getprofile()))
        thread.start()
        thread.join()
    assert inner["rests"] == 0 and outer["rests"] > 0  # the outer hook keeps counting
    assert seen == [None]  # another thread (a request) is never throttled
