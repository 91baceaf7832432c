"""RAS: capacity reservations: guaranteed capacity, failure buffers and the harvestable set.

A region's servers are assigned to *reservations* (logical clusters with a guaranteed capacity in
RRUs) so that each reservation still has its requested capacity after the loss of any one MSB (its
*embedded buffer*), a shared random-failure buffer is held per hardware type, and as few servers as
possible move between solves. Idle shared-buffer servers and servers in no reservation form the
*elastic* (harvestable) set that batch work may use until a failure revokes them.

Modules (pure core unless marked adapter):
- ``domain``: requests, settings, the region's servers and the plan (frozen dataclasses);
- ``aggregate``: equivalence classes hardware x datacenter x MSB and their previous counts;
- ``precheck``: explanations for requests that cannot be met whatever the solver does;
- ``ras_model``: the aggregated MIP (HiGHS) and the completion of integer counts into a full point;
- ``repair``: rounding of fractional counts and greedy repair (also the constructive warm start);
- ``disaggregate``: integer counts per class -> concrete servers, keeping servers that need not move;
- ``racks``: second phase, rack spread for the reservations with the worst rack spread;
- ``solve``: the whole solve (phases, time limit, best plan kept) and the plan's figures;
- ``check``: the independent checker (does not import any of the solver's modules);
- ``online``: emergency grants, the Online Mover and the elastic (harvestable) export;
- ``generate``: synthetic regions; ``io`` (adapter): files; ``cli`` (adapter): ``harvest ras``.
"""

from placement_service.capacity import CapacityError

__all__ = ["CapacityError"]
