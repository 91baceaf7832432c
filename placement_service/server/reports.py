"""Node reports: the message agents send, its validation, and its encoding in the report log.

Validation is strict and names the offending field (``reports[3].timestamp``): a request with one bad
report is rejected whole, so nothing of it is stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement_service import validate
from placement_service.validate import MAX_NAME_LEN, InputError

__all__ = ["MAX_NAME_LEN", "NodeReport", "NotFoundError", "RequestError", "check_name", "check_number",
           "check_place_request", "parse_report", "parse_report_batch"]

EARLIEST_TIMESTAMP_S = 946_684_800.0  # 2000-01-01: anything older is a unit mistake (ms, or 0)
DEFAULT_MAX_AGE_S = 30 * 86400.0  # reports older than this are refused (see ServiceConfig.max_report_age_s)
MAX_SEQ = 2**63 - 1
MAX_REPLICAS = 32
MAX_BLOCK_SIZE = 2**40  # bytes; HDFS blocks are 128-256 MB

NUMERIC_FIELDS: tuple[str, ...] = (
    "timestamp",
    "primary_cpu_cores",
    "primary_memory_mb",
    "capacity_cores",
    "capacity_memory_mb",
    "free_storage_gb",
)
REQUIRED_FIELDS: tuple[str, ...] = ("node", "tenant", *NUMERIC_FIELDS, "busy")
OPTIONAL_FIELDS: tuple[str, ...] = ("seq", "agent_version")
AGENT_VERSION_RE = re.compile(r"^[0-9A-Za-z.+_-]{0,64}$")


class RequestError(InputError):
    """A request is invalid; ``status`` is the HTTP status, ``field`` names what is wrong."""

    def __init__(self, message: str, field: str | None = None, status: int = 400) -> None:
        super().__init__(message, field)
        self.status = status


def unknown_field(key: str, where: str = "") -> RequestError:
    """The error for an unknown key of a request object: the field named so that it is never empty
    and stays short (an empty key or a 100 KB one, as hostile bodies send)."""
    name = key if key and key.isprintable() and len(key) <= 60 else repr(key[:57] + ("..." if len(key) > 57 else ""))
    field = f"{where}.{name}" if where else name
    return RequestError(f"{field}: unknown field", field)


class NotFoundError(RequestError):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message, field, status=404)


class UnavailableError(RequestError):
    """The service cannot do this now (storage error, out of file handles); retry later (503 /
    gRPC UNAVAILABLE). The message says why."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message, field, status=503)


@dataclass(frozen=True, slots=True)
class NodeReport:
    """One sample of one node (fields of ``POST /v1/reports`` and the gRPC ``NodeReport``)."""

    node: str
    tenant: str
    timestamp: float  # epoch seconds
    primary_cpu_cores: float
    primary_memory_mb: float
    capacity_cores: float
    capacity_memory_mb: float
    busy: bool
    free_storage_gb: float
    seq: int = 0  # 0: no sequence number (always stored)
    agent_version: str = ""  # the agent's release; not history (not in to_row): see agent_versions.py

    @property
    def cpu_frac(self) -> float:
        """Primary CPU as a fraction of the node's cores, clipped to 0..1."""
        return min(1.0, self.primary_cpu_cores / self.capacity_cores)

    @property
    def memory_frac(self) -> float:
        return min(1.0, self.primary_memory_mb / self.capacity_memory_mb)

    def to_row(self) -> list[Any]:
        return [
            self.node, self.tenant, self.timestamp, self.primary_cpu_cores, self.primary_memory_mb,
            self.capacity_cores, self.capacity_memory_mb, self.busy, self.free_storage_gb, self.seq,
        ]

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> NodeReport:
        return cls(
            str(row[0]), str(row[1]), float(row[2]), float(row[3]), float(row[4]), float(row[5]),
            float(row[6]), bool(row[7]), float(row[8]), int(row[9]),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node, "tenant": self.tenant, "timestamp": self.timestamp,
            "primary_cpu_cores": self.primary_cpu_cores, "primary_memory_mb": self.primary_memory_mb,
            "capacity_cores": self.capacity_cores, "capacity_memory_mb": self.capacity_memory_mb,
            "busy": self.busy, "free_storage_gb": self.free_storage_gb, "seq": self.seq,
        }


def encode_frame(reports: Sequence[NodeReport]) -> bytes:
    """Payload of one log frame: a JSON array of report rows."""
    return json.dumps([r.to_row() for r in reports], separators=(",", ":")).encode()


def decode_frame(payload: bytes) -> list[NodeReport]:
    return [NodeReport.from_row(row) for row in json.loads(payload)]


def check_name(value: object, field: str) -> str:
    """A node / tenant name (``placement_service.validate.check_name``) or a ``RequestError``."""
    try:
        return validate.check_name(value, field)
    except InputError as exc:
        raise RequestError(str(exc), exc.field) from None


def check_number(value: object, field: str, *, minimum: float = 0.0, positive: bool = False) -> float:
    try:
        return validate.check_finite(value, field, minimum=minimum, positive=positive)
    except InputError as exc:
        raise RequestError(str(exc), exc.field) from None


