"""Real processes for agent tests and benchmarks: a small "node" of containers and a primary.

The machine is shared, so the agent under test measures only a process tree (``--scope-root-pid``):
a supervisor process stands for the node, and every container and primary process is its child.
Containers carry ``CONTAINER_ID`` and run in their own session (process group), as YARN launches
them; each prints ``ready`` once its memory is resident. The primary waits for SIGUSR1, then
allocates ``spike_mb`` and burns one CPU (a GIL-bound thread: at most about one core).
``Node.cleanup`` kills every group and the supervisor, even after a failed test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection

import psutil

CONTAINER_CODE = r"""
import sys, time
mb, burn = int(sys.argv[1]), sys.argv[2] == "1"
hold = bytearray(mb * 1024 * 1024)
for i in range(0, len(hold), 4096):
    hold[i] = 1
print("ready", flush=True)
while True:
    if burn:
        x = 0
        for _ in range(200000):
            x += 1
    else:
        time.sleep(3600)
"""

PRIMARY_CODE = r"""
import signal, sys, threading, time
spike_mb, threads = int(sys.argv[1]), int(sys.argv[2])
hold = []

def burn():
    x = 0
    while True:
        x += 1

def spike(signum, frame):
    block = bytearray(spike_mb * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    hold.append(block)
    for _ in range(threads):
        threading.Thread(target=burn, daemon=True).start()
    print("spiked", flush=True)

signal.signal(signal.SIGUSR1, spike)
print("ready", flush=True)
while True:
    time.sleep(3600)
"""

SUPERVISOR_CODE = r"""
import json, os, signal, subprocess, sys
children = []
for line in sys.stdin:
    cmd = json.loads(line)
    with open(cmd["out"], "w") as out:
        child = subprocess.Popen(cmd["argv"], env=cmd["env"], stdout=out, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    children.append(child)
    for c in children:
        c.poll()
    print(child.pid, flush=True)
for c in children:
    try:
        os.killpg(c.pid, signal.SIGKILL)
    except OSError:
        pass
"""


def wait_until(predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return bool(predicate())


class Child:
    def __init__(self, pid: int, out: str) -> None:
        self.pid = pid
        self.out = out

    def output(self) -> str:
        try:
            with open(self.out) as handle:
                return handle.read()
        except OSError:
            return ""

    def alive(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
            return state not in ("Z", "X")
        except OSError:
            return False


class Node:
    """A supervisor process standing for the node; spawns containers and primaries as its children."""

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="agent-node-")
        self.supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR_CODE], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.pid = self.supervisor.pid
        self.children: list[Child] = []
        self.container_pids: set[int] = set()  # secondary: their CPU is never charged to the primary
        self._lock = threading.Lock()  # a fake NodeManager's thread launches containers too

    def _spawn(self, code: str, args: list[str], env: dict[str, str], timeout_s: float = 30.0,
               wait: bool = True) -> Child:
        assert self.supervisor.stdin is not None and self.supervisor.stdout is not None
        with self._lock:
            out = os.path.join(self.tmp, f"child-{len(self.children)}.out")
            self.supervisor.stdin.write(json.dumps({"argv": [sys.executable, "-c", code, *args], "env": env,
                                                    "out": out}) + "\n")
            self.supervisor.stdin.flush()
            child = Child(int(self.supervisor.stdout.readline()), out)
            self.children.append(child)
        assert not wait or wait_until(lambda: "ready" in child.output(), timeout_s), "child did not start"
        return child

    def container(self, container_id: str, memory_mb: int = 0, burn: bool = False, wait: bool = True) -> Child:
        """``wait=False``: return once the process exists (a fake NM launching it; it may be killed
        before it is ready)."""
        env = {k: v for k, v in os.environ.items() if k != "CONTAINER_ID"}
        env["CONTAINER_ID"] = container_id
        child = self._spawn(CONTAINER_CODE, [str(memory_mb), "1" if burn else "0"], env, wait=wait)
        self.container_pids.add(child.pid)
        return child

    def primary(self, spike_mb: int = 0, spike_threads: int = 0) -> Child:
        env = {k: v for k, v in os.environ.items() if k != "CONTAINER_ID"}
        return self._spawn(PRIMARY_CODE, [str(spike_mb), str(spike_threads)], env)

    def settle(self, max_cores: float = 0.05, timeout_s: float = 30.0, exclude: Collection[int] = ()) -> None:
        """Wait until the node's non-container processes (the supervisor, primaries, daemons),
        averaged since they started, use under ``max_cores`` in all.

        An agent's first sample charges a young process its average CPU since start (the safe
        side), so a test that starts an agent right after spawning would see the children's
        start-up (interpreter, imports) as primary load: 0.1-0.3 core on a busy machine, rounded up
        to a whole core. Tests that assert the first advertised size wait for this first.
        ``exclude``: pids that burn CPU on purpose (a busy daemon)."""
        def average_cores() -> float:
            total = 0.0
            for pid in [self.pid, *(c.pid for c in self.children)]:
                if pid in exclude or pid in self.container_pids:
                    continue
                try:
                    proc = psutil.Process(pid)
                    t = proc.cpu_times()
                    total += (t.user + t.system) / max(time.time() - proc.create_time(), 1e-3)
                except psutil.NoSuchProcess:
                    continue
            return total

        assert wait_until(lambda: average_cores() < max_cores, timeout_s, step_s=0.1), (
            f"node processes still average {average_cores():.3f} cores after {timeout_s:g} s")

    @staticmethod
    def spike(primary: Child, timeout_s: float = 30.0) -> float:
        """Make the primary spike; returns the monotonic time its memory is resident."""
        os.kill(primary.pid, signal.SIGUSR1)
        assert wait_until(lambda: "spiked" in primary.output(), timeout_s, step_s=0.005)
        return time.monotonic()

    def cleanup(self) -> None:
        for child in self.children:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(self.supervisor.pid, signal.SIGKILL)
        except OSError:
            pass
        self.supervisor.wait(timeout=10)
        for stream in (self.supervisor.stdin, self.supervisor.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self.children.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)
