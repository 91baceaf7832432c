"""Shared pieces of the hostile-input tests: the gRPC channel to each module's own server."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from tests.server.conftest import TOKEN, ServerProc

AUTH = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture(scope="module")
def channel(srv: ServerProc) -> Iterator[grpc.Channel]:
    """A channel to the module's ``srv`` fixture (each test module starts its own server)."""
    ch = grpc.insecure_channel(srv.grpc)
    try:
        yield ch
    finally:
        ch.close()
