"""A small seeded region for the POP tests (every class large enough for k = 4)."""

from __future__ import annotations

import pytest

from placement_service.capacity.ras.domain import Problem, Settings
from placement_service.capacity.ras.generate import generate_region, generate_requests


@pytest.fixture(scope="session")
def pop_problem() -> Problem:
    region = generate_region(n_servers=2400, n_msbs=6, n_hardware=3, seed=5)
    requests = generate_requests(region, n_reservations=24, fill=0.7, seed=5)
    return Problem(region, requests, Settings(time_limit_s=20.0))


@pytest.fixture(scope="session")
def dask_problem() -> Problem:
    """Smaller still: the Dask tests solve it twice or three times."""
    region = generate_region(n_servers=900, n_msbs=6, n_hardware=3, seed=6)
    requests = generate_requests(region, n_reservations=10, fill=0.6, seed=6)
    return Problem(region, requests, Settings(time_limit_s=20.0))
