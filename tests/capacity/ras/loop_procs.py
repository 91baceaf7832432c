"""Real processes for the capacity loop (tests and ``benchmarks/bench_ras_loop.py``): ``harvest ras
serve``, two ``harvest serve`` linked to it, and in-process agents on fake nodes, all on 127.0.0.1.

Region: 3 MSBs x 4 servers, one reservation of 4 RRU (2 servers in each MSB), a shared buffer of
2; the other 6 servers are elastic, lent to clusters c1 / c2 (alternating servers).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from agent.config import load_config
from agent.runtime import Agent
from tests.agent.agent_proc import ROOT
from tests.agent.procs import Node

TOKEN = "loop-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def call(url: str, method: str = "GET", body: Any = None) -> Any:
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def try_call(url: str) -> Any:
    try:
        return call(url)
    except (OSError, urllib.error.URLError):
        return None


class Proc:
    def __init__(self, args: list[str], log: Path) -> None:
        self.args, self.log_path = args, log
        self.log = open(log, "a")
        self.proc = subprocess.Popen([sys.executable, "-m", "placement_service.cli", *args], cwd=ROOT,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()

    def restart(self) -> Proc:
        self.stop()
        return Proc(self.args, self.log_path)


def write_region(tmp: Path) -> tuple[Path, Path]:
    inv = tmp / "inventory.csv"
    with open(inv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["server", "hardware", "datacenter", "msb", "rack", "available", "in_use", "cluster"])
        for i in range(12):
            m = i // 4
            w.writerow([f"n{i:02d}", "hw", "dc1", f"msb{m}", f"msb{m}-r{i % 2}", "true", "false",
                        "c1" if i % 2 == 0 else "c2"])  # fmt: skip
    res = tmp / "R.json"
    res.write_text(json.dumps({"reservations": [{"id": "web", "capacity_rru": 4, "rru": {"hw": 1.0}}],
                               "settings": {"random_failure_buffer": 0.15, "rack_spread_limit": 1.0}}))
    return inv, res


def cluster_of(server: str) -> str:
    return "c1" if int(server[1:]) % 2 == 0 else "c2"


class LoopRegion:
    """The three services of one region; ``agent(server)`` puts an agent with one container on a node."""

    def __init__(self, tmp: Path, ack_timeout_s: float = 60.0) -> None:
        self.tmp = tmp
        inv, res = write_region(tmp)
        (tmp / "token").write_text(TOKEN + "\n")
        self.token = str(tmp / "token")
        cap_port = free_port()
        self.cap_url = f"http://127.0.0.1:{cap_port}"
        self.ports = {c: (free_port(), free_port()) for c in ("c1", "c2")}
        self.procs: list[Proc] = []
        self.nodes: list[Node] = []
        self.agents: list[tuple[Agent, threading.Event, threading.Thread]] = []
        for c, (http, grpc) in self.ports.items():
            self.procs.append(Proc(["serve", "--data-dir", str(tmp / c), "--http-port", str(http), "--grpc-port",
                                    str(grpc), "--token-file", self.token, "--capacity-url", self.cap_url,
                                    "--cluster", c, "--compact-interval-s", "1"], tmp / f"{c}.log"))  # fmt: skip
        self.procs.append(Proc(["ras", "serve", "--inventory", str(inv), "--reservations", str(res), "--data-dir",
                                str(tmp / "cap"), "--http-port", str(cap_port), "--token-file", self.token,
                                "--budget-s", "3", "--interval-s", "0", "--ack-timeout-s", str(ack_timeout_s),
                                *[f"--cluster={c}=http://127.0.0.1:{h}" for c, (h, _) in self.ports.items()]],
                               tmp / "cap.log"))  # fmt: skip

    def placement(self, server: str) -> str:
        return f"http://127.0.0.1:{self.ports[cluster_of(server)][0]}"

    def agent(self, server: str) -> tuple[Agent, Node]:
        node = Node()
        self.nodes.append(node)
        node.container(f"container_1_0001_01_0000{server[1:]}", memory_mb=20)
        flags = {"mode": "local", "interval_s": "0.2", "report_interval_s": "0.2",
                 "state_dir": str(self.tmp / f"agent-{server}"),
                 "service": f"127.0.0.1:{self.ports[cluster_of(server)][1]}", "token_file": self.token,
                 "node": server, "tenant": "elastic-pool", "capacity_cores": "4", "capacity_memory_mb": "4096",
                 "reserve_cores": "0.5", "reserve_memory_mb": "256", "scope_root_pid": str(node.pid)}  # fmt: skip
        agent = Agent(load_config({}, {}, flags)).start()
        stop = threading.Event()
        t = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        t.start()
        self.agents.append((agent, stop, t))
        return agent, node

    def stop(self) -> None:
        for agent, stop, t in self.agents:
            stop.set()
            t.join(10)
            agent.close()
        for node in self.nodes:
            node.cleanup()
        for p in reversed(self.procs):
            p.stop()
