from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class NodeReport(_message.Message):
    __slots__ = ("node", "tenant", "timestamp", "primary_cpu_cores", "primary_memory_mb", "capacity_cores", "capacity_memory_mb", "busy", "free_storage_gb", "seq", "drained_revocations", "agent_version")
    NODE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_CORES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    FREE_STORAGE_GB_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    DRAINED_REVOCATIONS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    node: str
    tenant: str
    timestamp: float
    primary_cpu_cores: float
    primary_memory_mb: float
    capacity_cores: float
    capacity_memory_mb: float
    busy: bool
    free_storage_gb: float
    seq: int
    drained_revocations: _containers.RepeatedScalarFieldContainer[int]
    agent_version: str
    def __init__(self, node: _Optional[str] = ..., tenant: _Optional[str] = ..., timestamp: _Optional[float] = ..., primary_cpu_cores: _Optional[float] = ..., primary_memory_mb: _Optional[float] = ..., capacity_cores: _Optional[float] = ..., capacity_memory_mb: _Optional[float] = ..., busy: _Optional[bool] = ..., free_storage_gb: _Optional[float] = ..., seq: _Optional[int] = ..., drained_revocations: _Optional[_Iterable[int]] = ..., agent_version: _Optional[str] = ...) -> None: ...

class ReportReply(_message.Message):
    __slots__ = ("node", "acked_seq", "class_id", "label", "revocations")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ACKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    REVOCATIONS_FIELD_NUMBER: _ClassVar[int]
    node: str
    acked_seq: int
    class_id: str
    label: str
    revocations: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, node: _Optional[str] = ..., acked_seq: _Optional[int] = ..., class_id: _Optional[str] = ..., label: _Optional[str] = ..., revocations: _Optional[_Iterable[int]] = ...) -> None: ...

class ChooseTargetsRequest(_message.Message):
    __slots__ = ("writer", "replicas", "excluded", "block_size", "chosen")
    WRITER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_FIELD_NUMBER: _ClassVar[int]
    writer: str
    replicas: int
    excluded: _containers.RepeatedScalarFieldContainer[str]
    block_size: int
    chosen: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, writer: _Optional[str] = ..., replicas: _Optional[int] = ..., excluded: _Optional[_Iterable[str]] = ..., block_size: _Optional[int] = ..., chosen: _Optional[_Iterable[str]] = ...) -> None: ...

class ChooseTargetsReply(_message.Message):
    __slots__ = ("targets", "relaxed", "reason", "short")
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    RELAXED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SHORT_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedScalarFieldContainer[str]
    relaxed: bool
    reason: str
    short: bool
    def __init__(self, targets: _Optional[_Iterable[str]] = ..., relaxed: _Optional[bool] = ..., reason: _Optional[str] = ..., short: _Optional[bool] = ...) -> None: ...

class NodeClassRequest(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: str
    def __init__(self, node: _Optional[str] = ...) -> None: ...

class NodeClassReply(_message.Message):
    __slots__ = ("node", "class_id", "label", "busy", "harvestable", "last_report_timestamp")
    NODE_FIELD_NUMBER: _ClassVar[int]
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    HARVESTABLE_FIELD_NUMBER: _ClassVar[int]
    LAST_REPORT_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    node: str
    class_id: str
    label: str
    busy: bool
    harvestable: bool
    last_report_timestamp: float
    def __init__(self, node: _Optional[str] = ..., class_id: _Optional[str] = ..., label: _Optional[str] = ..., busy: _Optional[bool] = ..., harvestable: _Optional[bool] = ..., last_report_timestamp: _Optional[float] = ...) -> None: ...
