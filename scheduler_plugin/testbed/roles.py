"""The testbed's roles beside the cluster: the placement service, the primary tenants, the agents,
and the switch between modes (``testbed.py`` starts them, ``runner.py`` switches).

Modes: **harvest** and **pt** run the agents (``AGENT_CAPACITY``); **stock** stops them and gives
each NodeManager back its configured size in the RM.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from scheduler_plugin.testbed import procs
from scheduler_plugin.testbed.state import (
    TestbedError,
    _py,
    ours,
    read_state,
    start_process,
    stop_processes,
    write_state,
)

MODES = ("harvest", "pt", "stock")
#: The NodeManager's own size (siteconf.py) and what the agent lends / keeps back on each worker.
NM_MEMORY_MB, NM_VCORES = 2048, 4
AGENT_CAPACITY = {"capacity-cores": "4", "reserve-cores": "1", "capacity-memory-mb": "3072",
                  "reserve-memory-mb": "1024"}


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
