"""The simulated HDFS systems, what each is in one line, and which one the placement service runs
by default (``core.service_defaults``). Light on purpose (no numpy or scikit-learn): ``harvest sim
--help`` and the what-if report read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class HdfsSystem(StrEnum):
    STOCK = "HDFS-Stock"
    H = "HDFS-H"  # the core's placement, grid columns by each tenant's p99 peak (the paper)
    H_RISK = "HDFS-H-risk"  # experimental: unpredictable tenants ranked by max(p99, mean + 4 std)
    H_HOURS = "HDFS-H-hours"  # beyond the paper: HDFS-H + replicas on tenants not busy at the same hours
    H_COBUSY = "HDFS-H-cobusy"  # beyond the paper: HDFS-H + replicas on tenants least likely busy together
    H_COBUSY_MOVER = "HDFS-H-cobusy-mover"  # HDFS-H-cobusy + daily refit, replicas of blocks at risk moved


SYSTEM_TEXT: dict[HdfsSystem, str] = {
    HdfsSystem.STOCK: "stock HDFS: replicas over racks only",
    HdfsSystem.H: "the paper's placement: replicas over the 3x3 reimage x peak grid",
    HdfsSystem.H_RISK: "HDFS-H with unpredictable tenants ranked by mean + 4 std in the grid",
    HdfsSystem.H_HOURS: "HDFS-H that also keeps a block's replicas on tenants not busy at the same hours of the day",
    HdfsSystem.H_COBUSY: "HDFS-H with each replica on the allowed tenant least likely busy with the block's others",
    HdfsSystem.H_COBUSY_MOVER: "HDFS-H-cobusy with estimates refitted daily and replicas of blocks at risk moved",
}
"""What each simulated system is, in one line (reports and help text take it from here)."""

SERVICE_SETTING: dict[HdfsSystem, str] = {
    HdfsSystem.H_HOURS: "placement_busy_hours",
    HdfsSystem.H_COBUSY: "placement_cobusy",
}
"""The placement service's setting (``server.config.ServiceConfig``) that turns a system on."""


@dataclass(frozen=True)
class ServicePlacement:
    """Which simulated system the placement service runs with its default settings, read from the
    service's own configuration defaults (``ServiceConfig``), so no report claims otherwise."""

    system: HdfsSystem
    settings: Mapping[str, bool]

    def describe(self, system: HdfsSystem) -> str:
        """``SYSTEM_TEXT`` and where the system runs: the service's default, a service setting, or
        the simulator only."""
        text = SYSTEM_TEXT[system]
        if system is self.system:
            on = [k for k, v in self.settings.items() if v]
            return text + " (the placement service's default" + (f": `{', '.join(on)}` on" if on else "") + ")"
        if system is HdfsSystem.STOCK:
            return text + " (HDFS's own default policy)"
        if system is HdfsSystem.H:
            return text + " (the service with " + " and ".join(f"`{k}`" for k in self.settings) + " off)"
        if system in SERVICE_SETTING:
            key = SERVICE_SETTING[system]
            return text + f" (in the service with `{key}` on; default {'on' if self.settings[key] else 'off'})"
        if system is HdfsSystem.H_COBUSY_MOVER:
            return text + (" (in the service with `placement_cobusy` on and `harvest serve --mover on`; the mover is "
                           "off by default)")
        return text + " (simulator only, not in the service)"


def service_placement() -> ServicePlacement:
    """The system the placement service runs by default (``core.service_defaults``, which
    ``ServiceConfig`` takes its defaults from): HDFS-H-cobusy when ``placement_cobusy`` is on, else
    HDFS-H-hours when ``placement_busy_hours`` is, else HDFS-H."""
    from placement_service.core import service_defaults

    settings = {"placement_busy_hours": service_defaults.PLACEMENT_BUSY_HOURS,
                "placement_cobusy": service_defaults.PLACEMENT_COBUSY}
    if settings["placement_cobusy"]:
        return ServicePlacement(HdfsSystem.H_COBUSY, settings)
    if settings["placement_busy_hours"]:
        return ServicePlacement(HdfsSystem.H_HOURS, settings)
    return ServicePlacement(HdfsSystem.H, settings)
