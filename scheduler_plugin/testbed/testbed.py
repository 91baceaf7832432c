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

Modes (``set_mode``): **harvest** and **pt** run the agents (capacity and reserve as configured);
**stock** stops them and gives each NodeManager back its configured size in the RM. How a query
is routed per mode is ``runner.py``'s business.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement_service import HarvestError
from placement_service.atomic import atomic_write_json, atomic_write_text
from scheduler_plugin.testbed import cluster, procs

STATE_FILE = "testbed.json"
MODES = ("harvest", "pt", "stock")
DEFAULT_TRACE = Path(os.environ.get("HARVEST_SHARED_DATA", "/work/shared/data")) / "cpu" / "azure_v1_microsoft_avg_100.csv.gz"
REPO = Path(__file__).resolve().parents[2]
#: The NodeManager's own size (siteconf.py) and what the agent lends / keeps back on each worker.
NM_MEMORY_MB, NM_VCORES = 2048, 4
AGENT_CAPACITY = {"capacity-cores": "4", "reserve-cores": "1", "capacity-memory-mb": "3072",
                  "reserve-memory-mb": "1024"}


class TestbedError(HarvestError):
    """The testbed could not be started, switched or stopped; the message names the part and its log."""

    __test__ = False  # not a pytest class


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


def say(message: str) -> None:
    print(f"harvest testbed: {message}", file=sys.stderr, flush=True)


def _py() -> list[str]:
    return [sys.executable, "-m", "placement_service.cli"]


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


