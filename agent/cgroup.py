"""A cgroup v2 directory as "the node": a container, or a systemd slice, instead of the whole host.

Inside a container psutil reads the host's ``/proc/stat`` and ``/proc/meminfo``: every other
container on the host would count as this node's primary tenant. With ``--cgroup DIR`` the agent
reads the node from the cgroup instead (cgroup v2 interface files, all plain text):

    capacity_cores   = quota / period from ``cpu.max`` ("max" = the host's cores)
    capacity_memory  = ``memory.max`` ("max" = the host's memory)
    node_cpu_cores   = delta(``cpu.stat`` usage_usec) / 1e6 / delta(wall seconds)
    node_memory_mb   = (``memory.current`` - ``memory.stat`` inactive_file) / 2^20
                       (reclaimable page cache is not use, as ``docker stats`` counts it)
    processes        = ``cgroup.procs`` of the directory and of every directory below it
"""

from __future__ import annotations

import os

from agent import ConfigError

_MB = 1024.0 * 1024.0


class CgroupError(ConfigError):
    """The cgroup directory is missing a file or holds something unreadable."""


def _read(path: str, name: str) -> str:
    try:
        with open(os.path.join(path, name), encoding="ascii") as handle:
            return handle.read()
    except OSError as exc:
        raise CgroupError(f"cgroup {path}: cannot read {name}: {exc.strerror or exc}") from None


def cgroup_capacity(path: str) -> tuple[float, int]:
    """(cores, memory MB) the cgroup may use; an unlimited side is the host's."""
    import psutil

    cpu = _read(path, "cpu.max").split()
    try:
        cores = float(psutil.cpu_count() or 1) if cpu[0] == "max" else int(cpu[0]) / int(cpu[1])
    except (IndexError, ValueError):
        raise CgroupError(f"cgroup {path}: cpu.max should be '<quota|max> <period>', got {' '.join(cpu)!r}") \
            from None
    mem = _read(path, "memory.max").strip()
    try:
        memory_mb = int(psutil.virtual_memory().total // _MB) if mem == "max" else int(int(mem) // _MB)
    except ValueError:
        raise CgroupError(f"cgroup {path}: memory.max should be bytes or 'max', got {mem!r}") from None
    return cores, memory_mb


def cgroup_cpu_s(path: str) -> float:
    """CPU seconds used by the cgroup so far (``cpu.stat`` usage_usec)."""
    for line in _read(path, "cpu.stat").splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            try:
                return int(value) / 1e6
            except ValueError:
                break
    raise CgroupError(f"cgroup {path}: cpu.stat has no usage_usec")


def cgroup_memory_mb(path: str) -> float:
    """Memory in use: ``memory.current`` less the inactive page cache from ``memory.stat``."""
    try:
        current = int(_read(path, "memory.current").strip())
    except ValueError:
        raise CgroupError(f"cgroup {path}: memory.current is not a number") from None
    inactive = 0
    try:
        for line in _read(path, "memory.stat").splitlines():
            key, _, value = line.partition(" ")
            if key == "inactive_file":
                inactive = int(value)
    except (CgroupError, ValueError):
        inactive = 0
    return max(current - inactive, 0) / _MB


def cgroup_pids(path: str) -> set[int]:
    """Every pid in the cgroup and its descendants (``cgroup.procs`` of each directory)."""
    pids: set[int] = set()
    _read(path, "cgroup.procs")  # the top one must exist
    for root, _dirs, files in os.walk(path):
        if "cgroup.procs" not in files:
            continue
        try:
            with open(os.path.join(root, "cgroup.procs"), encoding="ascii") as handle:
                pids.update(int(line) for line in handle if line.strip().isdigit())
        except OSError:
            continue  # a child cgroup removed while walking
    return pids
