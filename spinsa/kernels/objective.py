"""The pseudo-likelihood objective and its closed-form gradient (DESIGN §4).

    L(J)       = (1/P) sum_mu sum_i e_i(xi^mu; J)
    dL/dJ_ij   = -(1/P) sum_mu alpha_ij(xi^mu) xi_i^mu (xi_j^mu)^T

With a score clamp c the scores are min(s_ij, c) before lambda, and the pairs where the clamp
acts drop out of the gradient (``clamp = inf``: no clamp).

Row i of J enters e_i only, so rows are independent: the kernels run one row per thread.
Samples sit in SIMD lanes (the tiled layout of :mod:`spinsa.kernels.dynamics`); the scores
of one tile (N x TILE floats) stay in cache between the two softmax passes; sums over
samples are accumulated per tile in the working precision and across tiles in float64.
"""

from __future__ import annotations

import numpy as np

from spinsa.kernels._math import fast_exp
from spinsa.kernels._numba import njit, prange
from spinsa.kernels.dynamics import couple, dot_lanes, to_tiles

_U = np.uint64


@njit
def _row_loss_grad(Xt, n_samples, J_row, lam, clamp, i, grad_row, S, u, y, m, z):
    """sum_mu e_i and -sum_mu alpha_ij xi_i xi_j^T (into grad_row, float64) for row i."""
    n_tiles = _U(Xt.shape[0])
    N = _U(Xt.shape[1])
    d = _U(Xt.shape[2])
    L = _U(Xt.shape[3])
    dt = Xt.dtype.type
    top = clamp * lam  # a clamped scaled score equals this exactly
    loss = 0.0
    grad_row[:] = 0.0
    for t in range(n_tiles):
        for p in range(L):
            m[p] = dt(-1e30)
        for j in range(N):  # pass 1: scaled (clamped) scores and their max
            if j == i:
                continue
            couple(J_row[j], Xt[t, j], y)
            dot_lanes(Xt[t, i], y, S[j])
            for p in range(L):
                S[j, p] = min(S[j, p], clamp) * lam
                m[p] = max(m[p], S[j, p])
        for p in range(L):
            z[p] = dt(0)
            S[i, p] = dt(0)
        for j in range(N):  # pass 2: weights, the normaliser; clamped pairs get no gradient
            if j == i:
                continue
            for p in range(L):
                w = fast_exp(S[j, p] - m[p])
                z[p] += w
                S[j, p] = w if S[j, p] < top else dt(0)
        n_valid = min(int(L), n_samples - int(t) * int(L))  # padded lanes hold zero spins
        for p in range(n_valid):
            loss -= (float(m[p]) + np.log(float(z[p]))) / lam
        for p in range(L):
            z[p] = dt(1) / z[p]
        for j in range(N):  # pass 3: the gradient, a reduction over the lanes
            if j == i:
                continue
            for a in range(d):
                for p in range(L):
                    u[a, p] = S[j, p] * z[p] * Xt[t, i, a, p]
            outer_lanes(u, Xt[t, j], grad_row[j])
    return loss


@njit
def outer_lanes(u, xj, g):
    """g[a, b] -= sum_p u[a, p] xj[b, p] (float64 g), eight b at a time in one pass."""
    d = _U(u.shape[0])
    L = _U(u.shape[1])
    d8 = d - d % _U(8)
    dt = u.dtype.type
    for a in range(d):
        for b in range(_U(0), d8, _U(8)):
            g0 = g1 = g2 = g3 = g4 = g5 = g6 = g7 = dt(0)
            for p in range(L):
                ua = u[a, p]
                g0 += ua * xj[b, p]
                g1 += ua * xj[b + _U(1), p]
                g2 += ua * xj[b + _U(2), p]
                g3 += ua * xj[b + _U(3), p]
                g4 += ua * xj[b + _U(4), p]
                g5 += ua * xj[b + _U(5), p]
                g6 += ua * xj[b + _U(6), p]
                g7 += ua * xj[b + _U(7), p]
            g[a, b] -= g0
            g[a, b + _U(1)] -= g1
            g[a, b + _U(2)] -= g2
            g[a, b + _U(3)] -= g3
            g[a, b + _U(4)] -= g4
            g[a, b + _U(5)] -= g5
            g[a, b + _U(6)] -= g6
            g[a, b + _U(7)] -= g7
        for b in range(d8, d):
            acc = dt(0)
            for p in range(L):
                acc += u[a, p] * xj[b, p]
            g[a, b] -= acc


@njit
def _row_into(Xt, n_samples, J_row, lam, clamp, i, grad_out_row):
    N, d, width = Xt.shape[1], Xt.shape[2], Xt.shape[3]
    dt = Xt.dtype.type
    grad64 = np.empty((N, d, d), np.float64)
    S = np.empty((N, width), Xt.dtype)
    u = np.empty((d, width), Xt.dtype)
    y = np.empty((d, width), Xt.dtype)
    m = np.empty(width, Xt.dtype)
    z = np.empty(width, Xt.dtype)
    loss = _row_loss_grad(Xt, n_samples, J_row, dt(lam), dt(clamp), _U(i), grad64, S, u, y, m, z)
    for j in range(N):
        for a in range(d):
            for b in range(d):
                grad_out_row[j, a, b] = grad64[j, a, b] / n_samples
    return loss / n_samples


@njit(parallel=True)
def _all_rows(Xt, n_samples, J, lam, clamp, grad_out, row_losses):
    for i in prange(J.shape[0]):
        row_losses[i] = _row_into(Xt, n_samples, J[i], lam, clamp, i, grad_out[i])


def loss_and_grad_tiles(Xt, n_samples, J, lam, grad_out, clamp=np.inf) -> float:
    """As :func:`loss_and_grad` for patterns already in the tiled layout (fits reuse them)."""
    row_losses = np.empty(J.shape[0], dtype=np.float64)
    _all_rows(Xt, n_samples, J, lam, clamp, grad_out, row_losses)
    return float(row_losses.sum())


def loss_and_grad(xi, J, lam, grad_out, clamp=np.inf) -> float:
    """L(J) and dL/dJ written into ``grad_out`` (diagonal blocks zero); rows in parallel.

    ``xi`` (P, N, d) and ``J`` (N, N, d, d) C-contiguous in one float dtype; scores clamped
    at ``clamp`` before lambda; no checks.
    """
    return loss_and_grad_tiles(to_tiles(xi), xi.shape[0], J, lam, grad_out, clamp)


def row_loss_and_grad(xi, J_row, lam, i, grad_row_out, tiles=None, clamp=np.inf) -> float:
    """(1/P) sum_mu e_i and its gradient in J_row = J[i] (N, d, d); one thread, GIL released.

    Pass ``tiles=to_tiles(xi)`` to avoid re-tiling the patterns at every call.
    """
    Xt = to_tiles(xi) if tiles is None else tiles
    return float(_row_into(Xt, xi.shape[0], J_row, lam, clamp, int(i), grad_row_out))
