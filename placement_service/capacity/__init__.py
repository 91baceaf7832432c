"""Capacity solvers: which servers hold guaranteed capacity and which are harvestable.

Sub-packages (each model a pure module, adapters at the edge):
- ``ras``: region-level server -> reservation assignment (MSB-loss buffers, shared buffer, the
  elastic set that batch work harvests);
- ``flux``: regional capacity and traffic plans that size the reservations (service model, joint plan,
  execution checker, capacity ledger, hand-off to RAS);
- ``pop``: partition a granular allocation problem into k sub-problems, solve them in parallel (Dask),
  coalesce (RAS and query load balancing on it; docs/pop.md).
"""

from placement_service import HarvestError
from placement_service.extras import require_extra

require_extra("capacity", "the capacity solvers (placement_service.capacity)")


class CapacityError(HarvestError):
    """Bad capacity input (inventory, reservations, previous assignment) or an impossible request."""
