"""Trace input and synthetic traces.

- ``io``: read / validate / atomically write utilization samples, reimage events and the inventory
  (Parquet or CSV), with errors naming file, row and column (column-level checks in ``columns``);
- ``series``: each tenant's "average server" series on a regular grid, reimage rates, per-tenant
  inventory facts;
- ``synth``: synthetic per-pattern CPU series (periodic / constant / unpredictable);
- ``generate``: a whole synthetic datacenter calibrated to the harvesting paper's characterization
  (hardware, storage, racks and reimages in ``fleet``, settings in ``config``);
- ``real``: loaders for the public Azure and PlanetLab CPU traces;
- ``cli``: ``harvest generate``, ``harvest convert-real`` and ``harvest check-traces``.
"""
