"""Largest norms of spins and coupling blocks, for the input checks (:mod:`spinsa._checks`).

One pass over the array, summed in float64 whatever its dtype (numpy's einsum with a
float64 accumulator over a float32 array costs about 10x more; a call of ``spinsa.run``
needs these four times).
"""

from __future__ import annotations

import numpy as np

from spinsa.kernels._numba import njit, prange


@njit(parallel=True)
def max_row_norm(a):
    """max_k |a[k]| over the rows of a 2-d array (k, m), the sums of squares in float64."""
    n, m = a.shape
    best = np.zeros(n)
    for k in prange(n):
        s = 0.0
        for c in range(m):
            v = float(a[k, c])
            s += v * v
        best[k] = s
    top = 0.0
    for k in range(n):
        top = max(top, best[k])
    return np.sqrt(top)


def max_norm(a: np.ndarray, block: int) -> float:
    """Largest Euclidean norm of the consecutive groups of ``block`` entries of C-contiguous
    ``a`` (the last axis of spins: block d; the blocks of J: block d^2); 0 when empty."""
    if not a.size:
        return 0.0
    return float(max_row_norm(a.reshape(-1, block)))
