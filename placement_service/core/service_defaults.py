"""Which placement the placement service runs by default: one place for the service's config
(``server.config.ServiceConfig``) and the simulator's and what-if's names for it
(``sim.policy.service_placement``), so neither can say what the other does not do.

Pure constants (no third-party imports): the simulator reads them without the service's extra.
"""

from __future__ import annotations

PLACEMENT_BUSY_HOURS = True
"""HDFS-H-hours: replicas of a block on tenants not busy at the same hours of the day."""
PLACEMENT_COBUSY = False
"""HDFS-H-cobusy: replicas on the tenants least likely busy together; off until measured in production."""
