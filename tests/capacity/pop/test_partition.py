"""The generic POP layer: client splitting, resource splitting, random partition, coalesce."""

from __future__ import annotations

import numpy as np
import pytest

from placement_service.capacity.pop.partition import (
    PopError,
    coalesce,
    partition,
    split_clients,
    split_resource,
)


def test_split_halves_the_largest_until_threshold_and_keeps_each_clients_total() -> None:
    demand = [100.0, 10.0, 40.0, 1.0]
    pieces = split_clients(demand, threshold=0.75)  # floor(0.75 * 4) = 3 extra virtual clients
    assert len(pieces) == 7
    shares: dict[int, float] = {}
    for p in pieces:
        shares[p.client] = shares.get(p.client, 0.0) + p.share
    assert shares == pytest.approx({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0})
    # 100 -> 50 + 50 (largest first), then each 50 (> 40) -> 25 + 25; 40 is never the largest
    assert sorted(p.share * demand[p.client] for p in pieces if p.client == 0) == [25.0] * 4
    assert [p.share for p in pieces if p.client in (1, 2, 3)] == [1.0, 1.0, 1.0]
    four = split_clients(demand, threshold=1.0)  # 4 extra: the 40 is the largest after three halvings
    assert sorted(p.share * demand[p.client] for p in four if p.client == 2) == [20.0, 20.0]


def test_split_threshold_zero_is_identity_but_limit_still_splits_what_cannot_fit() -> None:
    assert [(p.client, p.share) for p in split_clients([3.0, 5.0], 0.0)] == [(0, 1.0), (1, 1.0)]
    pieces = split_clients([3.0, 5.0], 0.0, limit=2.0)
    assert max(p.share * [3.0, 5.0][p.client] for p in pieces) <= 2.0
    # a floor on the piece size stops the halving even above the limit
    pieces = split_clients([3.0, 5.0], 0.0, limit=0.1, min_piece=[1.0, 2.0])
    assert min(p.share * [3.0, 5.0][p.client] for p in pieces if p.client == 1) >= 2.0
    with pytest.raises(PopError):
        split_clients([1.0], -0.5)


def test_split_resource_divides_counts_with_remainders_spread_deterministically() -> None:
    a = split_resource(103, 4, np.random.default_rng(7))
    b = split_resource(103, 4, np.random.default_rng(7))
    assert a.sum() == 103 and a.max() - a.min() <= 1 and (a == b).all()
    assert split_resource(2, 4, np.random.default_rng(0)).tolist().count(0) == 2


def test_partition_is_seeded_balanced_and_rejects_bad_k() -> None:
    p1, p2 = partition(10, 3, seed=1), partition(10, 3, seed=1)
    assert (p1 == p2).all() and sorted(np.bincount(p1).tolist()) == [3, 3, 4]
    assert not (partition(10, 3, seed=2) == p1).all()
    w = np.array([[8.0, 0], [4, 0], [4, 0], [0, 6], [0, 3], [0, 3]])
    parts = partition(6, 2, seed=0, weight=w, supply=np.array([16.0, 12.0]))
    loads = np.array([w[parts == j].sum(axis=0) for j in range(2)])
    assert (loads == [[8, 6], [8, 6]]).all() or (loads == [[8, 6], [8, 6]][::-1]).all()
    with pytest.raises(PopError, match="k must be >= 1"):
        partition(5, 0, seed=0)


def test_coalesce_maps_virtual_clients_back_and_refuses_a_resource_in_two_parts() -> None:
    owner = {"a~pop0": "a", "a~pop1": "a"}
    out = coalesce([{"s1": "a~pop0", "s2": None}, {"s3": "a~pop1", "s4": "b"}], owner)
    assert out == {"s1": "a", "s2": None, "s3": "a", "s4": "b"}
    with pytest.raises(PopError, match="s1"):
        coalesce([{"s1": "a"}, {"s1": "b"}], {})
