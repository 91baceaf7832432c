"""One way to hand a sparse linear model to HiGHS, shared by the capacity models (RAS, Flux).

A model here is column-wise: ``cost``, column bounds, row bounds and a CSC matrix (``indptr``,
``indices``, ``data``) of ``n_rows x n_cols``; ``integer_cols`` marks the integer columns.
"""

from __future__ import annotations

from collections.abc import Iterable

import highspy
import numpy as np
from scipy import sparse


def highs_for(
    *, time_limit_s: float, threads: int, seed: int, output: bool, **options: bool | float | str
) -> highspy.Highs:
    """A HiGHS instance with the options every capacity model sets, plus ``options``."""
    h = highspy.Highs()
    h.setOptionValue("output_flag", bool(output))
    h.setOptionValue("time_limit", max(0.1, float(time_limit_s)))
    h.setOptionValue("threads", int(threads))
    h.setOptionValue("random_seed", int(seed))
    for key, value in options.items():
        h.setOptionValue(key, value)
    return h


def pass_model(
    h: highspy.Highs, *, cost: np.ndarray, col_lower: np.ndarray, col_upper: np.ndarray,
    row_lower: np.ndarray, row_upper: np.ndarray, matrix: sparse.csc_matrix, integer_cols: Iterable[int] = (),
) -> None:
    """Pass the column-wise model to ``h``; columns in ``integer_cols`` are integer."""
    lp = highspy.HighsLp()
    lp.num_col_ = int(matrix.shape[1])
    lp.num_row_ = int(matrix.shape[0])
    lp.col_cost_ = cost
    lp.col_lower_ = col_lower
    lp.col_upper_ = col_upper
    lp.row_lower_ = row_lower
    lp.row_upper_ = row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = matrix.indptr
    lp.a_matrix_.index_ = matrix.indices
    lp.a_matrix_.value_ = matrix.data
    lp.a_matrix_.num_col_ = lp.num_col_
    lp.a_matrix_.num_row_ = lp.num_row_
    ints = np.asarray(list(integer_cols), dtype=np.int64)
    if ints.size:
        integrality = [highspy.HighsVarType.kContinuous] * lp.num_col_
        for j in ints.tolist():
            integrality[j] = highspy.HighsVarType.kInteger
        lp.integrality_ = integrality
    h.passModel(lp)
