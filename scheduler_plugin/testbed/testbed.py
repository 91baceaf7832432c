"""``harvest testbed up|down``: the paper's testbed as processes on this machine, and its modes.

``up(UpConfig(workers=3, directory=D))`` starts, in this order (a progress line on stderr each):

1. history: ``harvest convert-real`` of a real CPU trace (``/work/shared/data/cpu/``-style wide CSV,
   Azure V1 by default) into utilization / reimages / inventory, and ``harvest cluster`` -> the
   classes (``D/history/classes.json``); one primary tenant per worker, patterns taken in turn;
2. the scripts (``harvest install-scripts``), the topology map of the workers (two racks) and the
   block-placement shim built against the version's jars (``D/shim``, reused);
3. the real cluster (``cluster.up``, in ``D/cluster``): NameNode with the shim, ResourceManager,
   one DataNode + NodeManager per worker host, node labels from the agents' label files (the
   NodeManagers' script provider), the topology script; properties as ``tests/hadoop`` sets them;
4. the placement service (``harvest serve``) with the classes: it pushes the class labels to the RM
   and writes + refreshes the queues (``--capacity-scheduler-file``);
5. per worker, the primary tenant (``primary.py``: the tenant's series sped up, latency rows in
   ``D/primary/<worker>.csv``) and, in modes harvest and pt, ``harvest agent --mode yarn`` on the RM
   path, measuring the primary's process tree (``--scope-root-pid``), reporting to the service.

Everything started is recorded at once in ``D/testbed.json`` (atomically): role, host, PID, start
time and command line. ``down`` stops each recorded process group that is still the one we
started (same start time and the same command line in ``/proc/PID/cmdline``; anything else is
left alone), then the cluster (``cluster.down``), and checks that no recorded PID survives.

Modes (``set_mode``, ``roles.py``): **harvest** and **pt** run the agents (capacity and reserve as
configured); **stock** stops them and gives each NodeManager back its configured size in the RM.
How a query is routed per mode is ``runner.py``'s business. The state file and the process records:
``state.py``. The names of both are importable from here.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement_service import HarvestError, csvsafe
from placement_service.atomic import atomic_write_json, atomic_write_text
from scheduler_plugin.testbed import cluster
from scheduler_plugin.testbed.roles import AGENT_CAPACITY as AGENT_CAPACITY
from scheduler_plugin.testbed.roles import MODES as MODES
from scheduler_plugin.testbed.roles import NM_MEMORY_MB as NM_MEMORY_MB
from scheduler_plugin.testbed.roles import NM_VCORES as NM_VCORES
from scheduler_plugin.testbed.roles import node_sizes as node_sizes
from scheduler_plugin.testbed.roles import service_node as service_node
from scheduler_plugin.testbed.roles import set_mode as set_mode
from scheduler_plugin.testbed.roles import start_agent as start_agent
from scheduler_plugin.testbed.roles import start_primary as start_primary
from scheduler_plugin.testbed.roles import start_service as start_service
from scheduler_plugin.testbed.state import REPO as REPO
from scheduler_plugin.testbed.state import STATE_FILE as STATE_FILE
from scheduler_plugin.testbed.state import TestbedError as TestbedError
from scheduler_plugin.testbed.state import _env as _env
from scheduler_plugin.testbed.state import _free_port, _py, _run
from scheduler_plugin.testbed.state import ours as ours
from scheduler_plugin.testbed.state import read_state as read_state
from scheduler_plugin.testbed.state import say as say
from scheduler_plugin.testbed.state import start_process as start_process
from scheduler_plugin.testbed.state import stop_processes as stop_processes
from scheduler_plugin.testbed.state import write_state as write_state

DEFAULT_TRACE = Path(os.environ.get("HARVEST_SHARED_DATA", "/work/shared/data")) / "cpu" / "azure_v1_microsoft_avg_100.csv.gz"


@dataclass(frozen=True)
class UpConfig:
    workers: int
    directory: Path
    version: str = "latest"
    trace: Path = DEFAULT_TRACE
    history_vms: int = 12
    speedup: float = 60.0
    primary_cores: int = 1
    window_s: float = 5.0
    mode: str = "harvest"
    timeout_s: float = 600.0
    isolate: bool | None = None
    hive: bool = True  # HiveServer2 + Tez (harvest hadoop up --hive): what `run` sends queries to



# ---------------------------------------------------------------- history, tenants, files


def choose_tenants(classes_doc: dict[str, Any], workers: int) -> list[str]:
    """One tenant per worker: classes taken pattern by pattern in turn (the first tenant of each class),
    round robin over the workers (as the docker testbed's setup does)."""
    by_pattern: dict[str, list[str]] = {}
    for c in classes_doc.get("classes", []):
        if c.get("tenants"):
            by_pattern.setdefault(str(c["pattern"]), []).append(str(c["tenants"][0]))
    interleaved = [t for group in itertools.zip_longest(*by_pattern.values()) for t in group if t]
    if not interleaved:
        raise TestbedError("the classes have no tenants: nothing for the primaries to replay")
    return [interleaved[i % len(interleaved)] for i in range(workers)]


def history_is_current(hist: Path, params: dict[str, Any]) -> bool:
    """``hist`` holds classes learnt from the same trace and size (``params.json``)."""
    try:
        return (hist / "classes.json").exists() and json.loads((hist / "params.json").read_text()) == params
    except (OSError, ValueError):
        return False


def _history(cfg: UpConfig, directory: Path, log: Path) -> tuple[Path, dict[str, Any]]:
    hist = directory / "history"
    classes = hist / "classes.json"
    params = {"trace": str(cfg.trace.resolve()), "history_vms": cfg.history_vms}
    made_from = hist / "params.json"
    if not history_is_current(hist, params):
        classes.unlink(missing_ok=True)  # none yet, or of another trace or size: learn again
    if not classes.exists():
        if not cfg.trace.exists():
            raise TestbedError(f"--trace {cfg.trace}: no such file (a wide per-VM CPU CSV, e.g. the Azure V1 one)")
        _run([*_py(), "convert-real", "--source", "azure", "--input", str(cfg.trace), "--out", str(hist),
              "--max-vms", str(cfg.history_vms), "--servers-per-vm", "2", "--format", "csv", "--seed", "7"],
             "harvest convert-real", log)
        _run([*_py(), "cluster", "--utilization", str(hist / "utilization.csv.gz"), "--reimages",
              str(hist / "reimages.csv.gz"), "--inventory", str(hist / "inventory.csv.gz"), "--out", str(classes),
              "--seed", "7"], "harvest cluster", log)
        atomic_write_json(made_from, params)
    return hist / "utilization.csv.gz", dict(json.loads(classes.read_text()))


def harvest_overrides(scripts: Path, service_http: str, token_file: Path) -> dict[tuple[str, str], str]:
    """The properties that wire a cluster to harvest: the shim asking the service, the topology
    script, the NodeManagers' script label provider. The testbed and the real-Hadoop tier
    (tests/hadoop/conftest.py) both start their clusters with these."""
    return {
        ("hdfs-site", "dfs.block.replicator.classname"): "org.harvest.hdfs.HarvestBlockPlacementPolicy",
        ("hdfs-site", "harvest.placement.url"): f"{service_http}/v1/blocks/place",
        ("hdfs-site", "harvest.placement.token-file"): str(token_file),
        # 150 ms (the default read timeout) is often too short for a Python service on a shared 2-core
        # machine at load 15: the shim then places blocks the stock way.
        ("hdfs-site", "harvest.placement.read-timeout-ms"): "3000",
        ("hdfs-site", "harvest.placement.connect-timeout-ms"): "1000",
        ("hdfs-site", "harvest.placement.cooldown-ms"): "3000",
        # The NameNode's load rule (a DataNode with more than twice the average transfer threads is
        # "too busy") rejects, on a 4-DataNode cluster, the writing DataNode among the service's
        # three targets for some blocks; the shim then places the block the stock way, busy node
        # included. Seen on 3.3.6 (2 of 8 blocks); see docs/hadoop.md, "Test cluster".
        ("hdfs-site", "dfs.namenode.redundancy.considerLoad"): "false",
        ("hdfs-site", "harvest.placement.warn-interval-ms"): "5000",
        ("core-site", "net.topology.script.file.name"): str(scripts / "topology.py"),
        ("yarn-site", "yarn.nodemanager.node-labels.provider"): "script",
        ("yarn-site", "yarn.nodemanager.node-labels.provider.script.path"): str(scripts / "node_label.py"),
        ("yarn-site", "yarn.nodemanager.node-labels.provider.script.opts"):
            "--state-dir={dir}/hosts/{host}/agent,--max-age-s=3600",
        ("yarn-site", "yarn.nodemanager.node-labels.provider.fetch-interval-ms"): "2000",
        ("yarn-site", "yarn.nodemanager.node-labels.resync-interval-ms"): "2000",
    }


def _topology(plan: cluster.Plan, tenants: list[str], scripts: Path, log: Path) -> None:
    inv = scripts.parent / "testbed-inventory.csv"
    with inv.open("w", newline="") as handle:
        w = csvsafe.writer(handle)
        w.writerow(["server", "tenant", "environment", "rack", "datacenter", "cores", "memory_mb", "storage_gb", "ip"])
        for i, (host, tenant) in enumerate(zip(plan.workers, tenants, strict=True)):
            w.writerow([host.name, tenant, "prod", f"r{i % 2 + 1}", "dc1", NM_VCORES, NM_MEMORY_MB, 100, host.ip])
    _run([*_py(), "topology-map", "--no-resolve", "--inventory", str(inv), "--out", str(scripts / "topology.map")],
         "harvest topology-map", log)


def _shim(plan: cluster.Plan, directory: Path, log: Path) -> Path:
    jar = directory / "shim" / f"hadoop-{plan.version}" / "harvest-hdfs-shim.jar"
    if not jar.exists():
        _run(["bash", str(REPO / "scheduler_plugin" / "java" / "build.sh"), "--classpath", f"{plan.layout.lib}/*",
              "--out", str(jar.parent)], f"building the HDFS shim against Hadoop {plan.version}", log)
    return jar


# ---------------------------------------------------------------- up / down / status


def up(cfg: UpConfig) -> dict[str, Any]:
    """Start the testbed of ``cfg`` (see the module doc); returns its state. On a failure everything
    started is stopped again (logs stay in ``D/logs`` and ``D/cluster/hosts``)."""
    if cfg.workers < 1 or cfg.workers > 40:
        raise TestbedError(f"--workers: expected 1..40, got {cfg.workers}")
    if cfg.mode not in MODES:
        raise TestbedError(f"--mode {cfg.mode!r}: expected one of {', '.join(MODES)}")
    started = time.monotonic()
    directory = cfg.directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / STATE_FILE).exists():
        old = read_state(directory)
        running = [p for p in old.get("processes", []) if ours(p)]
        if running:
            names = ", ".join(f"{p['role']}@{p['host']} (pid {p['pid']})" for p in running)
            raise TestbedError(f"{directory} holds a running testbed ({names}); "
                               f"run 'harvest testbed down --dir {directory}' first")
        down(directory, quiet=True)
    for sub in ("logs", "primary", "service"):
        (directory / sub).mkdir(exist_ok=True)
    log = directory / "logs" / "up.log"
    token_file = directory / "service" / "token"
    if not token_file.exists():
        atomic_write_text(token_file, secrets.token_hex(24) + "\n")
    http_port, grpc_port = _free_port(), _free_port()
    svc: dict[str, Any] = {"http_port": http_port, "grpc_port": grpc_port, "http": f"http://127.0.0.1:{http_port}",
           "grpc": f"127.0.0.1:{grpc_port}", "token_file": str(token_file), "data_dir": str(directory / "service" / "data")}
    state: dict[str, Any] = {"dir": str(directory), "state": "starting", "workers": cfg.workers, "processes": [],
                             "service": svc, "mode": cfg.mode, "timings_s": {},
                             "primary": {"cores": cfg.primary_cores, "speedup": cfg.speedup, "window_s": cfg.window_s},
                             "hiveserver2": None}
    write_state(directory, state)

    def mark(step: str, t0: float) -> None:
        state["timings_s"][step] = round(time.monotonic() - t0, 1)
        write_state(directory, state)

    try:
        t0 = time.monotonic()
        say(f"1/5 history: {cfg.trace.name} ({cfg.history_vms} VMs) -> classes")
        utilization, classes = _history(cfg, directory, log)
        tenants = choose_tenants(classes, cfg.workers)
        state.update(utilization_file=str(utilization), classes_file=str(directory / "history" / "classes.json"),
                     tenants={f"worker{i + 1}": t for i, t in enumerate(tenants)})
        mark("history", t0)

        t0 = time.monotonic()
        scripts = directory / "scripts"
        plan = cluster.make_plan(cfg.version, datanodes=cfg.workers, nodemanagers=cfg.workers,
                                 directory=directory / "cluster", overrides=harvest_overrides(scripts, svc["http"], token_file),
                                 isolate=cfg.isolate)
        say(f"2/5 scripts, topology map, HDFS shim for Hadoop {plan.version}")
        if not plan.layout.is_assembled():
            from scheduler_plugin.testbed.versions import assemble

            assemble(plan.version)
        _run([*_py(), "install-scripts", str(scripts), "--python", sys.executable], "harvest install-scripts", log)
        _topology(plan, tenants, scripts, log)
        shim = _shim(plan, directory, log)
        plan = cluster.make_plan(cfg.version, datanodes=cfg.workers, nodemanagers=cfg.workers,
                                 directory=directory / "cluster", overrides=harvest_overrides(scripts, svc["http"], token_file),
                                 classpath=[str(shim)], isolate=cfg.isolate)
        mark("prepare", t0)

        t0 = time.monotonic()
        say(f"3/5 cluster: {cfg.workers} worker hosts (harvest hadoop up)")
        state["cluster_dir"] = str(plan.dir)
        write_state(directory, state)
        state["cluster"] = cluster.up(plan, timeout_s=cfg.timeout_s, hive=cfg.hive)
        state["version"] = plan.version
        daemons = json.loads((plan.dir / cluster.STATE_FILE).read_text())["processes"]
        state["cluster_processes"] = [{k: p[k] for k in ("role", "host", "pid")} for p in daemons]
        mark("cluster", t0)

        t0 = time.monotonic()
        say(f"4/5 placement service on {svc['http']} (classes of the history)")
        start_service(state, directory)
        mark("service", t0)

        t0 = time.monotonic()
        say(f"5/5 primaries{' and agents' if cfg.mode != 'stock' else ''} on {cfg.workers} workers "
            f"(tenants {', '.join(tenants)})")
        for host in state["tenants"]:
            start_primary(state, directory, host)
        state["state"] = "running"
        write_state(directory, state)
        set_mode(directory, cfg.mode)
        state = read_state(directory)
        mark("workers", t0)
    except BaseException as exc:
        state = _reread(directory, state)
        state["state"] = "failed"
        state["error"] = str(exc)
        write_state(directory, state)
        say(f"start-up failed, stopping what was started (logs in {directory / 'logs'})")
        try:
            down(directory, quiet=True)
        except HarvestError as down_exc:
            say(f"down after the failure: {down_exc}")
        if isinstance(exc, (HarvestError, KeyboardInterrupt)):
            raise
        if isinstance(exc, (OSError, subprocess.SubprocessError)):
            raise TestbedError(f"start-up failed: {exc}") from exc
        raise
    state["startup_s"] = round(time.monotonic() - started, 1)
    write_state(directory, state)
    say(f"up after {state['startup_s']} s: {cfg.workers} workers, mode {state['mode']}, state {directory / STATE_FILE}")
    return state