def _run(cmd: list[str], what: str, log: Path, timeout_s: float = 600) -> None:
    with open(log, "ab") as handle:
        done = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env={**os.environ, **_env()}, timeout=timeout_s, check=False, cwd=REPO)
    if done.returncode != 0:
        raise TestbedError(f"{what} failed (exit {done.returncode}); {log}:\n{procs.tail(log)}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- state


def read_state(directory: Path) -> dict[str, Any]:
    path = directory / STATE_FILE
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise TestbedError(f"{directory}: no testbed here ({STATE_FILE} missing)") from None
    except (OSError, ValueError) as exc:
        raise TestbedError(f"{path}: unreadable testbed state ({exc})") from None


def write_state(directory: Path, state: dict[str, Any]) -> None:
    atomic_write_json(directory / STATE_FILE, state)


def cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def ours(proc: dict[str, Any]) -> bool:
    """The recorded process is still the one we started: same start time and same command line."""
    return procs.alive(proc) and cmdline(int(proc["pid"])) == list(proc["cmd"])


def start_process(state: dict[str, Any], directory: Path, role: str, host: str, cmd: list[str], log: Path,
                  **extra: Any) -> dict[str, Any]:
    """Spawn ``cmd`` in its own process group and record it in the state at once."""
    pid = procs.spawn(cmd, _env(), str(REPO), str(log))
    rec = {"role": role, "host": host, "pid": pid, "start_time": procs.start_time(pid), "cmd": cmd,
           "log": str(log), **extra}
    state["processes"] = [p for p in state.get("processes", []) if not (p["role"] == role and p["host"] == host)]
    state["processes"].append(rec)
    write_state(directory, state)
    return rec


def stop_processes(records: list[dict[str, Any]], grace_s: float = 10.0) -> int:
    """SIGTERM each recorded process group that is ours (and its descendants), SIGKILL after ``grace_s``;
    returns how many processes were signalled. Records that are not ours any more are skipped."""
    mine = [p for p in records if ours(p)]
    pids: list[int] = []
    for p in mine:
        pid = int(p["pid"])
        pids.append(pid)
        pids.extend(procs.descendants(pid))
    pids = sorted(set(pids) - {os.getpid()})
    for p in mine:
        try:
            os.killpg(int(p["pid"]), signal.SIGTERM)
        except OSError:
            pass
    procs.send(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(procs.start_time(pid) is not None for pid in pids):
        time.sleep(0.2)
    left = [pid for pid in pids if procs.start_time(pid) is not None]
    for p in mine:
        if procs.start_time(int(p["pid"])) is not None:
            try:
                os.killpg(int(p["pid"]), signal.SIGKILL)
            except OSError:
                pass
    procs.send(left, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(procs.start_time(pid) is not None for pid in left):
        time.sleep(0.1)
    return len(pids)


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


def _overrides(scripts: Path, service_http: str, token_file: Path) -> dict[tuple[str, str], str]:
    """The cluster's properties as the real-Hadoop tier sets them (tests/hadoop/conftest.py)."""
    return {
        ("hdfs-site", "dfs.block.replicator.classname"): "org.harvest.hdfs.HarvestBlockPlacementPolicy",
        ("hdfs-site", "harvest.placement.url"): f"{service_http}/v1/blocks/place",
        ("hdfs-site", "harvest.placement.token-file"): str(token_file),
        ("hdfs-site", "harvest.placement.read-timeout-ms"): "3000",
        ("hdfs-site", "harvest.placement.connect-timeout-ms"): "1000",
        ("hdfs-site", "harvest.placement.cooldown-ms"): "3000",
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
        w = csv.writer(handle)
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


# ---------------------------------------------------------------- service, primaries, agents


def _wait_http(url: str, token: str, proc: dict[str, Any], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not procs.alive(proc):
            raise TestbedError(f"{proc['role']} exited during start-up; {proc['log']}:\n{procs.tail(proc['log'])}")
        try:
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, timeout=5):  # noqa: S310 (our own service)
                return
        except (OSError, urllib.error.URLError):
            time.sleep(0.5)
    raise TestbedError(f"{proc['role']} did not answer {url} in {timeout_s:.0f} s; {proc['log']}")


def start_service(state: dict[str, Any], directory: Path) -> dict[str, Any]:
    svc = state["service"]
    info = state["cluster"]
    master_conf = Path(info["master"]["conf"])
    cmd = [*_py(), "serve", "--data-dir", svc["data_dir"], "--host", "127.0.0.1", "--http-port", str(svc["http_port"]),
           "--grpc-port", str(svc["grpc_port"]), "--token-file", svc["token_file"],
           "--classes-file", state["classes_file"], "--rm-url", f"http://{info['resourcemanager']['http']}",
           "--capacity-scheduler-file", str(master_conf / "capacity-scheduler.xml"),
           "--refresh-queues-command", f"{Path(info['bin']) / 'yarn'} rmadmin -refreshQueues"]
    rec = start_process(state, directory, "service", "master", cmd, directory / "logs" / "service.log")
    token = Path(svc["token_file"]).read_text().strip()
    _wait_http(f"{svc['http']}/healthz", token, rec, 120)
    return rec


def start_primary(state: dict[str, Any], directory: Path, host: str) -> dict[str, Any]:
    out = directory / "primary" / f"{host}.csv"
    p = state["primary"]
    cmd = [sys.executable, "-m", "scheduler_plugin.testbed.primary", "--utilization", state["utilization_file"],
           "--tenant", state["tenants"][host], "--cores", str(p["cores"]), "--speedup", str(p["speedup"]),
           "--window-s", str(p["window_s"]), "--latency-out", str(out)]
    return start_process(state, directory, "primary", host, cmd, directory / "logs" / f"primary-{host}.log",
                         latency_file=str(out))


def _host_info(state: dict[str, Any], host: str) -> dict[str, Any]:
    return next(h for h in state["cluster"]["hosts"] if h["name"] == host)


def _node_name(state: dict[str, Any], host: str) -> str:
    """What the agent reports as its node: the DataNode's address (its IP) on hosts of their own."""
    return str(_host_info(state, host)["ip"]) if state["cluster"]["network"] == "netns" else host


def start_agent(state: dict[str, Any], directory: Path, host: str) -> dict[str, Any]:
    info = state["cluster"]
    h = _host_info(state, host)
    primary = next(p for p in state["processes"] if p["role"] == "primary" and p["host"] == host)
    agent_dir = Path(info["dir"]) / "hosts" / host / "agent"  # where the NodeManager's label script looks
    settings = {"mode": "yarn", "interval-s": "1", "scope-root-pid": str(primary["pid"]), **AGENT_CAPACITY,
                "reclaim": "rm", "rm-url": f"http://{info['resourcemanager']['http']}",
                "nm-url": f"http://{h['nodemanager_http']}", "yarn-bin": str(Path(info["bin"]) / "yarn"),
                "state-dir": str(agent_dir), "service": state["service"]["grpc"],
                "service-http": state["service"]["http"], "token-file": state["service"]["token_file"],
                "tenant": state["tenants"][host], "node": _node_name(state, host),
                "storage-path": str(Path(info["dir"]) / "hosts" / host / "data"),
                "cooldown-s": "5", "advertise-hold-s": "5", "rm-check-interval-s": "5", "metrics-port": "0"}
    cmd = [*_py(), "-v", "agent", *[x for k, v in settings.items() for x in (f"--{k}", v)]]
    log = directory / "logs" / f"agent-{host}.log"
    log.write_text("")
    rec = start_process(state, directory, "agent", host, cmd, log)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", log.read_text(errors="replace"))
        if m:
            rec["metrics_port"] = int(m.group(1))
            write_state(directory, state)
            return rec
        if not procs.alive(rec):
            break
        time.sleep(0.3)
    raise TestbedError(f"the agent on {host} did not start; {log}:\n{procs.tail(log)}")


def restore_node_sizes(state: dict[str, Any]) -> None:
    """Give every NodeManager its configured size back in the RM (what the agents changed)."""
    from agent.yarn import YarnClient, YarnError

    rm = f"http://{state['cluster']['resourcemanager']['http']}"
    for h in state["cluster"]["hosts"]:
        if not h.get("nodemanager_http"):
            continue
        client = YarnClient(rm, f"http://{h['nodemanager_http']}", yarn_bin=str(Path(state["cluster"]["bin"]) / "yarn"),
                            timeout_s=10)
        try:
            client.update_node_resource(client.node_id(), NM_MEMORY_MB, NM_VCORES, -1)
        except YarnError as exc:
            raise TestbedError(f"could not give {h['name']}'s NodeManager its size back: {exc}") from None


def node_sizes(state: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """What the RM holds per node: host name -> (memory MB, vcores)."""
    url = f"http://{state['cluster']['resourcemanager']['http']}/ws/v1/cluster/nodes"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 (our own RM)
            nodes = (json.loads(resp.read()).get("nodes") or {}).get("node") or []
    except (OSError, ValueError) as exc:
        raise TestbedError(f"GET {url}: {exc}") from None
    return {str(n["nodeHostName"]): (int(n["totalResource"]["memory"]), int(n["totalResource"]["vCores"]))
            for n in nodes}


def wait_advertised(state: dict[str, Any], timeout_s: float = 120.0) -> None:
    """Wait until every NodeManager's size in the RM is the agent's (not the configured 2,048 MB / 4 vcores:
    an agent lends at most capacity - reserve, 3 vcores), so a mode's first query meets the agents' sizes."""
    full = (NM_MEMORY_MB, NM_VCORES)
    deadline = time.monotonic() + timeout_s
    sizes: dict[str, tuple[int, int]] = {}
    while time.monotonic() < deadline:
        sizes = node_sizes(state)
        if len(sizes) == len(state["tenants"]) and full not in sizes.values():
            return
        time.sleep(1.0)
    raise TestbedError(f"the agents did not set the nodes' sizes in the RM within {timeout_s:.0f} s: {sizes}; "
                       f"logs in {Path(state['dir']) / 'logs'}")


def service_node(state: dict[str, Any], host: str) -> dict[str, Any] | None:
    """The placement service's view of a worker (its agent's last report, tenant, class); None before
    its first report."""
    svc = state["service"]
    token = Path(svc["token_file"]).read_text().strip()
    url = f"{svc['http']}/v1/nodes/{_node_name(state, host)}"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 (our own service)
            return dict(json.loads(resp.read()))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise TestbedError(f"GET {url}: HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise TestbedError(f"GET {url}: {exc}") from None


def set_mode(directory: Path, mode: str) -> dict[str, Any]:
    """Switch the testbed to ``mode``: agents running and their node sizes in the RM (harvest, pt), or
    stopped with the NodeManagers' configured sizes restored (stock). Returns the new state."""
    if mode not in MODES:
        raise TestbedError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    directory = directory.resolve()
    state = read_state(directory)
    if state.get("state") != "running":
        raise TestbedError(f"{directory}: the testbed is {state.get('state')}, not running")
    agents = [p for p in state["processes"] if p["role"] == "agent"]
    if mode == "stock":
        stop_processes(agents)
        state["processes"] = [p for p in state["processes"] if p["role"] != "agent"]
        state["mode"] = mode
        write_state(directory, state)
        restore_node_sizes(state)
    else:
        for host in state["tenants"]:
            if not any(p["host"] == host and ours(p) for p in agents):
                start_agent(state, directory, host)
        state["mode"] = mode
        write_state(directory, state)
        wait_advertised(state)
    return state


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
                                 directory=directory / "cluster", overrides=_overrides(scripts, svc["http"], token_file),
                                 isolate=cfg.isolate)
        say(f"2/5 scripts, topology map, HDFS shim for Hadoop {plan.version}")
        if not plan.layout.is_assembled():
            from scheduler_plugin.testbed.versions import assemble

            assemble(plan.version)
        _run([*_py(), "install-scripts", str(scripts), "--python", sys.executable], "harvest install-scripts", log)
        _topology(plan, tenants, scripts, log)
        shim = _shim(plan, directory, log)
        plan = cluster.make_plan(cfg.version, datanodes=cfg.workers, nodemanagers=cfg.workers,
                                 directory=directory / "cluster", overrides=_overrides(scripts, svc["http"], token_file),
                                 classpath=[str(shim)], isolate=cfg.isolate)
        mark("prepare", t0)

        t0 = time.monotonic()
        say(f"3/5 cluster: {cfg.workers} worker hosts (harvest hadoop up)")
        state["cluster_dir"] = str(plan.dir)
        write_state(directory, state)
        state["cluster"] = cluster.up(plan, timeout_s=cfg.timeout_s)
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
