"""gRPC adapter (grpcio asyncio server in its own thread): ``Report``, ``ChooseTargets``, ``NodeClass``.

The asyncio server keeps one coroutine, not one thread, per open agent stream, so thousands of agents
can stay connected. ``Report`` needs ``authorization: Bearer <token>`` metadata when the service has
a token; a bad report aborts the stream with INVALID_ARGUMENT naming the field (nothing of it is
stored; earlier messages of the stream were already acknowledged one by one). Bytes that are not a
valid message also answer INVALID_ARGUMENT (the methods are registered here with deserializers that
hand the handler the decoding error instead of failing the call with UNKNOWN).
"""

from __future__ import annotations

import asyncio
import heapq
import hmac
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from placement_service.core.types import PlacementError, PolicyError
from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc
from placement_service.server.reports import (
    DEFAULT_MAX_AGE_S,
    REQUIRED_FIELDS,
    NotFoundError,
    UnavailableError,
    check_name,
    check_place_request,
    parse_report,
)
from placement_service.server.service import PlacementService
from placement_service.server.stalls import StallTracer, from_env
from placement_service.validate import InputError

logger = logging.getLogger(__name__)
SERVICE_NAME = harvest_pb2.DESCRIPTOR.services_by_name["Placement"].full_name
# HTTP status of a RequestError -> gRPC code (everything else that is an InputError: INVALID_ARGUMENT).
_STATUS_CODES = {409: grpc.StatusCode.FAILED_PRECONDITION, 503: grpc.StatusCode.UNAVAILABLE}


def report_from_proto(msg: harvest_pb2.NodeReport, now_s: float, max_future_s: float,
                      max_age_s: float = DEFAULT_MAX_AGE_S) -> Any:
    doc = {name: getattr(msg, name) for name in REQUIRED_FIELDS}
    doc["seq"] = int(msg.seq)
    doc["agent_version"] = msg.agent_version
    return parse_report(doc, "report", now_s, max_future_s, max_age_s)


class Undecodable:
    """Stands in for a request whose bytes are not a valid message; the handler answers INVALID_ARGUMENT."""

    def __init__(self, message: str) -> None:
        self.message = message


def lenient(message_cls: type[Message]) -> Callable[[bytes], Any]:
    """Deserializer that returns ``Undecodable`` instead of raising (a raise would answer UNKNOWN)."""
    name = message_cls.DESCRIPTOR.name

    def parse(data: bytes) -> Any:
        try:
            return message_cls.FromString(data)
        except DecodeError as exc:
            return Undecodable(f"request: not a valid {name} message ({len(data)} bytes): {exc}")

    return parse


