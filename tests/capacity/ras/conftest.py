"""Small seeded regions shared by the capacity tests (no /work/shared needed)."""

from __future__ import annotations

import pytest

from placement_service.capacity.ras.domain import Problem, Region, Request, Settings
from placement_service.capacity.ras.generate import generate_region, generate_requests


@pytest.fixture(scope="session")
def small_region() -> Region:
    return generate_region(n_servers=300, n_msbs=6, n_hardware=3, seed=3)


@pytest.fixture(scope="session")
def small_requests(small_region: Region) -> tuple[Request, ...]:
    return generate_requests(small_region, n_reservations=8, fill=0.6, seed=3)


@pytest.fixture(scope="session")
def small_problem(small_region: Region, small_requests: tuple[Request, ...]) -> Problem:
    return Problem(small_region, small_requests, Settings(time_limit_s=5.0))


@pytest.fixture(scope="session")
def small_plan(small_problem: Problem):  # type: ignore[no-untyped-def]
    from placement_service.capacity.ras.solve import solve

    return solve(small_problem)
