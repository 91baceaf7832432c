"""Constraint rows of a linear model, gathered block by block: ``row_lower <= A x <= row_upper``.

Each ``add`` appends a block of rows in coordinate form, its row indices counted from 0 within the
block; the block is placed after the rows already added.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


class ConstraintRows:
    def __init__(self) -> None:
        self._rows: list[np.ndarray] = []
        self._cols: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self._lower: list[np.ndarray] = []
        self._upper: list[np.ndarray] = []
        self.n_rows = 0

    def add(self, r: np.ndarray, c: np.ndarray, a: np.ndarray, lo: np.ndarray, up: np.ndarray) -> None:
        """Rows ``n_rows + r`` get coefficient ``a`` at column ``c``; ``len(lo)`` new rows with bounds."""
        self._rows.append(r + self.n_rows)
        self._cols.append(c)
        self._vals.append(a)
        self._lower.append(lo)
        self._upper.append(up)
        self.n_rows += len(lo)

    def matrix(self, n_cols: int) -> sp.csc_matrix:
        coords = (np.concatenate(self._rows), np.concatenate(self._cols))
        return sp.csc_matrix((np.concatenate(self._vals), coords), shape=(self.n_rows, n_cols))

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate(self._lower), np.concatenate(self._upper)
