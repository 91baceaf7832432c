"""Public per-VM CPU traces as primary tenants: Azure (wide format) and PlanetLab (one row per VM-day).

Loaders (see ``docs/traces.md`` for the formats and the data's origin and license):

- :func:`load_azure_wide`: ``t_offset_s`` then one column per VM, CPU in percent, 5-minute samples
  (the Azure Public Dataset V1 excerpts). A column named ``<vmid> <period_hours>`` keeps only the
  VM id (the period labels are unreliable). Server ``az-<vmid>``; each VM is its own tenant.
- :func:`load_planetlab`: ``date,vm,t0..t287``, CPU in percent, 288 five-minute samples per day.
  Server ``pl-<vm>``. The trace holds ten non-consecutive days; ``timeline="compact"`` (default)
  lays them end to end (day k of the sorted dates starts ``k`` days after the first), which keeps
  every day aligned to midnight (daily cycles survive) but drops the calendar gaps;
  ``timeline="calendar"`` keeps the real dates (the gaps become long NaN gaps in the tenant series).

:func:`real_datacenter` turns a trace into the three trace files' content. VMs become tenants by
one of three documented, deterministic groupings:

- ``vm`` (default): one tenant per VM. The VMs of these traces come from unrelated customers, so
  this is the faithful choice: the VM's series is the tenant's "average server";
- ``hash``: tenant = BLAKE2b(vm name) mod ceil(n_vms / vms_per_tenant). Independent of order and of
  the other VMs, but it averages unrelated VMs (a stress test, flatter series);
- ``correlation``: greedy, in VM-name order: a VM without a tenant opens one and takes the
  still-free VMs whose hourly series correlate with it at >= ``min_correlation``, most correlated
  first, up to ``vms_per_tenant`` -- like the load-balanced servers of one service.

The inventory gives each VM ``servers_per_vm`` servers (the VM's samples are written for the first
of them, like the generator's sampled servers); hardware, storage, racks and reimages come from the
generator's models (seeded), since no public reimage trace exists.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from placement_service.core.types import Pattern, ReimageEvents
from placement_service.traces.columns import check_duplicates
from placement_service.traces.fleet import KINDS, build_inventory, build_reimages
from placement_service.traces.generate import GeneratedDatacenter, GeneratorConfig
from placement_service.traces.io import TraceError, UtilizationSamples, categorical
from placement_service.traces.series import infer_interval_s

logger = logging.getLogger(__name__)

DAY_S = 86400.0
PLANETLAB_SLOTS = 288
PLANETLAB_INTERVAL_S = 300.0
PathLike = str | os.PathLike[str]


def _percent_matrix(path: PathLike, table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """[rows, columns] float64 fractions from percent columns; errors name row and column."""
    out = np.empty((table.num_rows, len(columns)), dtype=np.float64)
    for j, name in enumerate(columns):
        col = table.column(name)
        if col.null_count:
            i = int(np.argmax(pc.is_null(col).to_numpy(zero_copy_only=False)))
            raise TraceError(path, "expected a CPU percentage, got an empty value", row=i + 1, column=name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise TraceError(path, f"expected CPU percentages, got values of type {col.type}", column=name)
        v = np.asarray(pc.cast(col, pa.float64()).to_numpy(), dtype=np.float64)
        bad = ~np.isfinite(v) | (v < 0) | (v > 100)
        if bad.any():
            i = int(np.argmax(bad))
            raise TraceError(path, f"expected a CPU percentage in [0, 100], got {v[i]}", row=i + 1, column=name)
        out[:, j] = v / 100.0
    return out


def _read_csv(path: PathLike, string_columns: Sequence[str] = ()) -> pa.Table:
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file")
    try:
        return pacsv.read_csv(
            p, convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in string_columns})
        )
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(p, f"cannot read the CSV file: {exc}") from None


def _samples(ts: np.ndarray, server_names: np.ndarray, codes: np.ndarray, cpu: np.ndarray) -> UtilizationSamples:
    samples = UtilizationSamples(
        timestamp_s=ts,
        server=categorical(server_names, codes),
        tenant=categorical(server_names, codes),  # one VM = one tenant until grouped
        cpu=cpu,
    )
    samples.with_factorized("server", server_names, codes)
    return samples.with_factorized("tenant", server_names, codes)


def load_azure_wide(path: PathLike, *, start_s: float = 0.0, max_vms: int | None = None) -> UtilizationSamples:
    """Azure wide format -> samples (server = tenant = ``az-<vmid>``), rows grouped by VM in time order.

    ``start_s`` is the epoch time of ``t_offset_s = 0`` (the public excerpt does not say; 0 keeps
    the offsets). ``max_vms`` keeps the first N VM columns in file order.
    """
    table = _read_csv(path)
    names = table.column_names
    if not names or names[0] != "t_offset_s":
        raise TraceError(path, f"expected the first column to be 't_offset_s', got {names[:1]}")
    vm_cols = names[1:] if max_vms is None else names[1 : 1 + max_vms]
    if not vm_cols:
        raise TraceError(path, "expected one column per VM after 't_offset_s', found none")
    offsets = _percent_free_offsets(path, table)
    cpu = _percent_matrix(path, table, vm_cols)  # [slots, vms]
    # A VM listed twice (the periodic excerpt has one under two period labels) is kept once when
    # the columns are identical; different data under one VM id is an error.
    vm_ids: list[str] = []
    keep: list[int] = []
    first_col: dict[str, int] = {}
    for j, c in enumerate(vm_cols):
        v = c.split()[0] if c.split() else c
        if v in first_col:
            if not np.array_equal(cpu[:, first_col[v]], cpu[:, j]):
                raise TraceError(path, f"VM {v!r} has two columns with different data", column=c)
            logger.info("%s: VM %s listed twice with the same data; keeping column %r", path, v, vm_cols[first_col[v]])
            continue
        first_col[v] = j
        vm_ids.append(v)
        keep.append(j)
    cpu = cpu[:, keep]
    servers = np.asarray([f"az-{v}" for v in vm_ids], dtype=object)
    n_slots, n_vms = cpu.shape
    codes = np.repeat(np.arange(n_vms), n_slots)
    ts = np.tile(start_s + offsets, n_vms)
    return _samples(ts, servers, codes, cpu.T.ravel())


def _percent_free_offsets(path: PathLike, table: pa.Table) -> np.ndarray:
    col = table.column("t_offset_s")
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)) or col.null_count:
        raise TraceError(path, "expected seconds since the start of the trace", column="t_offset_s")
    v = np.asarray(pc.cast(col, pa.float64()).to_numpy(), dtype=np.float64)
    d = np.diff(v)
    if (d <= 0).any():
        i = int(np.argmax(d <= 0)) + 1
        raise TraceError(path, f"expected increasing offsets, got {v[i]:g} after {v[i - 1]:g}", row=i + 1,
                         column="t_offset_s")
    return v


def load_planetlab(
    path: PathLike, *, timeline: str = "compact", min_days: int = 1, max_vms: int | None = None
) -> UtilizationSamples:
    """PlanetLab ``date,vm,t0..t287`` -> samples (server = tenant = ``pl-<vm>``), grouped by VM.

    ``timeline``: ``compact`` (sorted distinct dates laid end to end) or ``calendar`` (real dates, UTC
    midnight). ``min_days``: keep VMs present on at least this many days. ``max_vms``: keep the
    first N of those VMs by name.
    """
    if timeline not in ("compact", "calendar"):
        raise ValueError(f"timeline must be 'compact' or 'calendar', got {timeline!r}")
    table = _read_csv(path, string_columns=("date", "vm"))
    slot_cols = [f"t{i}" for i in range(PLANETLAB_SLOTS)]
    missing = [c for c in ("date", "vm", *slot_cols) if c not in table.column_names]
    if missing:
        raise TraceError(path, f"missing column(s) {', '.join(missing[:5])}; expected date, vm, t0..t287")
    dates = np.asarray(table.column("date").to_numpy(zero_copy_only=False), dtype=object)
    uniq, date_code = np.unique(dates.astype(str), return_inverse=True)
    epochs = np.empty(len(uniq), dtype=np.float64)
    for k, d in enumerate(uniq):
        try:
            if len(d) != 8 or not d.isdigit():
                raise ValueError(d)
            epochs[k] = float(np.datetime64(f"{d[:4]}-{d[4:6]}-{d[6:8]}", "s").astype(np.int64))
        except ValueError:
            i = int(np.argmax(date_code == k))
            raise TraceError(path, f"expected a date YYYYMMDD, got {d!r}", row=i + 1, column="date") from None
    if timeline == "compact" and len(epochs):
        epochs = epochs[0] + np.arange(len(epochs)) * DAY_S
    day_s = epochs[date_code]
    vm = np.asarray(table.column("vm").to_numpy(zero_copy_only=False), dtype=object)
    vm_names, vm_code = np.unique(vm.astype(str), return_inverse=True)
    days_per_vm = np.bincount(vm_code, minlength=len(vm_names))
    keep_vm = np.flatnonzero(days_per_vm >= min_days)
    if max_vms is not None:
        keep_vm = keep_vm[:max_vms]
    keep_row = np.isin(vm_code, keep_vm)
    cpu = _percent_matrix(path, table, slot_cols)[keep_row]  # [rows, 288]
    rows = np.flatnonzero(keep_row)
    remap = np.full(len(vm_names), -1, dtype=np.int64)
    remap[keep_vm] = np.arange(len(keep_vm))
    codes_row = remap[vm_code[rows]]
    # Long format, grouped by VM then time.
    order = np.lexsort((day_s[rows], codes_row))
    rows, codes_row, cpu = rows[order], codes_row[order], cpu[order]
    ts = (day_s[rows][:, None] + np.arange(PLANETLAB_SLOTS) * PLANETLAB_INTERVAL_S).ravel()
    codes = np.repeat(codes_row, PLANETLAB_SLOTS)
    servers = np.asarray([f"pl-{v}" for v in vm_names[keep_vm]], dtype=object)
    check_duplicates(path, codes, servers, ts)
    return _samples(ts, servers, codes, cpu.ravel())


# ----------------------------------------------------------------------------------------------
# VMs -> tenants -> datacenter
# ----------------------------------------------------------------------------------------------


def _hourly_matrix(samples: UtilizationSamples) -> tuple[np.ndarray, np.ndarray]:
    """(server names, [servers, hours] mean CPU), missing hours filled with the server's mean."""
    names, codes = samples.factorize("server")
    hour = np.floor((samples.timestamp_s - samples.timestamp_s.min()) / 3600.0).astype(np.int64)
    n_h = int(hour.max()) + 1
    flat = codes * n_h + hour
    tot = np.bincount(flat, weights=samples.cpu, minlength=len(names) * n_h).reshape(len(names), n_h)
    cnt = np.bincount(flat, minlength=len(names) * n_h).reshape(len(names), n_h)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = tot / cnt
    row_mean = np.nanmean(np.where(cnt > 0, m, np.nan), axis=1)
    return names, np.where(cnt > 0, m, row_mean[:, None])


