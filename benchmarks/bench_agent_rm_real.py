"""The agent on the real RM path: reaction from a primary spike to the RM's preemption, and attempts.

Per version (``--versions``, default the suite's: 3.3.6 and 3.4.2): ``harvest hadoop up`` (1 DataNode,
2 NodeManagers, each worker its own network namespace), worker1's NodeManager run under a process tree
with a primary tenant (``tests/hadoop/agent_node.py``), ``harvest agent --mode yarn`` measuring that
tree (3,072 MB / 8 cores lent, 1,024 MB / 2 cores reserved, 0.5 s sampling, reclaim auto = the RM's
over-commit preemption on 3.3+), and MapReduce's sleep job (``--maps`` maps of ``--map-ms``). Then
``--spikes`` times: wait until the RM has filled worker1, the primary allocates 1,200 MB, the agent
shrinks the node in the RM (overCommitTimeout 0) and the RM preempts the newest container; 10 s later
the primary frees its memory, the agent's cool-down (5 s) ends and the RM refills the node.

    reaction = spike (the primary's memory resident) -> the RM has preempted (the node's
               ``usedMemoryMB`` in ``GET /ws/v1/cluster/nodes`` drops; polled every 50 ms); also
               spike -> the agent's reclaim write (``rm_reclaims_total``)
    attempts = the job's ``Failed map tasks`` and ``Killed map tasks`` counters, and its outcome

    nice -n 10 .venv/bin/python benchmarks/bench_agent_rm_real.py [--spikes 5] [--versions 3.3.6]

Needs root (network namespaces), java, mvn and ``.cache/hadoop-<version>`` (``make hadoop``; or
``HARVEST_HADOOP_CACHE`` pointing at one). Prints one JSON object per version and writes them to
``benchmarks/out/agent_rm_real.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scheduler_plugin.testbed.versions import VERSIONS  # noqa: E402
from tests.agent.procs import wait_until  # noqa: E402
from tests.hadoop.agent_node import AgentNode, set_node_size, verbose_hadoop  # noqa: E402
from tests.hadoop.conftest import HadoopCluster  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def harvest(*args: str, timeout_s: float = 600) -> str:
    done = subprocess.run([sys.executable, "-m", "placement_service.cli", "hadoop", *args], capture_output=True,
                          text=True, timeout=timeout_s, check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    if done.returncode != 0:
        raise SystemExit(f"harvest hadoop {' '.join(args)} failed: {done.stderr[-3000:]}")
    return done.stdout


def counter(output: str, name: str) -> int:
    found = re.findall(rf"\b{re.escape(name)}=(\d+)", output)
    return int(found[-1]) if found else 0


def full(node: AgentNode) -> bool:
    """A map container on worker1: the 1,200 MB spike then eats into the reserve."""
    maps = [c for c in node.explain().get("containers", [])
            if c.get("alloc_memory_mb") and not c["id"].endswith("_000001")]
    return len(maps) >= 1


def run_version(version: str, spikes: int, maps: int, map_ms: int, work: Path) -> dict[str, object]:
    cluster_dir = work / f"cluster-{version}"
    started = time.monotonic()
    info = json.loads(harvest("up", "--version", version, "--datanodes", "1", "--nodemanagers", "2",
                              "--dir", str(cluster_dir)))
    up_s = time.monotonic() - started
    cluster = HadoopCluster(version, info, cluster_dir, None, [], Path())  # type: ignore[arg-type]
    reactions: list[float] = []  # spike -> the RM took the memory back (node's usedMemoryMB drops)
    asks: list[float] = []  # spike -> the agent's reclaim write
    node = None
    job = None
    load = []
    try:
        (work / f"node-{version}").mkdir(parents=True, exist_ok=True)
        node = AgentNode(cluster, "worker1", work / f"node-{version}", spike_mb=1200)
        assert wait_until(lambda: node.explain().get("yarn", {}).get("applied") is not None, 60, step_s=0.5)
        path = node.explain()["reclaim"]["path"]
        set_node_size(cluster, "worker2", 0, 0)  # every container on worker1, the agent's host
        log = work / f"job-{version}.log"
        with log.open("w") as handle:
            job = subprocess.Popen([str(verbose_hadoop(cluster, work)), "sleep", "-m", str(maps), "-r", "0",
                                    "-mt", str(map_ms)], stdout=handle, stderr=subprocess.STDOUT)
        for _ in range(spikes):
            if not wait_until(lambda: full(node) or job.poll() is not None, 300, step_s=0.5) or job.poll() is not None:
                break
            asked = node.metric("rm_reclaims_total") + node.metric("kills_total")
            rec = node.rm_node() or {}
            used = int(rec.get("usedMemoryMB", 0))
            t0 = node.spike()
            t_ask = t_rm = None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and t_rm is None:
                if t_ask is None and node.metric("rm_reclaims_total") + node.metric("kills_total") > asked:
                    t_ask = time.monotonic() - t0
                rec = node.rm_node() or {}
                if rec and int(rec.get("usedMemoryMB", used)) < used:
                    t_rm = time.monotonic() - t0
                time.sleep(0.05)
            if t_rm is not None:
                reactions.append(t_rm)
                asks.append(t_ask if t_ask is not None else t_rm)
            load.append(os.getloadavg()[0])
            time.sleep(10)
            node.calm()
            time.sleep(6)
        rc = job.wait(timeout=1800)
        output = log.read_text()
        return {
            "version": version, "path": path, "cluster_up_s": round(up_s, 1), "spikes": spikes,
            "reclaims_seen": len(reactions),
            "reaction_p50_s": round(statistics.median(reactions), 3) if reactions else None,
            "reaction_p99_s": round(max(reactions), 3) if reactions else None,  # = max at these counts
            "reactions_s": [round(r, 3) for r in reactions],
            "ask_p50_s": round(statistics.median(asks), 3) if asks else None,
            "rm_reclaimed": node.metric("rm_reclaimed_total"), "local_kills": node.metric("kills_total"),
            "fallbacks": node.metric("reclaim_fallbacks_total"),
            "job_exit": rc, "job_succeeded": "completed successfully" in output,
            "failed_map_attempts": counter(output, "Failed map tasks"),
            "killed_map_attempts": counter(output, "Killed map tasks"),
            "loadavg_1m_during": [round(x, 1) for x in load],
        }
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait()
        if node is not None:
            node.close()
        harvest("down", "--dir", str(cluster_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", nargs="+", default=list(VERSIONS))
    parser.add_argument("--spikes", type=int, default=5)
    parser.add_argument("--maps", type=int, default=24)
    parser.add_argument("--map-ms", type=int, default=30_000)
    args = parser.parse_args()
    out = []
    with tempfile.TemporaryDirectory(prefix="bench-agent-rm-real-") as tmp:
        for version in args.versions:
            result = run_version(version, args.spikes, args.maps, args.map_ms, Path(tmp))
            print(json.dumps(result), flush=True)
            out.append(result)
    target = REPO / "benchmarks" / "out" / "agent_rm_real.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
