from __future__ import annotations

import numpy as np

from placement_service.capacity.ras import ras_model
from placement_service.capacity.ras.aggregate import aggregate
from placement_service.capacity.ras.repair import greedy, round_and_repair


def _after_worst(agg, y, r):  # type: ignore[no-untyped-def]
    m = agg.pair_entity == r
    per = np.bincount(agg.class_msb[agg.pair_class[m]], weights=agg.pair_value[m] * y[m], minlength=agg.n_msb)
    return per.sum() - per.max()


def test_rounded_lp_point_meets_every_request_within_class_sizes(small_problem):
    agg = aggregate(small_problem)
    model = ras_model.build(agg, small_problem.requests, small_problem.settings)
    lp = ras_model.solve(model, relax=True, time_limit_s=10, settings=small_problem.settings)
    y = round_and_repair(agg, lp.x[: agg.n_pairs], small_problem.settings)
    used = np.bincount(agg.pair_class, weights=y, minlength=agg.n_classes)
    assert np.all(used <= agg.class_size) and np.all(y >= 0)
    for r in range(agg.n_reservations):
        assert _after_worst(agg, y, r) >= agg.capacity_rru[r] - 1e-9
    for h in range(agg.n_entities - agg.n_reservations):
        assert y[agg.pair_entity == agg.n_reservations + h].sum() >= agg.buffer_need[h]
    # and the rounded plan is not worse than the purely greedy one by much
    x_r = ras_model.complete(model, y)
    x_g = ras_model.complete(model, greedy(agg, small_problem.settings))
    assert ras_model.objective(model, x_r) >= lp.objective - 1e-6
    assert ras_model.objective(model, x_r) <= 1.2 * ras_model.objective(model, x_g)