def group_vms(
    samples: UtilizationSamples, *, grouping: str = "vm", vms_per_tenant: int = 4, min_correlation: float = 0.6
) -> dict[str, str]:
    """VM server name -> tenant name, by ``grouping`` (see the module docstring)."""
    names, _ = samples.factorize("server")
    vms = [str(n) for n in names]  # sorted
    if grouping == "vm":
        return {v: v for v in vms}
    prefix = vms[0].split("-", 1)[0] if vms else "vm"
    n_groups = max(1, math.ceil(len(vms) / max(vms_per_tenant, 1)))
    if grouping == "hash":
        def bucket(v: str) -> int:
            return int.from_bytes(hashlib.blake2b(v.encode(), digest_size=8).digest(), "big") % n_groups

        return {v: f"{prefix}-g{bucket(v):04d}" for v in vms}
    if grouping != "correlation":
        raise ValueError(f"grouping must be 'vm', 'hash' or 'correlation', got {grouping!r}")
    _, hourly = _hourly_matrix(samples)
    x = hourly - hourly.mean(axis=1, keepdims=True)
    norm = np.linalg.norm(x, axis=1)
    norm[norm == 0] = 1.0
    corr = (x @ x.T) / np.outer(norm, norm)
    free = np.ones(len(vms), dtype=bool)
    out: dict[str, str] = {}
    g = 0
    for i in range(len(vms)):
        if not free[i]:
            continue
        free[i] = False
        cand = np.flatnonzero(free & (corr[i] >= min_correlation))
        cand = cand[np.argsort(-corr[i, cand], kind="stable")][: max(vms_per_tenant, 1) - 1]
        free[cand] = False
        for j in (i, *cand.tolist()):
            out[vms[j]] = f"{prefix}-g{g:04d}"
        g += 1
    return out


