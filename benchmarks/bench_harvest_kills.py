"""Harvesting kills vs a MapReduce job: failed vs killed attempts, and reaction time, RM path vs local path.

Setup per path: a fake YARN 3.3.6 (``tests/agent/fakes.py``: RM with the dominant calculator and
over-commit preemption, one NodeManager running each container as a real process, NM heartbeat
``--nm-heartbeat-s``, 1 s as YARN's default), a MapReduce job model counting attempts exactly as
MapReduce does (``mapreduce.map.maxattempts`` = 4), and the real agent loop (yarn mode, psutil
sampler on the node's process tree, ``--interval-s``). The node is full of map containers; then,
``--kills`` times: a primary process spikes its memory (eating into the reserve, not through it),
the agent takes one container back, the spike ends, the job refills the node.

    reaction = from the spike's start to the chosen container's processes being gone
    attempts = the job's failed and killed map attempts after all spikes, and its state

Paths side by side in one run:
- ``rm-preemption`` (Hadoop 3.3+): the agent shrinks the node in the RM with overCommitTimeout 0;
  the RM preempts newest-first (PREEMPTED, a killed attempt), the NM kills on its next heartbeat;
- ``local-kill`` (Hadoop 3.2, or RM unreachable): SIGTERM to the process group, exit 143, a
  failed attempt.

    nice -n 10 .venv/bin/python benchmarks/bench_harvest_kills.py [--kills 8] [--nm-heartbeat-s 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.config import load_config  # noqa: E402
from agent.runtime import Agent  # noqa: E402
from tests.agent.fakes import FakeYarnCluster  # noqa: E402
from tests.agent.procs import Node, wait_until  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def run_path(path: str, kills: int, interval_s: float, heartbeat_s: float, maps: int, map_mb: int,
             spike_mb: int) -> dict[str, object]:
    node = Node()
    tmp = tempfile.mkdtemp(prefix="bench-kills-")
    cluster = FakeYarnCluster(node, memory_mb=4096, vcores=32, heartbeat_s=heartbeat_s)
    reserve_mb = 2 * spike_mb
    capacity_mb = (maps + 1) * map_mb + reserve_mb + 60  # the node holds the AM and every map
    flags = {"mode": "yarn", "interval_s": str(interval_s), "state_dir": os.path.join(tmp, "state"),
             "scope_root_pid": str(node.pid), "capacity_cores": "64", "reserve_cores": "8",
             "capacity_memory_mb": str(capacity_mb), "reserve_memory_mb": str(reserve_mb),
             "rm_url": cluster.rm.url, "nm_url": cluster.nm.url, "cooldown_s": "1", "advertise_hold_s": "1",
             "reclaim": "rm" if path == "rm-preemption" else "local", "rm_reclaim_wait_s": "5"}
    agent = Agent(load_config({}, {}, flags))
    stop = threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    loop.start()
    reactions: list[float] = []
    sched = cluster.rm.scheduler
    job = None
    try:
        assert wait_until(lambda: agent.explain().get("yarn", {}).get("applied") is not None, 30)
        job = cluster.submit(maps=maps, map_memory_mb=map_mb, am_memory_mb=map_mb)
        for _ in range(kills):
            if job.state != "RUNNING":
                break
            full = wait_until(lambda: len(cluster.nm.processes) == maps + 1
                              and all(p is not None and p.alive() for p in cluster.nm.processes.values())
                              and not agent.executor.dying(), 60, step_s=0.05)
            if not full:
                break
            running = {cid: child for cid, child in cluster.nm.processes.items()
                       if not (sched.container(cid) and sched.container(cid).is_am)}
            primary = node.primary(spike_mb=spike_mb)
            t0 = time.monotonic()
            Node.spike(primary)
            if wait_until(lambda running=running: any(not c.alive() for c in running.values()), 30, step_s=0.002):
                reactions.append(time.monotonic() - t0)
            os.killpg(primary.pid, 9)  # the spike ends
            wait_until(lambda: job is not None and job.failed_attempts + job.killed_attempts >= len(reactions), 30)
        time.sleep(2 * heartbeat_s)
    finally:
        stop.set()
        loop.join(timeout=10)
        agent.close()
        cluster.close()
        node.cleanup()
    assert job is not None
    return {"path": path, "kills": len(reactions), "failed": job.failed_attempts, "killed": job.killed_attempts,
            "state": job.state, "p50_s": statistics.median(reactions) if reactions else float("nan"),
            "p99_s": percentile(reactions, 99) if reactions else float("nan"),
            "max_s": max(reactions) if reactions else float("nan")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=8, help="harvesting kills per path")
    parser.add_argument("--interval-s", type=float, default=1.0, help="agent sampling interval")
    parser.add_argument("--nm-heartbeat-s", type=float, default=1.0, help="NodeManager heartbeat (YARN: 1 s)")
    parser.add_argument("--maps", type=int, default=4)
    parser.add_argument("--map-mb", type=int, default=200, help="allocation of one map container")
    parser.add_argument("--spike-mb", type=int, default=120, help="primary spike (less than one container)")
    parser.add_argument("--paths", default="rm-preemption,local-kill")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results = []
    for path in args.paths.split(","):
        print(f"{path}: {args.kills} harvesting kills ...", file=sys.stderr, flush=True)
        results.append(run_path(path, args.kills, args.interval_s, args.nm_heartbeat_s, args.maps, args.map_mb,
                                args.spike_mb))
    load_after = os.getloadavg()[0]
    print(f"load average before {load_before:.2f}, after {load_after:.2f} (2-core shared machine); agent "
          f"interval {args.interval_s} s, NM heartbeat {args.nm_heartbeat_s} s, maxattempts 4")
    print("| reclaim path | kills | failed attempts | killed attempts | job after the kills "
          "| p50 reaction | p99 reaction | max |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['path']} | {r['kills']} | {r['failed']} | {r['killed']} | {r['state']} | {r['p50_s']:.3f} s "
              f"| {r['p99_s']:.3f} s | {r['max_s']:.3f} s |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"load_before": load_before, "load_after": load_after, "results": results}, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
