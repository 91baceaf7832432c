from __future__ import annotations

import numpy as np
import pytest

from placement_service.sim.streams import Streams


def test_same_name_same_sequence_and_names_independent() -> None:
    a, b = Streams(3, 1), Streams(3, 1)
    x = a.get("arrivals").random(5)
    # drawing from another stream first must not change "arrivals"
    b.get("placement").random(100)
    assert np.array_equal(x, b.get("arrivals").random(5))
    assert not np.array_equal(x, a.fresh("placement").random(5))


def test_fresh_restarts_and_runs_differ() -> None:
    s = Streams(3, 0)
    first = s.get("jobs").random(3)
    assert np.array_equal(first, s.fresh("jobs").random(3))
    assert not np.array_equal(first, Streams(3, 1).fresh("jobs").random(3))
    assert 0 <= s.seed_int("placer") < 2**31


def test_negative_seed_rejected() -> None:
    with pytest.raises(ValueError):
        Streams(-1)
