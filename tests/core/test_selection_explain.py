"""Explained class selection (ClassSelector.explain) and thresholds from the job lengths seen."""

from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.selection import ClassSelector, SelectionConfig, thresholds_from_history
from placement_service.core.types import Job, Pattern, UtilizationClass


def _cls(cid: str, pattern: Pattern, avg: float, peak: float, cur: float, cores: float) -> UtilizationClass:
    return UtilizationClass(id=cid, pattern=pattern, avg_cpu=avg, peak_cpu=peak, current_cpu=cur,
                            tenants=(cid,), servers=int(cores // 32), cores=cores)


CLASSES = [
    _cls("constant-0", Pattern.CONSTANT, 0.3, 0.4, 0.35, 320.0),
    _cls("periodic-0", Pattern.PERIODIC, 0.4, 0.8, 0.5, 640.0),
    _cls("unpredictable-0", Pattern.UNPREDICTABLE, 0.5, 0.9, 0.2, 64.0),
]


@pytest.mark.parametrize("last", [None, 10.0, 4000.0])
@pytest.mark.parametrize("tasks", [5, 300, 900, 5000])
def test_explain_gives_the_same_decision_as_select_and_its_inputs(last, tasks):
    sel = ClassSelector(CLASSES, SelectionConfig(reserve_frac=0.1))
    job = Job(name="q", last_duration_s=last, vertices={"Map 1": tasks})
    for seed in range(5):
        plain = sel.select(job, np.random.default_rng(seed))
        explained, why = sel.explain(job, np.random.default_rng(seed))
        assert explained == plain
        assert why["classes"] == list(plain.classes)
        assert why["job_type"] == plain.job_type.value and why["max_concurrency"] == tasks
        for c, cls in zip(why["candidates"], CLASSES, strict=True):
            used = {"short": cls.current_cpu, "medium": max(cls.avg_cpu, cls.current_cpu),
                    "long": max(cls.peak_cpu, cls.current_cpu)}[plain.job_type.value]
            assert c["headroom"] == pytest.approx(1 - used)
            assert c["capacity_containers"] == pytest.approx(cls.cores * max(0.0, 1 - used - 0.1))
            assert c["chosen"] == (cls.id in plain.classes)
            assert c["fits_alone"] == (c["capacity_containers"] >= tasks and c["weighted_headroom"] > 0)
        if not plain.classes:
            assert "none chosen" in why["rule"] and why["draw"] is None
        elif any(c["fits_alone"] for c in why["candidates"]):
            assert why["rule"].startswith("one class fits alone")
            assert sum(why["draw"]["probabilities"].values()) == pytest.approx(1.0)
        else:
            assert why["draw"]["order"][: len(plain.classes)] == list(plain.classes)


def test_thresholds_from_history_are_thirds_of_the_lengths_seen():
    assert thresholds_from_history([60.0] * 10) is None  # too few jobs to say
    lengths = list(np.linspace(10, 3010, 301))
    short, long = thresholds_from_history(lengths)
    assert short == pytest.approx(1010.0) and long == pytest.approx(2010.0)
    assert thresholds_from_history([float("nan")] * 50 + [5.0] * 30) == (5.0, 5.0)
