"""Worker hosts with their own IP addresses: one network namespace per worker on a private bridge.

As root with iproute2 (``ip``), each cluster gets a bridge ``hvb<N>`` holding ``10.244.<N>.1/24``
(the master: NameNode and ResourceManager bind there) and, per worker ``i`` (1-based), a namespace
``hv<N>-<name>`` with a veth pair ``hv<N>w<i>`` (on the bridge) / ``hv<N>w<i>p`` (inside, address
``10.244.<N>.<10+i>``). All traffic stays on this machine: the subnet exists only on that bridge and
nothing routes it anywhere. ``<N>`` is the first free number from 13 on, so two clusters on one
machine do not meet.

Without root or ``ip`` there are no namespaces: every daemon runs on 127.0.0.1 on its own ports,
and the NameNode sees every DataNode at 127.0.0.1 (it takes the address from the RPC connection),
so all of them land in one rack.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from placement_service import HarvestError

FIRST_SUBNET = 13
LAST_SUBNET = 250


@dataclass(frozen=True)
class Network:
    """What one cluster's hosts use; ``bridge`` None means the 127.0.0.1 fallback."""

    bridge: str | None
    subnet: int | None

    @property
    def isolated(self) -> bool:
        return self.bridge is not None

    @property
    def master_ip(self) -> str:
        return f"10.244.{self.subnet}.1" if self.isolated else "127.0.0.1"

    def worker_ip(self, index: int) -> str:
        return f"10.244.{self.subnet}.{10 + index}" if self.isolated else "127.0.0.1"

    def namespace(self, name: str) -> str | None:
        return f"hv{self.subnet}-{name}" if self.isolated else None

    def veth(self, index: int) -> str:
        return f"hv{self.subnet}w{index}"


def can_isolate() -> bool:
    """Root and iproute2: network namespaces are possible."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise HarvestError(f"ip {' '.join(args)}: {result.stderr.strip() or 'exit ' + str(result.returncode)}")
    return result


def _links() -> set[str]:
    out = _ip("-o", "link", "show").stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def _used_subnets() -> set[int]:
    out = _ip("-o", "-4", "addr", "show").stdout
    used = set()
    for line in out.splitlines():
        for word in line.split():
            if word.startswith("10.244."):
                used.add(int(word.split(".")[2]))
    return used


def _socket_subnets() -> set[int]:
    """Subnets 10.244.N with a socket bound in this namespace: a process of a cluster whose bridge is
    gone may still hold its address (the master's ports) for a moment after ``down``."""
    used = set()
    for table in ("/proc/net/tcp", "/proc/net/udp"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1:
                addr = bytes.fromhex(fields[1].split(":")[0])[::-1]  # little-endian IPv4
                if len(addr) == 4 and addr[0] == 10 and addr[1] == 244:
                    used.add(addr[2])
    return used


def choose(isolate: bool | None = None) -> Network:
    """A free subnet and bridge name when isolation is possible (and wanted), else the fallback."""
    if isolate is None:
        isolate = can_isolate()
    if not isolate:
        return Network(None, None)
    if not can_isolate():
        raise HarvestError("network namespaces need root and iproute2 ('ip'); run without --netns")
    links, used = _links(), _used_subnets() | _socket_subnets()
    namespaces = set(_ip("netns", "list").stdout.split())
    for n in range(FIRST_SUBNET, LAST_SUBNET):
        if n in used or f"hvb{n}" in links or any(ns.startswith(f"hv{n}-") for ns in namespaces):
            continue
        return Network(f"hvb{n}", n)
    raise HarvestError("no free 10.244.N.0/24 subnet for the cluster's bridge")


def create_bridge(net: Network) -> None:
    assert net.bridge is not None
    _ip("link", "add", net.bridge, "type", "bridge")
    _ip("addr", "add", f"{net.master_ip}/24", "dev", net.bridge)
    _ip("link", "set", net.bridge, "up")


ETC_NETNS = Path("/etc/netns")


def hosts_file(ip: str) -> str:
    """``/etc/hosts`` of a worker's namespace: this machine's host name resolves to the worker's address,
    whose canonical name is the address itself, so that a JVM there that advertises its
    ``InetAddress.getLocalHost()`` (Tez's AM does) advertises an address reachable from the other hosts."""
    return f"127.0.0.1 localhost\n{ip} {ip} {socket.gethostname()}\n"


def create_host(net: Network, index: int, name: str, *, own_hosts_file: bool = False) -> str:
    """Namespace + veth pair for worker ``index``; returns the namespace's name. ``own_hosts_file``:
    also ``/etc/netns/<namespace>/hosts`` (``hosts_file``), which ``ip netns exec`` puts in place
    of ``/etc/hosts`` for the processes it starts there."""
    ns = net.namespace(name)
    assert ns is not None and net.bridge is not None
    if own_hosts_file:
        (ETC_NETNS / ns).mkdir(parents=True, exist_ok=True)
        (ETC_NETNS / ns / "hosts").write_text(hosts_file(net.worker_ip(index)))
    outside, inside = net.veth(index), net.veth(index) + "p"
    _ip("netns", "add", ns)
    _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
    _ip("link", "set", inside, "netns", ns)
    _ip("link", "set", outside, "master", net.bridge, "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    _ip("-n", ns, "addr", "add", f"{net.worker_ip(index)}/24", "dev", inside)
    _ip("-n", ns, "link", "set", inside, "up")
    return ns


def namespace_pids(ns: str) -> list[int]:
    result = _ip("netns", "pids", ns, check=False)
    return [int(word) for word in result.stdout.split() if word.isdigit()]


def remove(bridge: str | None, namespaces: list[str], veths: list[str]) -> list[str]:
    """Delete what ``create_*`` made (missing pieces are fine); returns the errors, if any."""
    errors = []
    existing_ns = set(_ip("netns", "list", check=False).stdout.split())
    links = _links()
    for veth in veths:
        if veth in links:
            result = _ip("link", "del", veth, check=False)
            if result.returncode != 0:
                errors.append(f"veth {veth}: {result.stderr.strip()}")
    for ns in namespaces:
        shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)
        if ns in existing_ns:
            result = _ip("netns", "del", ns, check=False)
            if result.returncode != 0:
                errors.append(f"namespace {ns}: {result.stderr.strip()}")
    try:
        ETC_NETNS.rmdir()  # only when no other namespace has a file there
    except OSError:
        pass
    if bridge and bridge in links:
        result = _ip("link", "del", bridge, check=False)
        if result.returncode != 0:
            errors.append(f"bridge {bridge}: {result.stderr.strip()}")
    return errors
