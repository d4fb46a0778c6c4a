"""Private numba kernels of the analysis: flat loops writing into ``out``; no validation."""

from __future__ import annotations

import math

import numpy as np

from spinsa.kernels._numba import njit, prange


@njit(parallel=True)
def lagged_distances(states, max_lag, out):  # pragma: no cover - compiled
    """out[k-1, t, p] = max_i |x_i(t) - x_i(t-k)| for t >= k, NaN for t < k.

    states: (T, P, N, d); out: (max_lag, T, P). Parallel over samples p.
    """
    T, P, N, d = states.shape
    for p in prange(P):
        for k in range(1, max_lag + 1):
            for t in range(T):
                if t < k:
                    out[k - 1, t, p] = np.nan
                    continue
                worst = 0.0
                for i in range(N):
                    s = 0.0
                    for a in range(d):
                        diff = states[t, p, i, a] - states[t - k, p, i, a]
                        s += diff * diff
                    if s > worst:
                        worst = s
                out[k - 1, t, p] = math.sqrt(worst)


@njit(parallel=True)
def token_max_distance(x, y, out):  # pragma: no cover - compiled
    """out[p] = max_i |x_{p,i} - y_{p,i}|.  x, y: (P, N, d); out: (P,)."""
    P, N, d = x.shape
    for p in prange(P):
        worst = 0.0
        for i in range(N):
            s = 0.0
            for a in range(d):
                diff = x[p, i, a] - y[p, i, a]
                s += diff * diff
            if s > worst:
                worst = s
        out[p] = math.sqrt(worst)