def parse_report(doc: object, where: str, now_s: float, max_future_s: float,
                 max_age_s: float = DEFAULT_MAX_AGE_S) -> NodeReport:
    """Validate one report object; errors name ``where.<field>``.

    The timestamp must lie in ``[now_s - max_age_s, now_s + max_future_s]`` (and after 2000-01-01):
    a report is history for the next re-clustering, and one request must not create a day folder for
    every day of several decades.
    """
    if not isinstance(doc, Mapping):
        raise RequestError(f"{where}: must be an object, got {type(doc).__name__}", where)
    unknown = sorted(set(doc) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        raise unknown_field(unknown[0], where)
    for name in REQUIRED_FIELDS:
        if name not in doc:
            raise RequestError(f"{where}.{name}: missing required field", f"{where}.{name}")
    node = check_name(doc["node"], f"{where}.node")
    tenant = check_name(doc["tenant"], f"{where}.tenant")
    num = {}
    for name in NUMERIC_FIELDS:
        positive = name in ("capacity_cores", "capacity_memory_mb")
        num[name] = check_number(doc[name], f"{where}.{name}", positive=positive)
    ts = num["timestamp"]
    if ts < EARLIEST_TIMESTAMP_S:
        raise RequestError(f"{where}.timestamp: {ts} is before 2000-01-01 (epoch seconds expected)",
                           f"{where}.timestamp")
    if ts < now_s - max_age_s:
        raise RequestError(
            f"{where}.timestamp: {ts} is {(now_s - ts) / 86400:.1f} days old (at most {max_age_s / 86400:g} days "
            "accepted)", f"{where}.timestamp",
        )
    if ts > now_s + max_future_s:
        raise RequestError(
            f"{where}.timestamp: {ts} is {ts - now_s:.0f} s in the future (at most {max_future_s:.0f} s allowed)",
            f"{where}.timestamp",
        )
    busy = doc["busy"]
    if not isinstance(busy, bool):
        raise RequestError(f"{where}.busy: must be a boolean, got {type(busy).__name__}", f"{where}.busy")
    seq_raw = doc.get("seq", 0)
    if seq_raw is None:
        seq_raw = 0
    if isinstance(seq_raw, bool) or not isinstance(seq_raw, int) or not 0 <= seq_raw <= MAX_SEQ:
        raise RequestError(f"{where}.seq: must be an integer 0..2^63-1, got {validate.short_repr(seq_raw)}",
                           f"{where}.seq")
    version = doc.get("agent_version", "")
    if version is None:
        version = ""
    if not isinstance(version, str) or not AGENT_VERSION_RE.match(version):
        raise RequestError(f"{where}.agent_version: must be at most 64 characters of [0-9A-Za-z.+_-], got "
                           f"{validate.short_repr(version)}", f"{where}.agent_version")
    return NodeReport(
        node=node, tenant=tenant, timestamp=ts,
        primary_cpu_cores=num["primary_cpu_cores"], primary_memory_mb=num["primary_memory_mb"],
        capacity_cores=num["capacity_cores"], capacity_memory_mb=num["capacity_memory_mb"],
        busy=busy, free_storage_gb=num["free_storage_gb"], seq=int(seq_raw), agent_version=version,
    )


def parse_report_batch(doc: object, now_s: float, max_future_s: float, max_reports: int,
                       max_age_s: float = DEFAULT_MAX_AGE_S) -> list[NodeReport]:
    """Validate the body of ``POST /v1/reports``: ``{"reports": [...]}``."""
    if not isinstance(doc, Mapping):
        raise RequestError("body: must be a JSON object with a 'reports' list", "body")
    unknown = sorted(set(doc) - {"reports"})
    if unknown:
        raise unknown_field(unknown[0])
    items = doc.get("reports")
    if not isinstance(items, list):
        raise RequestError("reports: must be a list", "reports")
    if not items:
        raise RequestError("reports: must not be empty", "reports")
    if len(items) > max_reports:
        raise RequestError(f"reports: at most {max_reports} reports per request, got {len(items)}",
                           "reports", status=413)
    return [parse_report(item, f"reports[{i}]", now_s, max_future_s, max_age_s) for i, item in enumerate(items)]


MAX_LIST_ITEMS = 10_000  # default of the service's max_list_items (items of one list in a request)


def check_place_request(writer: object, replicas: object, excluded: object, block_size: object,
                        chosen: object = (), max_items: int = MAX_LIST_ITEMS) -> tuple[str, int, list[str], int, list[str]]:
    """Arguments of a replica-placement decision (HTTP ``POST /v1/blocks/place`` and gRPC
    ``ChooseTargets``): ``writer`` is a node name or ``""`` / ``None`` (a client outside the cluster);
    ``chosen``: nodes already holding a replica of the block (re-replication); at most ``max_items``
    excluded names (the service's ``max_list_items``)."""
    if writer is None or writer == "":
        writer = ""
    else:
        writer = check_name(writer, "writer")
    try:
        n = validate.check_int(replicas, "replicas", minimum=1, maximum=MAX_REPLICAS)
        size = validate.check_int(block_size, "block_size", minimum=0, maximum=MAX_BLOCK_SIZE)
    except InputError as exc:
        raise RequestError(str(exc), exc.field) from None
    if not isinstance(excluded, list | tuple):
        raise RequestError("excluded: must be a list of node names", "excluded")
    if len(excluded) > max_items:
        raise RequestError(f"excluded: at most {max_items} node names per request, got {len(excluded)}", "excluded")
    names = [check_name(e, f"excluded[{i}]") for i, e in enumerate(excluded)]
    if not isinstance(chosen, list | tuple):
        raise RequestError("chosen: must be a list of node names (the block's replicas so far)", "chosen")
    if len(chosen) > MAX_REPLICAS:
        raise RequestError(f"chosen: at most {MAX_REPLICAS} nodes, got {len(chosen)}", "chosen")
    held = list(dict.fromkeys(check_name(c, f"chosen[{i}]") for i, c in enumerate(chosen)))
    return str(writer), n, names, size, held
