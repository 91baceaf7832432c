#!/usr/bin/python3 -IS
"""Hadoop rack-awareness script (``net.topology.script.file.name``).

Contract: Hadoop runs the script with up to ``net.topology.script.number.args`` (default 100) host
names or IP addresses as arguments (the NameNode passes DataNode **IP addresses**: it resolves racks
by the address a DataNode registers with) and reads one network path per argument from stdout, in the same
order, separated by whitespace. A path starts with ``/`` (``/rack`` or ``/datacenter/rack``). A host
the mapping does not know gets ``/default-rack``, so a new node still joins the cluster.

The mapping file has one entry per line, ``<host-or-ip> <path>``; blank lines and ``#`` comments are
ignored. It is generated from the inventory by ``harvest topology-map`` (a line per server name and
one per address). The file is
``$HARVEST_TOPOLOGY_MAP`` when set, else ``topology.map`` next to this script. Names are matched as
given, then lower-cased, then by their short form (before the first dot).

Standard library only; a missing or unreadable mapping file maps every host to ``/default-rack``
(and says why on stderr) rather than failing, because Hadoop treats a failing script as an error
for the whole batch.
"""

from __future__ import annotations

import os
import sys

DEFAULT_RACK = "/default-rack"
MAP_ENV = "HARVEST_TOPOLOGY_MAP"
MAP_NAME = "topology.map"


def is_address(host: str) -> bool:
    """IPv4 (digits and dots) or IPv6 (has a colon): matched as given, never shortened."""
    return ":" in host or host.replace(".", "").isdigit()


def load_mapping(path: str) -> dict[str, str]:
    """Parse ``<host> <path>`` lines; raise ValueError naming the line for a malformed entry."""
    mapping = {}
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            if len(fields) != 2 or not fields[1].startswith("/"):
                raise ValueError(f"{path}:{number}: expected '<host> /<rack path>', got {raw.strip()!r}")
            host, rack = fields
            mapping[host] = rack
            mapping.setdefault(host.lower(), rack)
            if not is_address(host):  # an IP address has no short form
                mapping.setdefault(host.lower().split(".", 1)[0], rack)
    return mapping


def resolve(mapping: dict[str, str], host: str) -> str:
    keys = [host, host.lower()]
    if not is_address(host):
        keys.append(host.lower().split(".", 1)[0])
    for key in keys:
        if key in mapping:
            return mapping[key]
    return DEFAULT_RACK


def main(argv: list[str]) -> int:
    path = os.environ.get(MAP_ENV) or os.path.join(os.path.dirname(os.path.abspath(__file__)), MAP_NAME)
    try:
        mapping = load_mapping(path)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"topology.py: using {DEFAULT_RACK} for every host: {exc}\n")
        mapping = {}
    sys.stdout.write("\n".join(resolve(mapping, host) for host in argv))
    if argv:
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
