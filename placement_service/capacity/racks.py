"""Second phase: rack spread (expression 2) for the reservations with the worst rack spread."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from placement_service.capacity.aggregate import Aggregate
from placement_service.capacity.domain import Region, Request, Settings


def improve(
    region: Region, agg: Aggregate, requests: tuple[Request, ...], settings: Settings, assign: np.ndarray
) -> tuple[np.ndarray, tuple[Mapping[str, object], ...]]:
    return assign, ()
