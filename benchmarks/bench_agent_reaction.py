"""Reaction time of the node agent: from the primary tenant's spike to the reserve being whole again.

Setup per run: a real ``harvest agent`` process (local mode, psutil sampler) watching a small "node"
(a process tree, ``--scope-root-pid``, so other work on a shared machine does not count), with two
containers (``CONTAINER_ID`` set, 150 MB resident each, one burning CPU) and an idle primary. The
node's memory capacity is set so that the primary's spike (``--spike-mb``) eats into the reserve
by less than one container: the agent must kill exactly the youngest container.

    t0 = the primary is told to spike (SIGUSR1; it then allocates and touches --spike-mb)
    t1 = the killed container's process is gone (its memory is free: the reserve is whole again)
    reaction = t1 - t0

Each trial spawns a fresh primary and fresh containers; the same agent runs all trials of one
sampling interval. Side by side: 1 s sampling (the target, <= 2 s) and 0.5 s. The baseline with no
agent is stock YARN 3.2.1, which per DESIGN.md leaves the node overcommitted and reclaims nothing.

    .venv/bin/python benchmarks/bench_agent_reaction.py [--trials 20] [--intervals 1,0.5] [--kinds memory,cpu]

A CPU spike (``--kinds cpu``: three burning containers charged 0.5 core each on a 3-core node with
1 core reserved; the primary starts one busy thread) is seen one to two samples later, because CPU
use is an average over the last interval.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.agent.agent_proc import AgentProcess  # noqa: E402
from tests.agent.procs import Node, wait_until  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / (1024 * 1024)


def run_interval(interval_s: float, trials: int, spike_mb: int, container_mb: int,
                 kind: str = "memory") -> dict[str, object]:
    """One agent, ``trials`` spikes. ``kind``: "memory" (spike_mb resident) or "cpu" (one busy thread)."""
    node = Node()
    tmp = tempfile.mkdtemp(prefix="bench-agent-")
    agent: AgentProcess | None = None
    reactions: list[float] = []  # from the spike's start (SIGUSR1 to the primary)
    after_resident: list[float] = []  # from the spike's memory being fully resident
    wrong: list[str] = []
    n_containers = 2 if kind == "memory" else 3
    try:
        if kind == "memory":
            # calibrate: idle primary + supervisor, and one container's resident size
            probe_primary = node.primary(spike_mb=spike_mb)
            probe = node.container("container_1_0000_01_000001", memory_mb=container_mb)
            base_mb = rss_mb(node.pid) + rss_mb(probe_primary.pid)
            one_mb = rss_mb(probe.pid)
            node.cleanup()
            node = Node()
            reserve_mb = 300
            slack_mb = spike_mb - one_mb / 2  # the spike overflows the budget by half a container
            capacity_mb = int(base_mb + 2 * one_mb + reserve_mb + slack_mb)
            sizing = ["--capacity-cores", "64", "--reserve-cores", "1", "--capacity-memory-mb", str(capacity_mb),
                      "--reserve-memory-mb", str(reserve_mb)]
        else:
            # 3 cores, 1 reserved: three containers charged 0.5 core fit; a primary at one core
            # overflows the budget by half a core, so the youngest container must go
            sizing = ["--capacity-cores", "3", "--reserve-cores", "1", "--container-cores", "0.5",
                      "--capacity-memory-mb", "100000", "--reserve-memory-mb", "1000"]
        agent = AgentProcess(["--mode", "local", "--interval-s", str(interval_s), "--state-dir",
                              os.path.join(tmp, "state"), "--scope-root-pid", str(node.pid), "--cooldown-s", "0",
                              *sizing], os.path.join(tmp, "agent.log"))
        for trial in range(trials):
            if kind == "memory":
                primary = node.primary(spike_mb=spike_mb)
                kids = [node.container(f"container_1_{trial + 1:04d}_01_00000{i + 1}", memory_mb=container_mb,
                                       burn=i == 0) for i in range(n_containers)]
            else:
                primary = node.primary(spike_threads=1)
                kids = [node.container(f"container_1_{trial + 1:04d}_01_00000{i + 1}", burn=True)
                        for i in range(n_containers)]
            young, olds = kids[-1], kids[:-1]
            assert wait_until(lambda: len(agent.explain().get("containers", [])) == n_containers
                              and not agent.explain()["decision"]["kills"], 30), "agent did not see containers"
            time.sleep(interval_s * ((trial * 0.37) % 1.0))  # spread spikes over the sampling phase
            t0 = time.monotonic()
            t_resident = Node.spike(primary)
            if not wait_until(lambda young=young: not young.alive(), 30, step_s=0.002):
                wrong.append(f"trial {trial}: young container not killed")
                continue
            t1 = time.monotonic()
            reactions.append(t1 - t0)
            after_resident.append(max(t1 - t_resident, 0.0))
            time.sleep(interval_s * 2)
            if not all(old.alive() for old in olds):
                wrong.append(f"trial {trial}: an older container was killed too")
            for child in (primary, *kids):
                try:
                    os.killpg(child.pid, 9)
                except OSError:
                    pass
            wait_until(lambda: not agent.explain().get("containers"), 30)
        kills = agent.metric("kills_total")
    finally:
        if agent is not None:
            agent.stop()
        node.cleanup()
    return {"kind": kind, "interval_s": interval_s, "trials": len(reactions), "p50_s": statistics.median(reactions),
            "p99_s": percentile(reactions, 99), "max_s": max(reactions), "mean_s": statistics.fmean(reactions),
            "p50_after_resident_s": statistics.median(after_resident),
            "p99_after_resident_s": percentile(after_resident, 99), "kills": kills, "wrong": wrong}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--intervals", default="1,0.5")
    parser.add_argument("--spike-mb", type=int, default=250)
    parser.add_argument("--container-mb", type=int, default=150)
    parser.add_argument("--kinds", default="memory", help="memory, cpu or memory,cpu")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    results = [run_interval(float(i), args.trials, args.spike_mb, args.container_mb, kind)
               for kind in args.kinds.split(",") for i in args.intervals.split(",")]
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (2-core shared machine)")
    print("| spike | sampling interval | trials | p50 reaction | p99 reaction | max | p50 / p99 after spike resident "
          "| kills | wrong kills |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['kind']} | {r['interval_s']} s | {r['trials']} | {r['p50_s']:.3f} s | {r['p99_s']:.3f} s | {r['max_s']:.3f} s"
              f" | {r['p50_after_resident_s']:.3f} s / {r['p99_after_resident_s']:.3f} s"
              f" | {r['kills']:.0f} | {len(r['wrong'])} |")
        for w in r["wrong"]:
            print(f"  {w}")
    print("| any | no agent (stock YARN 3.2.1) | - | never | never | - | - | 0 | - |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"load_before": load_before, "load_after": load_after, "results": results}, handle, indent=2)
    return 0 if all(r["p99_s"] <= 2.0 for r in results if r["interval_s"] == 1.0 and r["kind"] == "memory") else 1


if __name__ == "__main__":
    sys.exit(main())
