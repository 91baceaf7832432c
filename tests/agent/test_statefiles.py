"""Atomic writes, change-only writes with heartbeat (injected clock), and the error-log throttle."""

from __future__ import annotations

import os

from agent.statefiles import StateFile, Throttle, atomic_write


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "f"
    atomic_write(str(path), "one\n")
    atomic_write(str(path), b"two\n")
    assert path.read_text() == "two\n"
    assert os.listdir(tmp_path) == ["f"]


def test_state_file_writes_on_change_and_heartbeats_only_while_healthy(tmp_path):
    clock = Clock()
    path = tmp_path / "node-label"
    state = StateFile(str(path), heartbeat_s=60, clock=clock)
    assert state.set("constant-2") is True and path.read_text() == "constant-2\n"
    os.utime(path, (1, 1))
    clock.now = 30
    assert state.set("constant-2") is False and os.stat(path).st_mtime == 1  # no write, no touch yet
    clock.now = 61
    assert state.set("constant-2", healthy=False) is False and os.stat(path).st_mtime == 1  # unhealthy: stale
    assert state.set("constant-2") is False and os.stat(path).st_mtime > 1  # healthy heartbeat
    assert state.set("periodic-1") is True and path.read_text() == "periodic-1\n"
    assert StateFile(str(path)).content == "periodic-1\n"  # remembered across restarts
    assert state.writes == 2


def test_throttle_logs_once_per_interval_and_counts_the_rest():
    clock = Clock()
    throttle = Throttle(60, clock=clock)
    assert throttle.should_log("rm") == (True, 0)
    for t in range(1, 10):
        clock.now = t
        assert throttle.should_log("rm") == (False, 0)
    assert throttle.should_log("report") == (True, 0)  # kinds are separate
    clock.now = 60
    assert throttle.should_log("rm") == (True, 9)