def add_servicer(servicer: PlacementServicer, server: grpc.aio.Server) -> None:
    """``add_PlacementServicer_to_server`` with lenient request deserializers."""
    handlers = {
        "Report": grpc.stream_stream_rpc_method_handler(
            servicer.Report, request_deserializer=lenient(harvest_pb2.NodeReport),
            response_serializer=harvest_pb2.ReportReply.SerializeToString),
        "ChooseTargets": grpc.unary_unary_rpc_method_handler(
            servicer.ChooseTargets, request_deserializer=lenient(harvest_pb2.ChooseTargetsRequest),
            response_serializer=harvest_pb2.ChooseTargetsReply.SerializeToString),
        "NodeClass": grpc.unary_unary_rpc_method_handler(
            servicer.NodeClass, request_deserializer=lenient(harvest_pb2.NodeClassRequest),
            response_serializer=harvest_pb2.NodeClassReply.SerializeToString),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


class DurableWaiter:
    """Awaitable durability for the event loop: one loop wake-up per fsync, not one per report."""

    def __init__(self, service: PlacementService, loop: asyncio.AbstractEventLoop) -> None:
        self._wal = service.wal
        self._loop = loop
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._n = 0
        self._wal.add_listener(self._on_durable)

    def _on_durable(self, ticket: int) -> None:  # writer thread
        self._loop.call_soon_threadsafe(self._release)

    def _release(self) -> None:  # event loop
        durable = self._wal.durable_ticket
        while self._heap and (self._heap[0][0] <= durable or self._wal.refused(self._heap[0][0])):
            ticket, _, fut = heapq.heappop(self._heap)
            if fut.done():
                continue
            if ticket <= durable:
                fut.set_result(None)
            else:
                fut.set_exception(UnavailableError(f"storage unavailable, report refused: {self._wal.error}"))

    async def wait(self, ticket: int) -> None:
        if self._wal.durable_ticket >= ticket:
            return
        if self._wal.refused(ticket):
            raise UnavailableError(f"storage unavailable, report refused: {self._wal.error}")
        fut: asyncio.Future[None] = self._loop.create_future()
        self._n += 1
        heapq.heappush(self._heap, (ticket, self._n, fut))
        self._release()  # the fsync may have finished since the check above
        await fut


class PlacementServicer(harvest_pb2_grpc.PlacementServicer):
    def __init__(self, service: PlacementService, token: str | None) -> None:
        self.service = service
        self.token = token
        self.waiter: DurableWaiter | None = None
        self.tracer: StallTracer | None = None  # HARVEST_STALL_TRACE (server/stalls.py), benchmarks only

    async def _authorize(self, context: grpc.aio.ServicerContext) -> None:
        if self.token is None:
            return
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                scheme, _, tok = str(value).partition(" ")
                if scheme.lower() == "bearer" and hmac.compare_digest(tok.strip().encode(), self.token.encode()):
                    return
        await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                            "authorization: metadata 'authorization: Bearer <token>' is required")

    async def Report(  # noqa: N802 - gRPC method name
        self, request_iterator: AsyncIterator[harvest_pb2.NodeReport], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[harvest_pb2.ReportReply]:
        await self._authorize(context)
        service = self.service
        cfg = service.cfg
        async for msg in request_iterator:
            try:
                if isinstance(msg, Undecodable):
                    raise InputError(msg.message, "request")
                report = report_from_proto(msg, time.time(), cfg.max_future_s, cfg.max_report_age_s)
            except InputError as exc:
                service.metrics.inc("harvest_reports_rejected_total", api="grpc")
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                return
            if self.waiter is None:
                self.waiter = DurableWaiter(service, asyncio.get_running_loop())
            try:
                result = service.ingest([report])
                await self.waiter.wait(result.ticket)
            except UnavailableError as exc:
                await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
                return
            service.after_durable(result)
            if msg.drained_revocations:
                service.revocations_drained(report.node, [int(i) for i in msg.drained_revocations])
            class_id = service.class_of_node(report.node, report.tenant)
            yield harvest_pb2.ReportReply(
                node=report.node, acked_seq=result.acked_seq.get(report.node, 0), class_id=class_id, label=class_id,
                revocations=service.revocations_for(report.node),
            )

    async def ChooseTargets(  # noqa: N802
        self, request: harvest_pb2.ChooseTargetsRequest, context: grpc.aio.ServicerContext
    ) -> harvest_pb2.ChooseTargetsReply:
        start = time.perf_counter()
        try:
            if isinstance(request, Undecodable):
                raise InputError(request.message, "request")
            writer, replicas, excluded, block_size, chosen = check_place_request(
                request.writer, int(request.replicas), list(request.excluded), int(request.block_size),
                list(request.chosen), self.service.cfg.max_list_items)
            result = self.service.place(writer, replicas, excluded, block_size, chosen)
            if self.tracer is not None:
                decided = time.perf_counter()
                self.tracer.request(start, decided, decided)
        except NotFoundError as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
            raise
        except InputError as exc:
            code = _STATUS_CODES.get(getattr(exc, "status", 400), grpc.StatusCode.INVALID_ARGUMENT)
            await context.abort(code, str(exc))
            raise
        except PlacementError as exc:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"replicas: {exc}")
            raise
        except PolicyError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        finally:
            self.service.metrics.observe("harvest_grpc_request_seconds", time.perf_counter() - start,
                                         method="ChooseTargets")
        return harvest_pb2.ChooseTargetsReply(targets=list(result.targets), relaxed=result.relaxed,
                                              reason=result.reason, short=result.short)

    async def NodeClass(  # noqa: N802
        self, request: harvest_pb2.NodeClassRequest, context: grpc.aio.ServicerContext
    ) -> harvest_pb2.NodeClassReply:
        try:
            if isinstance(request, Undecodable):
                raise InputError(request.message, "request")
            check_name(request.node, "node")
            info = self.service.node_info(request.node)
        except NotFoundError as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
            raise
        except InputError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        return harvest_pb2.NodeClassReply(
            node=info["node"], class_id=info["class_id"], label=info["label"], busy=info["busy"],
            harvestable=info["harvestable"], last_report_timestamp=info["last_report"]["timestamp"],
        )


class GrpcServer:
    """Runs the asyncio gRPC server on its own event loop thread."""

    def __init__(self, service: PlacementService, token: str | None, host: str, port: int,
                 credentials: grpc.ServerCredentials | None = None) -> None:
        self._servicer = PlacementServicer(service, token)
        self._address = f"{host}:{port}"
        self._credentials = credentials
        self._loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        self._stop_event: asyncio.Event | None = None
        self._grace_s = 2.0
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.port = port
        self._thread = threading.Thread(target=self._run, name="grpc", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        add_servicer(self._servicer, server)
        if self._credentials is not None:
            self.port = server.add_secure_port(self._address, self._credentials)
        else:
            self.port = server.add_insecure_port(self._address)
        await server.start()
        self._server = server
        self._stop_event = asyncio.Event()
        tracer = self._servicer.tracer = from_env()
        ticker = asyncio.ensure_future(tracer.ticker()) if tracer is not None else None
        self._ready.set()
        await self._stop_event.wait()
        await server.stop(self._grace_s)  # the loop runs until the server has stopped
        if tracer is not None and ticker is not None:
            tracer.stop()
            await ticker

    def stop(self, grace_s: float = 2.0) -> None:
        if self._server is None:
            return
        self._grace_s = grace_s
        event = self._stop_event
        assert event is not None
        self._loop.call_soon_threadsafe(event.set)
        self._thread.join(timeout=grace_s + 5)
        if self._thread.is_alive():
            logger.warning("gRPC server did not stop within %.0f s", grace_s + 5)
