"""Glue between the solver's types and the independent checker's raw documents."""

from __future__ import annotations

from typing import Any

from placement_service.capacity.ras import io
from placement_service.capacity.ras.check import check_plan
from placement_service.capacity.ras.domain import Problem
from placement_service.capacity.ras.plan import Plan


def reservations_doc(problem: Problem) -> dict[str, Any]:
    s = problem.settings
    return io.requests_to_json(problem.requests, {"random_failure_buffer": s.random_failure_buffer,
                                                  "affinity_tolerance": s.affinity_tolerance})  # fmt: skip


def violations(problem: Problem, plan: Plan | dict[str, Any]) -> list[str]:
    doc = plan.to_json() if isinstance(plan, Plan) else plan
    return check_plan(io.region_columns(problem.region), reservations_doc(problem), doc)
