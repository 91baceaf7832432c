"""End to end on 127.0.0.1 with real processes: ``harvest ras serve``, two ``harvest serve`` and agents.

Region: 3 MSBs x 4 servers, one reservation of 4 RRU (2 servers in each MSB), a shared buffer of
2; the other 6 servers are elastic, lent to clusters c1 / c2 (alternating servers). Agents run on
the elastic servers outside MSB msb0, each on a fake node with one real ``CONTAINER_ID`` process.
MSB msb0 fails: the Online Mover must take every elastic server left (2 per surviving MSB), so each
agent is revoked, drains its node (kills the container), acknowledges, and the reservation is whole
again (checker on the plan, every new server handed over by acknowledgement).
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
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from agent.config import load_config
from agent.runtime import Agent
from tests.agent.agent_proc import ROOT
from tests.agent.procs import Node, wait_until

pytestmark = pytest.mark.slow

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
        self.log = open(log, "w")
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


def test_failure_signal_to_whole_reservation_through_revocation_and_drain(tmp_path: Path) -> None:
    inv, res = write_region(tmp_path)
    (tmp_path / "token").write_text(TOKEN + "\n")
    token = str(tmp_path / "token")
    cap_port = free_port()
    cap_url = f"http://127.0.0.1:{cap_port}"
    ports = {c: (free_port(), free_port()) for c in ("c1", "c2")}
    procs: list[Proc] = []
    nodes: list[Node] = []
    agents: list[tuple[Agent, threading.Event, threading.Thread]] = []
    try:
        for c, (http, grpc) in ports.items():
            procs.append(Proc(["serve", "--data-dir", str(tmp_path / c), "--http-port", str(http), "--grpc-port",
                               str(grpc), "--token-file", token, "--capacity-url", cap_url, "--cluster", c,
                               "--compact-interval-s", "1"], tmp_path / f"{c}.log"))  # fmt: skip
        procs.append(Proc(["ras", "serve", "--inventory", str(inv), "--reservations", str(res), "--data-dir",
                           str(tmp_path / "cap"), "--http-port", str(cap_port), "--token-file", token,
                           "--budget-s", "3", "--interval-s", "0", "--ack-timeout-s", "60",
                           *[f"--cluster={c}=http://127.0.0.1:{h}" for c, (h, _) in ports.items()]],
                          tmp_path / "cap.log"))  # fmt: skip
        # 1. solve -> elastic set published to both placement services
        assert wait_until(lambda: (try_call(f"{cap_url}/v1/plan") or {}).get("version", 0) >= 1, 90, 0.2), \
            (tmp_path / "cap.log").read_text()[-2000:]
        plan = call(f"{cap_url}/v1/plan")
        assert plan["check"]["ok"]
        held = plan["reservations"]["web"]["servers"]
        assert len(held) == 6 and sorted(int(s[1:]) // 4 for s in held) == [0, 0, 1, 1, 2, 2]
        elastic = sorted(s for s, e in plan["assignment"].items() if e is None or e.startswith("shared-buffer:"))
        survivors = [s for s in elastic if int(s[1:]) // 4 != 0]
        assert len(survivors) == 4
        for c, (http, _) in ports.items():
            assert wait_until(lambda h=http: (try_call(f"http://127.0.0.1:{h}/v1/elastic") or {}).get("version")
                              == plan["version"], 30, 0.1)  # fmt: skip
            mine = call(f"http://127.0.0.1:{http}/v1/elastic")["nodes"]
            assert sorted(mine) == [s for s in elastic if int(s[1:]) % 2 == (0 if c == "c1" else 1)]
        # 2. agents on the surviving elastic servers, each running one container
        for s in survivors:
            node = Node()
            nodes.append(node)
            node.container(f"container_1_0001_01_0000{s[1:]}", memory_mb=20)
            c = "c1" if int(s[1:]) % 2 == 0 else "c2"
            flags = {"mode": "local", "interval_s": "0.2", "report_interval_s": "0.2",
                     "state_dir": str(tmp_path / f"agent-{s}"), "service": f"127.0.0.1:{ports[c][1]}",
                     "token_file": token, "node": s, "tenant": "elastic-pool", "capacity_cores": "4",
                     "capacity_memory_mb": "4096", "reserve_cores": "0.5", "reserve_memory_mb": "256",
                     "scope_root_pid": str(node.pid)}  # fmt: skip
            agent = Agent(load_config({}, {}, flags)).start()
            stop = threading.Event()
            t = threading.Thread(target=agent.run, args=(stop,), daemon=True)
            t.start()
            agents.append((agent, stop, t))
        for (agent, _, _), s in zip(agents, survivors, strict=True):
            c = "c1" if int(s[1:]) % 2 == 0 else "c2"
            url = f"http://127.0.0.1:{ports[c][0]}/v1/nodes/{s}"
            assert wait_until(lambda u=url: (try_call(u) or {}).get("class_id") == "elastic", 30, 0.1)
            info = call(url)
            assert info["harvestable"] and info["elastic"]
            assert wait_until(lambda a=agent: len(a.explain().get("containers", [])) == 1, 30, 0.1)
            assert agent.executor.label == "elastic"
        # 3. MSB msb0 fails (operator signal) -> mover -> revocations -> drain -> acknowledgement
        t0 = time.monotonic()
        failed = [f"n{i:02d}" for i in range(4)]
        moved = call(f"{cap_url}/v1/failures", "POST", {"servers": failed, "reason": "MSB msb0 lost power",
                                                        "source": "operator"})  # fmt: skip
        assert sorted(moved["revoked"]) == survivors
        status = call(f"{cap_url}/v1/reservations/web")
        assert status["check_ok"] and not status["whole"] and sorted(status["pending_handover"]) == survivors
        assert wait_until(lambda: call(f"{cap_url}/v1/reservations/web")["whole"], 60, 0.1), \
            call(f"{cap_url}/v1/revocations")
        whole_s = time.monotonic() - t0
        revs = call(f"{cap_url}/v1/revocations")["revocations"]
        assert sorted(r["server"] for r in revs) == survivors
        assert all(r["state"] == "acked" and "MSB msb0 lost power" in r["reason"] for r in revs)
        for (agent, _, _), node in zip(agents, nodes, strict=True):
            assert agent.explain()["drain"]["acknowledged"]
            assert not node.children[0].alive(), "the container was killed by the drain"
            decision = agent.explain()["decision"]
            assert decision["advertised"] == {"cores": 0, "memory_mb": 0} and decision["busy"]
        for s in survivors:
            c = "c1" if int(s[1:]) % 2 == 0 else "c2"
            assert not call(f"http://127.0.0.1:{ports[c][0]}/v1/nodes/{s}")["harvestable"]
        final = call(f"{cap_url}/v1/plan")
        assert final["check"]["ok"] and final["reservations"]["web"]["capacity_after_worst_msb_loss_rru"] >= 4
        assert whole_s < 30
    finally:
        for agent, stop, t in agents:
            stop.set()
            t.join(10)
            agent.close()
        for node in nodes:
            node.cleanup()
        for p in reversed(procs):
            p.stop()
