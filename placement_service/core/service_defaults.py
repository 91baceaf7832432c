"""Which placement the placement service runs by default: one place for the service's config
(``server.config.ServiceConfig``) and the simulator's and what-if's names for it
(``sim.policy.service_placement``), so neither can say what the other does not do.

Pure constants (no third-party imports): the simulator reads them without the service's extra.
"""

from __future__ import annotations

PLACEMENT_BUSY_HOURS = True
"""HDFS-H-hours: replicas of a block on tenants not busy at the same hours of the day."""
PLACEMENT_COBUSY = True
"""HDFS-H-cobusy: replicas on the tenants least likely busy together, from co-busy estimates the
service refits at every re-clustering (daily, ``recluster_interval_s``; HDFS-H-hours until the first).
Chosen by the simulator's figures (3 replicas, up to ~41% utilization: 0 / 8 / 20 failed accesses
per million on the generated / Azure / PlanetLab datacenters against HDFS-H-hours' 1 / 348 / 260;
durability as HDFS-H-hours'): docs/policy.md, "The service's default placement"."""
