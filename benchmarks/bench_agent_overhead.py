"""Overhead of the node agent at 1 s sampling with 500 processes on the node.

Spawns ``--processes`` sleepers (one in five carries ``CONTAINER_ID``, two processes per container),
starts a small gRPC placement service (``tests/agent/fake_service.py``) so the agent also reports,
then runs ``harvest agent --mode local --interval-s 1`` over the whole machine (every process on it,
other people's work included) and measures, after a warm-up, the agent process's CPU time (all its
threads) and its resident memory.

Side by side, the same measurement for a naive sampler that reads every process's environment,
CPU times and memory each second (``psutil.process_iter`` with those attributes): what the
per-pid cache saves.

Targets: CPU <= 1% of one core, RSS <= 60 MB.

    .venv/bin/python benchmarks/bench_agent_overhead.py [--processes 500] [--duration-s 60]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

NAIVE = r"""
import sys, time, psutil
end = time.time() + float(sys.argv[1])
while time.time() < end:
    started = time.monotonic()
    secondary = {}
    for p in psutil.process_iter(["pid", "create_time", "environ", "cpu_times", "memory_info"]):
        env = p.info["environ"] or {}
        if "CONTAINER_ID" in env and p.info["memory_info"] is not None:
            secondary.setdefault(env["CONTAINER_ID"], 0)
            secondary[env["CONTAINER_ID"]] += p.info["memory_info"].rss
    psutil.cpu_times(); psutil.virtual_memory()
    time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure(pid: int, warmup_s: float, duration_s: float) -> dict[str, float]:
    proc = psutil.Process(pid)
    time.sleep(warmup_s)
    t0 = proc.cpu_times()
    w0 = time.monotonic()
    peak_mb = 0.0
    rss: list[float] = []
    while time.monotonic() - w0 < duration_s:
        mb = proc.memory_info().rss / (1024 * 1024)
        rss.append(mb)
        peak_mb = max(peak_mb, mb)
        time.sleep(1.0)
    t1 = proc.cpu_times()
    wall = time.monotonic() - w0
    cpu_s = (t1.user + t1.system) - (t0.user + t0.system)
    return {"cpu_pct_of_one_core": 100.0 * cpu_s / wall, "rss_mb_peak": peak_mb,
            "rss_mb_median": sorted(rss)[len(rss) // 2], "wall_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=500)
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-agent-overhead-")
    sleepers: list[subprocess.Popen[bytes]] = []
    service = agent = None
    results: dict[str, object] = {}
    try:
        for i in range(args.processes):
            env = dict(os.environ)
            env.pop("CONTAINER_ID", None)
            if i % 5 == 0:
                env["CONTAINER_ID"] = f"container_1700000000000_0001_01_{i // 2:06d}"
            sleepers.append(subprocess.Popen(["sleep", "3600"], env=env, start_new_session=True))
        port = free_port()
        service = subprocess.Popen([sys.executable, "-m", "tests.agent.fake_service", "--port", str(port), "--state",
                                    os.path.join(tmp, "service.json")], cwd=ROOT, stdout=subprocess.PIPE,
                                   start_new_session=True)
        assert service.stdout is not None and service.stdout.readline().strip() == b"serving"
        load_before = os.getloadavg()
        agent = subprocess.Popen([sys.executable, "-m", "placement_service.cli", "agent", "--mode", "local",
                                  "--interval-s", "1", "--state-dir", os.path.join(tmp, "state"),
                                  "--capacity-cores", "64", "--reserve-cores", "1", "--service", f"127.0.0.1:{port}",
                                  "--metrics-port", "0", "--node", "bench-node", "--tenant", "bench"],
                                 cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        results["agent"] = measure(agent.pid, args.warmup_s, args.duration_s)
        with open(os.path.join(tmp, "state", "seq")) as handle:
            results["agent"]["reports"] = int(handle.read())  # type: ignore[index]
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
        naive = subprocess.Popen([sys.executable, "-c", NAIVE, str(args.duration_s + args.warmup_s + 5)],
                                 start_new_session=True)
        results["naive"] = measure(naive.pid, args.warmup_s, args.duration_s)
        naive.kill()
        naive.wait(timeout=30)
        results["processes_on_machine"] = len(psutil.pids())
        results["load_before"], results["load_after"] = load_before, os.getloadavg()
    finally:
        for proc in [agent, service, *sleepers]:
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                proc.wait(timeout=30)
    a, n = results["agent"], results["naive"]
    assert isinstance(a, dict) and isinstance(n, dict)
    print(f"{args.processes} sleepers ({args.processes // 5} with CONTAINER_ID), "
          f"{results['processes_on_machine']} processes on the machine; load average "
          f"{results['load_before'][0]:.2f} -> {results['load_after'][0]:.2f}")  # type: ignore[index]
    print("| sampler (1 s interval) | CPU, % of one core | RSS peak | RSS median |")
    print("|---|---|---|---|")
    print(f"| harvest agent (per-pid cache, reporting over gRPC) | {a['cpu_pct_of_one_core']:.2f} % "
          f"| {a['rss_mb_peak']:.1f} MB | {a['rss_mb_median']:.1f} MB |")
    print(f"| naive: every process's environ + CPU + memory each second | {n['cpu_pct_of_one_core']:.2f} % "
          f"| {n['rss_mb_peak']:.1f} MB | {n['rss_mb_median']:.1f} MB |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 0 if a["cpu_pct_of_one_core"] <= 1.0 and a["rss_mb_peak"] <= 60 else 1


if __name__ == "__main__":
    sys.exit(main())
