"""POP: partition a granular allocation problem into k sub-problems, solve them in parallel, coalesce.

Modules:
- ``partition`` (pure, generic): client splitting, resource splitting, random partition, coalesce;
- ``ras_pop`` (pure): POP applied to RAS: parts, the sub-problem solve (``ras.solve.solve``
  unchanged), the global repair pass and the plan against the full problem's LP bound;
- ``loadbal`` (pure): the query load-balancing MILP (shards onto servers, fewest moves within a load
  band) and its POP;
- ``execute`` (adapter): sub-problems as Dask tasks on a LocalCluster or an existing scheduler;
- ``solve``: POP for RAS end to end (what ``harvest ras solve --pop-k`` runs).
"""

from placement_service.capacity.pop.partition import PopError

__all__ = ["PopError"]