def real_datacenter(
    path: PathLike,
    *,
    source: str | None = None,
    servers_per_vm: int = 4,
    grouping: str = "vm",
    vms_per_tenant: int = 4,
    max_vms: int | None = None,
    min_days: int = 7,
    seed: int = 0,
    config: GeneratorConfig | None = None,
    reimage_days: float | None = None,
) -> GeneratedDatacenter:
    """A datacenter whose primary tenants are the VMs of a public trace (see the module docstring).

    ``source``: ``azure`` or ``planetlab`` (guessed from the header when None). ``min_days``: for
    PlanetLab, keep VMs present on at least this many of the ten days. ``tenant_pattern`` of the
    result is empty: real traces carry no ground truth. ``reimage_days``: length of the generated
    reimage log (default: the utilization trace's span), e.g. a year next to Azure's 28 days.
    """
    if servers_per_vm < 1:
        raise ValueError(f"servers_per_vm must be >= 1, got {servers_per_vm}")
    config = config or GeneratorConfig()
    src = source or _guess_source(path)
    if src == "azure":
        vm_samples = load_azure_wide(path, start_s=config.start_s, max_vms=max_vms)
    elif src == "planetlab":
        vm_samples = load_planetlab(path, min_days=min_days, max_vms=max_vms)
    else:
        raise ValueError(f"source must be 'azure' or 'planetlab', got {src!r}")
    if len(vm_samples) == 0:
        raise TraceError(path, f"no VM left to convert (PlanetLab keeps VMs present on >= {min_days} days)")
    vm_to_tenant = group_vms(vm_samples, grouping=grouping, vms_per_tenant=vms_per_tenant)
    tenant_names = sorted(set(vm_to_tenant.values()))
    t_index = {t: i for i, t in enumerate(tenant_names)}
    vms_of: list[list[str]] = [[] for _ in tenant_names]
    for v, tenant in sorted(vm_to_tenant.items()):
        vms_of[t_index[tenant]].append(v)
    sizes = np.asarray([len(v) * servers_per_vm for v in vms_of], dtype=np.int64)
    # Environments: tenants in name order, cut into groups of geometric size; kind drawn per group.
    rng = np.random.default_rng([seed, 8])
    env_of: list[str] = []
    counters = dict.fromkeys(KINDS, 0)
    while len(env_of) < len(tenant_names):
        kind = KINDS[int(rng.choice(3, p=[0.5, 0.3, 0.2]))]
        size = int(rng.geometric(1.0 / max(config.tenants_per_environment_mean, 1.0)))
        env_of.extend([f"{kind}-{counters[kind]:03d}"] * size)
        counters[kind] += 1
    env_of = env_of[: len(tenant_names)]
    inventory, server_tenant = build_inventory(sizes, tenant_names, env_of, config, seed)
    interval = infer_interval_s(vm_samples.timestamp_s, vm_samples.factorize("server")[1])
    days = float(vm_samples.timestamp_s.max() - vm_samples.timestamp_s.min() + interval) / DAY_S
    if reimage_days is not None and not reimage_days > 0:
        raise ValueError(f"reimage_days must be positive, got {reimage_days}")
    re_ts, re_server = build_reimages(server_tenant, env_of, reimage_days or days, config, seed)
    start = float(vm_samples.timestamp_s.min())
    reimages = ReimageEvents(
        timestamp_s=start + re_ts, server=tuple(np.asarray(inventory.server, dtype=object)[re_server].tolist())
    )
    # The VM's samples go to its tenant's j-th server (datacenter order), j = VM's rank in its tenant.
    first_servers = [np.flatnonzero(server_tenant == t) for t in range(len(tenant_names))]
    vm_server: dict[str, int] = {}
    for t, vms in enumerate(vms_of):
        for j, v in enumerate(vms):
            vm_server[v] = int(first_servers[t][j * servers_per_vm])
    vm_names, vm_codes = vm_samples.factorize("server")
    server_of_code = np.asarray([vm_server[str(v)] for v in vm_names], dtype=np.int64)
    tenant_of_code = np.asarray([t_index[vm_to_tenant[str(v)]] for v in vm_names], dtype=np.int64)
    server_names = np.asarray(inventory.server, dtype=object)
    srv_idx = server_of_code[vm_codes]
    ten_idx = tenant_of_code[vm_codes]
    tn = np.asarray(tenant_names, dtype=object)
    env_arr = np.asarray(env_of, dtype=object)
    utilization = UtilizationSamples(
        timestamp_s=vm_samples.timestamp_s,
        server=categorical(server_names, srv_idx),
        tenant=categorical(tn, ten_idx),
        cpu=vm_samples.cpu,
        environment=categorical(env_arr, ten_idx),
    )
    utilization.with_factorized("server", server_names, srv_idx)
    utilization.with_factorized("tenant", tn, ten_idx)
    logger.info("%s: %d VMs -> %d tenants, %d servers", path, len(vm_names), len(tenant_names), len(inventory))
    return GeneratedDatacenter(
        utilization=utilization,
        reimages=reimages,
        inventory=inventory,
        tenant_pattern=dict[str, Pattern](),
        days=days,
        interval_s=interval,
        reimage_days=reimage_days,
    )


def _guess_source(path: PathLike) -> str:
    try:
        with pacsv.open_csv(Path(path)) as reader:
            names = reader.schema.names
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(path, f"cannot read the CSV header: {exc}") from None
    if names[:1] == ["t_offset_s"]:
        return "azure"
    if names[:3] == ["date", "vm", "t0"]:
        return "planetlab"
    raise TraceError(path, "unknown trace format: expected 't_offset_s,...' (Azure) or 'date,vm,t0,...' (PlanetLab)")
