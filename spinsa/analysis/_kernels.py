"""Private numba kernels of the analysis: flat loops writing into ``out``; no validation."""

from __future__ import annotations

import math

import numpy as np

from spinsa.kernels._numba import njit, prange


@njit(inline="always")  # numba inlines it: as fast as the loop written out
def _distance(x, y):  # pragma: no cover - compiled
    """max_i |x_i - y_i| of two configurations x, y: (N, d)."""
    worst = 0.0
    for i in range(x.shape[0]):
        s = 0.0
        for a in range(x.shape[1]):
            diff = x[i, a] - y[i, a]
            s += diff * diff
        if s > worst:
            worst = s
    return math.sqrt(worst)


@njit(parallel=True)
def lagged_distances(states, max_lag, out):  # pragma: no cover - compiled
    """out[k-1, t, p] = max_i |x_i(t) - x_i(t-k)| for t >= k, NaN for t < k.

    states: (T, P, N, d); out: (max_lag, T, P). Parallel over samples p.
    """
    T, P = states.shape[:2]
    for p in prange(P):
        for k in range(1, max_lag + 1):
            for t in range(T):
                out[k - 1, t, p] = np.nan if t < k else _distance(states[t, p], states[t - k, p])


@njit(parallel=True)
def token_max_distance(x, y, out):  # pragma: no cover - compiled
    """out[p] = max_i |x_{p,i} - y_{p,i}|.  x, y: (P, N, d); out: (P,)."""
    for p in prange(x.shape[0]):
        out[p] = _distance(x[p], y[p])
