"""Stock-only replica spreading: upgrade domains from the 3x3 grid in a CombinedHostFileManager file.

With ``dfs.namenode.hosts.provider.classname = ...CombinedHostFileManager`` the NameNode reads
``dfs.hosts`` as a JSON array of ``{"hostName", "upgradeDomain", "adminState", ...}`` objects, and
``BlockPlacementPolicyWithUpgradeDomain`` puts the replicas of a block in distinct upgrade domains
(``dfs.namenode.upgrade.domain.factor``, default: the replication factor). Mapping grid cells to
upgrade domains gets part of replica placement's diversity from stock HDFS:

* ``row`` (default): the domain is the server's reimage-frequency row, ``reimage-row-<r>``. Three
  replicas land in three different rows, so no block keeps all its replicas on the servers that
  are reimaged most often. Peak-CPU diversity is left to chance.
* ``cell``: the domain is the grid cell ``grid-r<r>c<c>``: replicas go to distinct cells, which
  is weaker per dimension (two replicas may share a row) but spreads over both.

The file is also the NameNode's include list: a DataNode missing from it cannot register. So every
inventory server is listed; a server whose tenant has no grid cell gets no ``upgradeDomain`` (HDFS
then uses the node's transfer address, i.e. a domain of its own) and is reported back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from placement_service import HarvestError
from placement_service.core.types import GridCell
from scheduler_plugin.inventory import ServerRow


class DomainMode(StrEnum):
    ROW = "row"
    CELL = "cell"


@dataclass(frozen=True)
class HostsFile:
    entries: tuple[dict[str, str], ...]
    unplaced_servers: tuple[str, ...]  # listed without an upgrade domain (tenant not in the grid)

    def to_json(self) -> str:
        return json.dumps(list(self.entries), indent=2) + "\n"


def upgrade_domain(cell: GridCell, mode: DomainMode) -> str:
    if mode is DomainMode.ROW:
        return f"reimage-row-{cell.reimage_row}"
    return f"grid-r{cell.reimage_row}c{cell.peak_column}"


def build_hosts_file(
    servers: Sequence[ServerRow],
    grid: Mapping[str, GridCell],
    mode: DomainMode = DomainMode.ROW,
    decommissioned: Sequence[str] = (),
) -> HostsFile:
    """One entry per server, in inventory order; ``decommissioned`` servers get that admin state."""
    known = {s.server for s in servers}
    unknown = sorted(set(decommissioned) - known)
    if unknown:
        raise HarvestError(f"decommissioned server(s) not in the inventory: {', '.join(unknown)}")
    entries: list[dict[str, str]] = []
    unplaced: list[str] = []
    for s in servers:
        entry = {"hostName": s.server}
        cell = grid.get(s.tenant)
        if cell is None:
            unplaced.append(s.server)
        else:
            entry["upgradeDomain"] = upgrade_domain(cell, mode)
        if s.server in decommissioned:
            entry["adminState"] = "DECOMMISSIONED"
        entries.append(entry)
    return HostsFile(tuple(entries), tuple(unplaced))
