"""One way to hand a sparse linear model to HiGHS, shared by the capacity models (RAS, Flux).

A model here is column-wise: ``cost``, column bounds, row bounds and a CSC matrix (``indptr``,
``indices``, ``data``) of ``n_rows x n_cols``; ``integer_cols`` marks the integer columns.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Iterable

import highspy
import numpy as np
from scipy import sparse

_FIRST = threading.Lock()
_constructed = False


def new_highs() -> highspy.Highs:
    """A fresh ``highspy.Highs``: the one way the capacity models construct one.

    HiGHS writes a licence banner straight to file descriptor 1 the first time a process constructs
    one, whatever ``output_flag`` is set to afterwards. Our stdout carries a service's ready line and
    the CLI's answers, which supervisors and scripts parse, so that first construction runs with fd 1
    pointed at fd 2: the banner goes to the log beside our other diagnostics.

    Pointing fd 1 elsewhere is process-wide: a line another thread writes to stdout meanwhile goes
    to stderr too (a ready line lost that way failed the hostile suite once). So the module builds
    its first instance when it is imported, at a command's start, before any thread of ours runs.
    """
    global _constructed
    with _FIRST:
        if _constructed:
            return highspy.Highs()
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            os.dup2(2, 1)
            h = highspy.Highs()
            ctypes.CDLL(None).fflush(None)  # the banner may sit in C stdio's buffer: out before fd 1 is back
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        _constructed = True
        return h


def highs_for(
    *, time_limit_s: float, threads: int, seed: int, output: bool, **options: bool | float | str
) -> highspy.Highs:
    """A HiGHS instance with the options every capacity model sets, plus ``options``."""
    h = new_highs()
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


new_highs()  # the banner out now, at import (see new_highs), not when a solver thread runs beside others
