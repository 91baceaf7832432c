"""The service's view of the fake ResourceManager: ``tests.agent.fakes.FakeResourceManager`` (one fake
RM for the whole suite, answering as a real 3.3.6 does: labels need an admin ``user.name``, the wrapped
label body adds nothing), as a context manager that records ``(method, path, body)`` without the query.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from tests.agent.fakes import FakeResourceManager as _AgentFakeRM


class FakeResourceManager(_AgentFakeRM):
    def __init__(self, labels: dict[str, bool] | None = None, wrapped: bool = False,
                 admin_users: frozenset[str] | None = None) -> None:
        """``get-node-labels`` answers without the root element, as real 3.2.1 and 3.3.6 do (checked by
        tests/hadoop/test_fake_contracts.py); ``wrapped=True`` wraps it in ``nodeLabelsInfo``."""
        self.calls: list[tuple[str, str, Any]] = []
        super().__init__(labels=labels, labels_wrapped_get=wrapped, admin_users=admin_users)

    def record(self, method: str, path: str, body: Any, headers: dict[str, str] | None = None) -> None:
        super().record(method, path, body, headers)
        with self.lock:
            self.calls.append((method, urlsplit(path).path, body))

    def __enter__(self) -> FakeResourceManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
