"""Real CPU traces as the simulator's primary tenants (Azure, PlanetLab), via ``traces.real``.

Grouping of VMs into tenants is the traces package's documented ``real_datacenter`` grouping
(default ``vm``: one tenant per VM, since the VMs come from unrelated customers; ``correlation``
and ``hash`` are the alternatives). Each VM's tenant gets ``ceil(n_servers / n_vms)`` servers (its
series drives all of them), so the datacenter reaches the requested size; hardware, storage, racks
and reimages come from the generator's models, because no public reimage trace exists.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from placement_service.sim.datacenter import SimDatacenter, SimInputError, from_generated
from placement_service.traces.config import GeneratorConfig

DATA_DIR_ENV = "HARVEST_DATA_DIR"
DEFAULT_DATA_DIR = "/work/shared/data"
FILES = {
    "azure": "cpu/azure_v1_microsoft_avg_100.csv.gz",
    "planetlab": "cpu/planetlab_cloudsim_5min.csv.gz",
}
VMS = {"azure": 100}


def real_trace_path(kind: str) -> Path:
    if kind not in FILES:
        raise SimInputError(f"unknown real trace {kind!r}: expected one of {', '.join(FILES)}")
    path = Path(os.environ.get(DATA_DIR_ENV, DEFAULT_DATA_DIR)) / FILES[kind]
    if not path.exists():
        raise SimInputError(f"{path}: no such file (set {DATA_DIR_ENV} to the folder holding cpu/)")
    return path


def real_sim_datacenter(
    kind: str,
    *,
    n_servers: int = 5000,
    seed: int = 0,
    grouping: str = "vm",
    path: str | Path | None = None,
    vms_per_tenant: int = 4,
    reimage_days: float | None = None,
    config: GeneratorConfig | None = None,
) -> SimDatacenter:
    """A ``SimDatacenter`` of about ``n_servers`` servers whose tenants are the trace's VMs (or
    groups of ``vms_per_tenant`` VMs with the ``correlation`` / ``hash`` groupings);
    ``reimage_days``: a reimage log of that length (default: the utilization trace's span);
    ``config``: the generator's models for hardware and reimages (default ``GeneratorConfig()``)."""
    from placement_service.traces.real import real_datacenter

    trace = Path(path) if path is not None else real_trace_path(kind)
    probe = real_datacenter(
        trace, source=kind, servers_per_vm=1, grouping=grouping, vms_per_tenant=vms_per_tenant, seed=seed
    )
    n_vms = len(probe.inventory)
    per_vm = max(1, math.ceil(n_servers / max(n_vms, 1)))
    gen = real_datacenter(
        trace, source=kind, servers_per_vm=per_vm, grouping=grouping, vms_per_tenant=vms_per_tenant,
        seed=seed, reimage_days=reimage_days, config=config,
    )
    return from_generated(gen, f"{kind}-{grouping}-{len(gen.inventory)}")