def _reread(directory: Path, fallback: dict[str, Any]) -> dict[str, Any]:
    try:
        return read_state(directory)
    except TestbedError:
        return fallback


def down(directory: Path, *, quiet: bool = False) -> dict[str, Any]:
    """Stop every recorded process that is still ours, then the cluster; raise if a recorded PID survives."""
    directory = directory.resolve()
    state = read_state(directory)
    records = list(state.get("processes", []))
    # agents first (they write to the RM), then primaries, then the service
    order = {"agent": 0, "primary": 1, "service": 2}
    stopped = 0
    for role in sorted({p["role"] for p in records}, key=lambda r: order.get(r, 9)):
        stopped += stop_processes([p for p in records if p["role"] == role])
    cluster_report: dict[str, Any] = {}
    cluster_dir = state.get("cluster_dir")
    if cluster_dir and (Path(cluster_dir) / cluster.STATE_FILE).exists():
        cluster_report = cluster.down(Path(cluster_dir), quiet=quiet)
    survivors = [p for p in records if ours(p)]
    state["state"] = "stopped"
    write_state(directory, state)
    if survivors:
        raise TestbedError("still running after down: " + ", ".join(f"{p['role']}@{p['host']} (pid {p['pid']})"
                                                                    for p in survivors))
    if not quiet:
        say(f"stopped {stopped} testbed processes and {cluster_report.get('stopped', 0)} cluster processes")
    return {"dir": str(directory), "stopped": stopped, "cluster_stopped": cluster_report.get("stopped", 0),
            "state": "stopped"}


def status(directory: Path) -> dict[str, Any]:
    """Which recorded processes are alive (and ours), the mode, the cluster's health."""
    directory = directory.resolve()
    state = read_state(directory)
    rows = [{"role": p["role"], "host": p["host"], "pid": p["pid"], "alive": ours(p)} for p in state.get("processes", [])]
    out: dict[str, Any] = {"dir": str(directory), "state": state.get("state"), "mode": state.get("mode"), "processes": rows}
    if state.get("cluster_dir") and state.get("state") == "running":
        out["cluster_healthy"] = cluster.status(Path(state["cluster_dir"]))["healthy"]
    return out
