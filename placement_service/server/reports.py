"""Node reports: the message agents send, its validation, and its encoding in the report log.

Validation is strict and names the offending field (``reports[3].timestamp``): a request with one bad
report is rejected whole, so nothing of it is stored.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement_service import HarvestError

MAX_NAME_LEN = 253
_NAME_RE = re.compile(r"^[A-Za-z0-9._:@/+-]+$")
EARLIEST_TIMESTAMP_S = 946_684_800.0  # 2000-01-01: anything older is a unit mistake (ms, or 0)
MAX_SEQ = 2**63 - 1

NUMERIC_FIELDS: tuple[str, ...] = (
    "timestamp",
    "primary_cpu_cores",
    "primary_memory_mb",
    "capacity_cores",
    "capacity_memory_mb",
    "free_storage_gb",
)
REQUIRED_FIELDS: tuple[str, ...] = ("node", "tenant", *NUMERIC_FIELDS, "busy")
OPTIONAL_FIELDS: tuple[str, ...] = ("seq",)


class RequestError(HarvestError):
    """A request is invalid; ``status`` is the HTTP status, ``field`` names what is wrong."""

    def __init__(self, message: str, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


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
    if not isinstance(value, str):
        raise RequestError(f"{field}: must be a string, got {type(value).__name__}", field)
    if not value or len(value) > MAX_NAME_LEN:
        raise RequestError(f"{field}: must be 1..{MAX_NAME_LEN} characters", field)
    if not _NAME_RE.match(value):
        raise RequestError(f"{field}: may only contain letters, digits and . _ : @ / + -", field)
    return value


def check_number(value: object, field: str, *, minimum: float = 0.0, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"{field}: must be a number, got {type(value).__name__}", field)
    number = float(value)
    if not math.isfinite(number):
        raise RequestError(f"{field}: must be a finite number, got {value!r}", field)
    if number < minimum or (positive and number <= 0.0):
        raise RequestError(f"{field}: must be {'>' if positive else '>='} {minimum}, got {number}", field)
    return number


def parse_report(doc: object, where: str, now_s: float, max_future_s: float) -> NodeReport:
    """Validate one report object; errors name ``where.<field>``."""
    if not isinstance(doc, Mapping):
        raise RequestError(f"{where}: must be an object, got {type(doc).__name__}", where)
    unknown = sorted(set(doc) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        raise RequestError(f"{where}.{unknown[0]}: unknown field", f"{where}.{unknown[0]}")
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
        raise RequestError(f"{where}.seq: must be an integer 0..2^63-1, got {seq_raw!r}", f"{where}.seq")
    return NodeReport(
        node=node, tenant=tenant, timestamp=ts,
        primary_cpu_cores=num["primary_cpu_cores"], primary_memory_mb=num["primary_memory_mb"],
        capacity_cores=num["capacity_cores"], capacity_memory_mb=num["capacity_memory_mb"],
        busy=busy, free_storage_gb=num["free_storage_gb"], seq=int(seq_raw),
    )


def parse_report_batch(doc: object, now_s: float, max_future_s: float, max_reports: int) -> list[NodeReport]:
    """Validate the body of ``POST /v1/reports``: ``{"reports": [...]}``."""
    if not isinstance(doc, Mapping):
        raise RequestError("body: must be a JSON object with a 'reports' list", "body")
    unknown = sorted(set(doc) - {"reports"})
    if unknown:
        raise RequestError(f"{unknown[0]}: unknown field", unknown[0])
    items = doc.get("reports")
    if not isinstance(items, list):
        raise RequestError("reports: must be a list", "reports")
    if not items:
        raise RequestError("reports: must not be empty", "reports")
    if len(items) > max_reports:
        raise RequestError(f"reports: at most {max_reports} reports per request, got {len(items)}",
                           "reports", status=413)
    return [parse_report(item, f"reports[{i}]", now_s, max_future_s) for i, item in enumerate(items)]
