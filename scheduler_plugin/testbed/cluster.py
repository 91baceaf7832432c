"""Start, check and stop a real Hadoop cluster on this machine (``harvest hadoop up|down|status``).

Python API (``tests/hadoop/conftest.py`` uses it; the CLI is a thin layer over it)::

    plan = make_plan("3.3.6", datanodes=3, nodemanagers=2, directory=Path("/tmp/c"),
                     overrides={("hdfs-site", "dfs.replication"): "2"}, classpath=["/x/shim.jar"])
    info = up(plan)            # -> the JSON object ``harvest hadoop up`` prints (below)
    status(Path("/tmp/c"))     # -> {"healthy": bool, "processes": [...], ...}
    stop_daemon(Path("/tmp/c"), "worker2", "datanode")   # one daemon (SIGTERM; sig=SIGKILL for a crash)
    start_daemon(Path("/tmp/c"), "worker2", "datanode")  # the same command again; returns the PID
    down(Path("/tmp/c"))       # stops every process ``up`` started (by PID) and removes the namespaces

``up`` returns (and the CLI prints)::

    {"version": "3.3.6", "dir": D,
     "namenode": {"rpc": "IP:PORT", "http": "IP:PORT"}, "resourcemanager": {"http": "IP:PORT"},
     "hosts": [{"name": "worker1", "ip": IP, "datanode": "IP:PORT" | null, "nodemanager": "IP:PORT" | null,
                "logs": DIR, "netns": NAME | null, "conf": DIR}, ...],
     "master": {"ip": IP, "logs": DIR, "conf": DIR},
     "bin": D/bin,  # hdfs, yarn, hadoop, mapred: client commands against this cluster
     "lib": DIR, "sleep_jar": JAR, "examples_jar": JAR, "network": "netns" | "loopback", "startup_s": S}

Layout of D: ``cluster.json`` (that object plus the PIDs; written atomically), ``conf/<host>/``
(``*-site.xml``, ``log4j.properties``), ``hosts/<host>/logs/<daemon>.log`` and ``hosts/<host>/data/``,
``bin/``. Hosts: ``master`` (NameNode, ResourceManager, on the bridge address) and ``worker1..K``,
K = max(datanodes, nodemanagers); worker i runs a DataNode if i <= datanodes and a NodeManager if
i <= nodemanagers, in its own network namespace with its own IP address (see ``netns.py``).

Overrides: ``{(file, key): value}`` with file one of core-site, hdfs-site, yarn-site, mapred-site,
capacity-scheduler; ``{dir}``, ``{host}``, ``{ip}`` and ``{lib}`` in a value are replaced per host.
``classpath`` entries are added to every daemon's class path (e.g. the block-placement shim).
Logs stay in D after ``down``; ``down`` then ``up`` on the same D starts a fresh cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placement_service import HarvestError
from placement_service.atomic import atomic_write_json, atomic_write_text
from scheduler_plugin.testbed import clients, netns, procs, siteconf
from scheduler_plugin.testbed.versions import (
    LOG4J,
    MAIN_CLASSES,
    Layout,
    assemble,
    java_home,
    jvm_open_flags,
    resolve,
)

STATE_FILE = "cluster.json"
STANDARD_WORKER_PORTS = {"datanode": 9866, "datanode_http": 9864, "datanode_ipc": 9867, "nodemanager": 45454,
                         "nodemanager_http": 8042, "nodemanager_localizer": 8040, "shuffle": 13562}
STANDARD_MASTER_PORTS = {"namenode": 8020, "namenode_http": 9870, "rm": 8032, "rm_scheduler": 8030,
                         "rm_tracker": 8031, "rm_admin": 8033, "rm_http": 8088}
#: Heap per daemon (MB): the machine has 2 cores and 24 GiB, shared.
HEAP_MB = {"namenode": 384, "datanode": 192, "resourcemanager": 448, "nodemanager": 256}


class ClusterError(HarvestError):
    """The cluster could not be started, checked or stopped; the message names the daemon and its log."""


@dataclass(frozen=True)
class HostPlan:
    name: str
    ip: str
    datanode: bool
    nodemanager: bool
    netns: str | None
    veth: str | None
    ports: dict[str, int]


@dataclass(frozen=True)
class Plan:
    version: str
    layout: Layout
    dir: Path
    datanodes: int
    nodemanagers: int
    network: netns.Network
    master: HostPlan
    workers: tuple[HostPlan, ...]
    master_ports: dict[str, int]
    overrides: dict[tuple[str, str], str] = field(default_factory=dict)
    classpath: tuple[str, ...] = ()


def _free_port(ip: str) -> int:
    with socket.socket() as sock:
        sock.bind((ip, 0))
        return int(sock.getsockname()[1])


def _ports(standard: dict[str, int], ip: str, isolated: bool, taken: set[int]) -> dict[str, int]:
    """The standard ports on a host of its own; on 127.0.0.1 free ports, none handed out twice."""
    if isolated:
        return dict(standard)
    ports = {}
    for key in standard:
        port = _free_port(ip)
        while port in taken:  # the kernel may offer a port again once its probe socket is closed
            port = _free_port(ip)
        taken.add(port)
        ports[key] = port
    return ports


def make_plan(version: str, *, datanodes: int, nodemanagers: int, directory: Path,
              overrides: dict[tuple[str, str], str] | None = None, classpath: list[str] | None = None,
              isolate: bool | None = None) -> Plan:
    """Everything ``up`` will start, with addresses and ports; chooses a free subnet (root) or ports."""
    version = resolve(version)
    if datanodes < 0 or nodemanagers < 0 or datanodes + nodemanagers == 0:
        raise ClusterError("--datanodes and --nodemanagers must be >= 0 and not both 0")
    if max(datanodes, nodemanagers) > 40:
        raise ClusterError("at most 40 worker hosts")
    for file, _key in (overrides or {}):
        if file not in siteconf.SITE_FILES:
            raise ClusterError(f"--set {file}:...: the file must be one of {', '.join(siteconf.SITE_FILES)}")
    net = netns.choose(isolate)
    from scheduler_plugin.testbed.versions import layout
    lay = layout(version)
    master = HostPlan("master", net.master_ip, False, False, None, None, {})
    workers = []
    taken: set[int] = set()
    for i in range(1, max(datanodes, nodemanagers) + 1):
        name = f"worker{i}"
        ip = net.worker_ip(i)
        workers.append(HostPlan(name, ip, i <= datanodes, i <= nodemanagers, net.namespace(name),
                                net.veth(i) if net.isolated else None,
                                _ports(STANDARD_WORKER_PORTS, ip, net.isolated, taken)))
    return Plan(version, lay, directory.resolve(), datanodes, nodemanagers, net, master, tuple(workers),
                _ports(STANDARD_MASTER_PORTS, net.master_ip, net.isolated, taken), dict(overrides or {}),
                tuple(classpath or ()))


# ---------------------------------------------------------------- processes


def _java_cmd(plan: Plan, host: HostPlan, role: str, args: list[str] = ()) -> list[str]:  # type: ignore[assignment]
    conf = plan.dir / "conf" / host.name
    logs = plan.dir / "hosts" / host.name / "logs"
    cp = ":".join([str(conf), str(plan.layout.webapps), f"{plan.layout.lib}/*", *plan.classpath])
    cmd = ["java", f"-Xmx{HEAP_MB[role]}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-Djava.net.preferIPv4Stack=true", f"-Dhadoop.log.dir={logs}", f"-Dyarn.log.dir={logs}",
           f"-Dhadoop.log.file={role}.log", f"-Dhadoop.home.dir={plan.layout.root}", "-Dhadoop.id.str=root",
           f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}", *jvm_open_flags(), "-cp", cp,
           MAIN_CLASSES[role], *args]
    if host.netns:
        cmd = ["ip", "netns", "exec", host.netns, *cmd]
    return cmd


def _env(plan: Plan, host: HostPlan) -> dict[str, str]:
    """What a daemon's environment adds to ours (JAVA_HOME reaches the NodeManagers' containers)."""
    env: dict[str, str] = {}
    env.update({"JAVA_HOME": java_home(), "HADOOP_CONF_DIR": str(plan.dir / "conf" / host.name),
                "HADOOP_HOME": str(plan.layout.root), "HADOOP_MAPRED_HOME": str(plan.layout.root),
                "HADOOP_LOG_DIR": str(plan.dir / "hosts" / host.name / "logs")})
    return env


def _launch(plan: Plan, host: HostPlan, role: str) -> dict[str, Any]:
    """Start one daemon; the record keeps its command so that ``start_daemon`` can start it again."""
    log_path = str(plan.dir / "hosts" / host.name / "logs" / f"{role}.log")
    cmd, env, cwd = _java_cmd(plan, host, role), _env(plan, host), str(plan.dir / "hosts" / host.name)
    pid = procs.spawn(cmd, env, cwd, log_path)
    return {"role": role, "host": host.name, "pid": pid, "start_time": procs.start_time(pid), "log": log_path,
            "cmd": cmd, "env": env, "cwd": cwd}


# ---------------------------------------------------------------- files


def _write_files(plan: Plan) -> None:
    client = HostPlan("client", plan.master.ip, False, False, None, None, {})
    for host in (plan.master, client, *plan.workers):
        conf = plan.dir / "conf" / host.name
        conf.mkdir(parents=True, exist_ok=True)
        for name, props in siteconf.site_files(plan, host).items():
            atomic_write_text(conf / f"{name}.xml", siteconf.render(props))
        log4j = LOG4J if host.name != "client" else LOG4J.replace("rootLogger=INFO", "rootLogger=WARN")
        atomic_write_text(conf / "log4j.properties", log4j)
        if host.name != "client":
            (plan.dir / "hosts" / host.name / "logs").mkdir(parents=True, exist_ok=True)
            (plan.dir / "hosts" / host.name / "data").mkdir(parents=True, exist_ok=True)
    (plan.dir / "bin").mkdir(exist_ok=True)
    for command in clients.CLIENT_COMMANDS:
        path = plan.dir / "bin" / command
        atomic_write_text(path, clients.client_script(plan, command))
        path.chmod(0o755)


def describe(plan: Plan) -> dict[str, Any]:
    """The JSON object of ``up`` (without ``startup_s``)."""
    def addr(ip: str, port: int) -> str:
        return f"{ip}:{port}"

    mp, ip = plan.master_ports, plan.master.ip
    return {
        "version": plan.version,
        "namenode": {"rpc": addr(ip, mp["namenode"]), "http": addr(ip, mp["namenode_http"])},
        "resourcemanager": {"http": addr(ip, mp["rm_http"]), "rpc": addr(ip, mp["rm"]),
                            "admin": addr(ip, mp["rm_admin"])},
        "hosts": [{"name": h.name, "ip": h.ip,
                   "datanode": addr(h.ip, h.ports["datanode"]) if h.datanode else None,
                   "nodemanager": addr(h.ip, h.ports["nodemanager"]) if h.nodemanager else None,
                   "datanode_http": addr(h.ip, h.ports["datanode_http"]) if h.datanode else None,
                   "nodemanager_http": addr(h.ip, h.ports["nodemanager_http"]) if h.nodemanager else None,
                   "logs": str(plan.dir / "hosts" / h.name / "logs"), "netns": h.netns,
                   "conf": str(plan.dir / "conf" / h.name)} for h in plan.workers],
        "master": {"ip": ip, "logs": str(plan.dir / "hosts" / "master" / "logs"),
                   "conf": str(plan.dir / "conf" / "master")},
        "dir": str(plan.dir),
        "bin": str(plan.dir / "bin"),
        "conf": str(plan.dir / "conf" / "client"),
        "lib": str(plan.layout.lib),
        "sleep_jar": str(plan.layout.sleep_jar),
        "examples_jar": str(plan.layout.examples_jar),
        "network": "netns" if plan.network.isolated else "loopback",
    }


# ---------------------------------------------------------------- health


def _get_json(url: str, timeout_s: float = 3.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (our own daemons)
        return json.loads(resp.read())


def _jmx(http: str, name: str) -> dict[str, Any]:
    doc = _get_json(f"http://{http}/jmx?qry={name}")
    beans = doc.get("beans") or [{}]
    return dict(beans[0])


def probe(info: dict[str, Any]) -> dict[str, Any]:
    """What the NameNode and the ResourceManager say now (errors as strings, never raised)."""
    out: dict[str, Any] = {}
    nn_http = info["namenode"]["http"]
    try:
        state = _jmx(nn_http, "Hadoop:service=NameNode,name=FSNamesystemState")
        nn_info = _jmx(nn_http, "Hadoop:service=NameNode,name=NameNodeInfo")
        out["namenode"] = {"live_datanodes": state.get("NumLiveDataNodes"),
                           "dead_datanodes": state.get("NumDeadDataNodes"),
                           "safemode": bool(nn_info.get("Safemode"))}
    except (OSError, ValueError) as exc:
        out["namenode"] = {"error": str(exc)}
    try:
        metrics = _get_json(f"http://{info['resourcemanager']['http']}/ws/v1/cluster/metrics")["clusterMetrics"]
        out["resourcemanager"] = {"active_nodemanagers": metrics.get("activeNodes"),
                                  "unhealthy_nodemanagers": metrics.get("unhealthyNodes")}
    except (OSError, ValueError, KeyError) as exc:
        out["resourcemanager"] = {"error": str(exc)}
    return out


def _healthy(info: dict[str, Any], probed: dict[str, Any]) -> bool:
    want_dn = sum(1 for h in info["hosts"] if h["datanode"])
    want_nm = sum(1 for h in info["hosts"] if h["nodemanager"])
    nn, rm = probed["namenode"], probed["resourcemanager"]
    return (nn.get("live_datanodes") == want_dn and nn.get("safemode") is False
            and rm.get("active_nodemanagers") == want_nm)


# ---------------------------------------------------------------- up / down / status


def _read_state(directory: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((directory / STATE_FILE).read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"{directory / STATE_FILE}: unreadable cluster state ({exc})") from None


def _say(message: str) -> None:
    print(f"harvest hadoop: {message}", file=sys.stderr, flush=True)


def up(plan: Plan, *, timeout_s: float = 300.0, assemble_missing: bool = True, hive: bool = False) -> dict[str, Any]:
    """Start the cluster of ``plan`` and wait until every daemon is healthy; returns ``describe`` + times.

    1. refuse a directory that holds a running cluster; clean up a stopped one's leftovers;
    2. assemble the version's jars if needed; write the conf folders and bin/ wrappers;
    3. create the bridge and one namespace per worker (root) and record them at once, so that a
       failure anywhere later is undone by ``down``;
    4. format the NameNode; start NameNode and ResourceManager, then every DataNode and NodeManager;
    5. wait for N live DataNodes, safe mode off and M active NodeManagers; on a timeout or a dead
       daemon stop everything (logs stay) and raise naming the daemon and its log's last lines;
    6. ``hive``: HiveServer2 (embedded metastore) with Tez on YARN (``hiveserver.py``); its entry
       ``"hiveserver2"`` joins the JSON object.
    """
    started = time.monotonic()
    plan.dir.mkdir(parents=True, exist_ok=True)
    old = _read_state(plan.dir)
    if old is not None:
        running = [p for p in old.get("processes", []) if procs.alive(p)]
        if running:
            names = ", ".join(f"{p['role']}@{p['host']} (pid {p['pid']})" for p in running)
            raise ClusterError(f"{plan.dir} holds a running cluster ({names}); "
                               f"run 'harvest hadoop down --dir {plan.dir}' first")
        down(plan.dir, quiet=True)
    if not plan.layout.is_assembled():
        if not assemble_missing:
            raise ClusterError(f"Hadoop {plan.version} is not assembled in {plan.layout.root}: run 'make hadoop'")
        assemble(plan.version)
    for sub in ("hosts", "conf"):
        shutil.rmtree(plan.dir / sub, ignore_errors=True)
    _write_files(plan)
    info = describe(plan)
    state: dict[str, Any] = dict(info, state="starting", processes=[],
                                 bridge=plan.network.bridge, namespaces=[], veths=[])

    def save() -> None:
        atomic_write_json(plan.dir / STATE_FILE, state)

    save()
    try:
        if plan.network.isolated:
            _say(f"network: bridge {plan.network.bridge} {plan.network.master_ip}/24, one namespace per worker")
            netns.create_bridge(plan.network)
            for i, host in enumerate(plan.workers, start=1):
                state["namespaces"].append(host.netns)
                state["veths"].append(host.veth)
                save()
                netns.create_host(plan.network, i, host.name, own_hosts_file=hive)
        _say(f"formatting the NameNode (Hadoop {plan.version})")
        fmt_log = plan.dir / "hosts" / "master" / "logs" / "namenode-format.log"
        with open(fmt_log, "wb") as log:
            rc = subprocess.run(_java_cmd(plan, plan.master, "namenode", ["-format", "-force", "-nonInteractive"]),
                                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **_env(plan, plan.master)},
                                stdin=subprocess.DEVNULL, check=False, timeout=timeout_s).returncode
        if rc != 0:
            raise ClusterError(f"NameNode format failed (exit {rc}); {fmt_log}:\n{procs.tail(fmt_log)}")
        for role in ("namenode", "resourcemanager"):
            state["processes"].append(_launch(plan, plan.master, role))
            save()
        for host in plan.workers:
            for role, wanted in (("datanode", host.datanode), ("nodemanager", host.nodemanager)):
                if wanted:
                    state["processes"].append(_launch(plan, host, role))
                    save()
        _say(f"started {len(state['processes'])} daemons; waiting for them to be healthy")
        deadline = started + timeout_s
        last: dict[str, Any] = {}
        while True:
            dead = [p for p in state["processes"] if not procs.alive(p)]
            if dead:
                p = dead[0]
                raise ClusterError(f"{p['role']} on {p['host']} exited during start-up; {p['log']}:\n{procs.tail(p['log'])}")
            last = probe(info)
            if _healthy(info, last):
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"not healthy after {timeout_s:.0f} s: {json.dumps(last)}; logs in "
                                   f"{plan.dir / 'hosts'}")
            time.sleep(1.0)
        if hive:
            from scheduler_plugin.testbed import hiveserver

            def register(record: dict[str, Any]) -> None:
                state["processes"].append(record)
                save()

            info["hiveserver2"] = hiveserver.start(plan, register, say=_say)
    except BaseException as exc:
        state["state"] = "failed"
        state["error"] = str(exc)
        save()
        _say(f"start-up failed, stopping what was started (logs stay in {plan.dir / 'hosts'})")
        down(plan.dir, quiet=True)
        if isinstance(exc, (HarvestError, KeyboardInterrupt)):
            raise
        if isinstance(exc, (OSError, subprocess.SubprocessError)):
            raise ClusterError(f"start-up failed: {exc}") from exc
        raise
    info["startup_s"] = round(time.monotonic() - started, 1)
    state.update(info, state="running")
    save()
    _say(f"healthy after {info['startup_s']} s: {len(plan.workers)} worker hosts ({info['network']})")
    return info


def down(directory: Path, *, quiet: bool = False, grace_s: float = 10.0) -> dict[str, Any]:
    """Stop every process ``up`` recorded in ``directory`` (and their descendants, and anything left in
    the cluster's namespaces), then remove the namespaces, veths and bridge. Logs stay."""
    directory = directory.resolve()
    state = _read_state(directory)
    if state is None:
        raise ClusterError(f"{directory}: no cluster here ({STATE_FILE} missing)")
    if state.get("state") == "stopped":
        # Its namespaces and bridge went with it, and their names may be another cluster's by now:
        # killing what runs in them would stop that cluster.
        return {"dir": str(directory), "stopped": 0, "state": "stopped"}
    ours = [p for p in state.get("processes", []) if procs.alive(p)]
    pids = [int(p["pid"]) for p in ours]
    for pid in list(pids):
        pids.extend(procs.descendants(pid))
    for ns in state.get("namespaces", []):
        pids.extend(netns.namespace_pids(ns) if netns.can_isolate() else [])
    pids = sorted(set(pids) - {os.getpid()})
    if pids and not quiet:
        _say(f"stopping {len(ours)} daemons ({len(pids)} processes)")
    procs.send(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(procs.start_time(pid) is not None for pid in pids):
        time.sleep(0.2)
    left = [pid for pid in pids if procs.start_time(pid) is not None]
    procs.send(left, signal.SIGKILL)
    # Only then remove the network: a process still exiting keeps its sockets (and their addresses).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(procs.start_time(pid) is not None for pid in left):
        time.sleep(0.1)
    errors: list[str] = []
    if state.get("namespaces") or state.get("bridge"):
        if netns.can_isolate():
            errors = netns.remove(state.get("bridge"), list(state.get("namespaces", [])), list(state.get("veths", [])))
        else:
            errors = ["network namespaces exist but this user cannot remove them (not root)"]
    state["state"] = "stopped"
    state["stopped_processes"] = len(pids)
    atomic_write_json(directory / STATE_FILE, state)
    if errors:
        raise ClusterError("; ".join(errors))
    return {"dir": str(directory), "stopped": len(pids), "state": "stopped"}


def status(directory: Path) -> dict[str, Any]:
    """Processes alive, live DataNodes, active NodeManagers; ``healthy`` when everything is as started."""
    directory = directory.resolve()
    state = _read_state(directory)
    if state is None:
        raise ClusterError(f"{directory}: no cluster here ({STATE_FILE} missing)")
    rows = [{"role": p["role"], "host": p["host"], "pid": p["pid"], "alive": procs.alive(p), "log": p["log"]}
            for p in state.get("processes", [])]
    out: dict[str, Any] = {"dir": str(directory), "version": state.get("version"), "state": state.get("state"),
                           "processes": rows}
    if state.get("state") == "running":
        out.update(probe(state))
        out["healthy"] = all(p["alive"] for p in rows) and _healthy(state, out)
    else:
        out["healthy"] = False
    return out


def _find(state: dict[str, Any], host: str, role: str) -> dict[str, Any]:
    for proc in state.get("processes", []):
        if proc["host"] == host and proc["role"] == role:
            return dict(proc)
    raise ClusterError(f"no {role} on {host} in this cluster")


def stop_daemon(directory: Path, host: str, role: str, *, sig: int = signal.SIGTERM, grace_s: float = 10.0) -> None:
    """Stop one daemon (``role`` on ``host``, e.g. "datanode" on "worker2"); SIGKILL after ``grace_s``.
    ``sig=signal.SIGKILL`` kills it at once, as a crash would."""
    directory = directory.resolve()
    state = _read_state(directory) or {}
    proc = _find(state, host, role)
    if not procs.alive(proc):
        return
    pids = [int(proc["pid"]), *procs.descendants(int(proc["pid"]))]
    procs.send(pids, sig)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and procs.alive(proc):
        time.sleep(0.2)
    procs.send([pid for pid in pids if Path(f"/proc/{pid}").exists()], signal.SIGKILL)


def start_daemon(directory: Path, host: str, role: str) -> int:
    """Start a stopped daemon again with its recorded command (same configuration, data and log);
    returns its new PID. Waiting for it to register is the caller's business (``status``)."""
    directory = directory.resolve()
    state = _read_state(directory) or {}
    proc = _find(state, host, role)
    if procs.alive(proc):
        raise ClusterError(f"{role} on {host} is running (pid {proc['pid']})")
    pid = procs.spawn(list(proc["cmd"]), dict(proc["env"]), str(proc["cwd"]), str(proc["log"]))
    for rec in state["processes"]:
        if rec["host"] == host and rec["role"] == role:
            rec.update(pid=pid, start_time=procs.start_time(pid))
    atomic_write_json(directory / STATE_FILE, state)
    return pid
