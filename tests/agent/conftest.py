"""Fixtures shared by the agent tests: a process-tree "node", and fake ResourceManager / NodeManager."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.agent.fakes import YARN_NODE_ID, FakeNodeManager, FakeResourceManager
from tests.agent.procs import Node


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node()
    try:
        yield n
    finally:
        n.cleanup()


@pytest.fixture
def rm() -> Iterator[FakeResourceManager]:
    server = FakeResourceManager()
    yield server
    server.close()


@pytest.fixture
def nm() -> Iterator[FakeNodeManager]:
    server = FakeNodeManager(YARN_NODE_ID)
    yield server
    server.close()
