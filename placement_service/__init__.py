"""Placement service and the history-based policy core.

Sub-packages:
- ``core``: pure policy (clustering, class selection, replica placement, DAG analysis); numbers in,
  decisions out, no I/O.
- ``traces``: reading, validating and generating utilization / reimage / inventory traces.
- ``server``: the placement service (gRPC + HTTP/JSON, durable state).
- ``capacity``: RAS-style reservations and the harvestable (elastic) set.
- ``sim``: the trace-driven simulator that drives the same policy core.
"""

# The one version of the whole distribution (pyproject.toml reads it); `harvest --version` prints it,
# and the agent and the service report it.
__version__ = "0.2.0"


class HarvestError(Exception):
    """Base class of every error this project raises on purpose (bad input, infeasible request)."""
