"""The node agent: protects the primary tenant on one shared server and tells YARN what is left.

One tick runs four stages, each in its own module (the layout follows Koordinator's koordlet):

1. ``sampler``   - psutil reads of the node and of every secondary (``CONTAINER_ID``) process;
2. ``attribute`` - groups processes into containers, primary = node total - secondary (rounded up);
3. ``decide``    - pure policy: harvestable = capacity - primary - reserve, which containers to kill,
                   what to advertise to YARN, DataNode busy flag (no I/O, table-tested);
4. ``executor``  - the one component that touches processes, YARN and files; it skips writes that
                   change nothing.

``report`` streams node reports to the placement service (buffered on disk while it is away),
``metrics`` serves ``/metrics`` and ``/explain``, ``runtime`` wires the stages into the loop.
"""

from placement_service import HarvestError


class AgentError(HarvestError):
    """Base class of the agent's deliberate errors (bad configuration, unusable state directory)."""


class ConfigError(AgentError):
    """A setting is missing, unknown or malformed; the message names the key and where it came from."""
