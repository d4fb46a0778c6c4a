"""The pseudo-likelihood and its closed-form gradient (docs/model.md, 'The objective').

    L(J)       = (1/P) sum_mu sum_i e_i(xi^mu; J)
    dL/dJ_ij   = -(1/P) sum_mu alpha_ij(xi^mu) xi_i^mu (xi_j^mu)^T

With a score clamp c the scores are min(s_ij, c) before lambda, and the pairs where the clamp
acts drop out of the gradient (``clamp = inf``: no clamp).

Row i of J enters e_i only, so rows are independent. The patterns stream through in
*chunks* of up to ``CHUNK`` samples, each transposed to ``(N, d, W)`` so that samples sit
in the SIMD lanes (as in :mod:`spinsa.kernels.dynamics`); every row of J then passes over
the chunk, in parallel, while it sits in the shared cache. Memory beyond the patterns is
one chunk and the float64 gradient, whatever P. Per (row, chunk) a first pass keeps the
scaled scores (N x W floats) and their maximum, a second turns them into attention
weights, a third accumulates the gradient; each gradient sum is reduced across the lanes
once per chunk, which is why chunks are wide. For d <= 8 the pair loops are written out
for d (:mod:`spinsa.kernels._unrolled`); sums over samples are float64 across chunks.
"""

from __future__ import annotations

import functools

import numpy as np
from numba.extending import overload

from spinsa.kernels._aligned import aligned_empty, aligned_work
from spinsa.kernels._math import fast_exp
from spinsa.kernels._numba import njit, prange, vector_registers, written_for_d
from spinsa.kernels._unrolled import (
    MAX_UNROLLED_D,
    outer_block_source,
    rows_for_registers,
    score_block_source,
)
from spinsa.kernels.dynamics import couple, dot_lanes, lane_max, to_tiles

_U = np.uint64
CHUNK = 512  # samples per chunk: N d CHUNK floats (3.2 MB at N = 196, d = 8) fit the L3 cache


def chunk_width(n_samples: int) -> int:
    """Lanes of a chunk: CHUNK, or fewer samples rounded up to a multiple of 16."""
    return int(min(CHUNK, 16 * max(1, -(-n_samples // 16))))


def chunks(xi: np.ndarray) -> np.ndarray:
    """(P, N, d) -> (n_chunks, N, d, W), zero-padded: every chunk at once (the row fits)."""
    return to_tiles(xi, chunk_width(xi.shape[0]))


@njit(parallel=True)
def _fill_chunk(xi, start, X):
    """X (N, d, W) = xi[start : start + W] transposed, zero lanes past the end."""
    N, d, W = X.shape
    n = min(W, xi.shape[0] - start)
    for j in prange(N):
        for a in range(d):
            for p in range(n):
                X[j, a, p] = xi[start + p, j, a]
            for p in range(n, W):
                X[j, a, p] = 0


def _score_block(Xf, Jf, jo, oi, oj, W, lam, clamp, S, so, unroll):
    """One pair's scores, written out for d = len(unroll) (numba only; like every written-out
    block, its stack frame starts on a cache line: :func:`written_for_d`)."""
    raise NotImplementedError("_score_block runs inside numba kernels only")


def _outer_block(Xf, oi, oj, W, S, so, G, go, unroll):
    """One pair's gradient, written out for d = len(unroll) (numba only)."""
    raise NotImplementedError("_outer_block runs inside numba kernels only")


@overload(_score_block)
def _score_block_numba(Xf, Jf, jo, oi, oj, W, lam, clamp, S, so, unroll):
    noop = lambda Xf, Jf, jo, oi, oj, W, lam, clamp, S, so, unroll: None  # noqa: E731
    return written_for_d(score_block_source, "score_block", unroll, noop, _U=_U)


@overload(_outer_block)
def _outer_block_numba(Xf, oi, oj, W, S, so, G, go, unroll):
    noop = lambda Xf, oi, oj, W, S, so, G, go, unroll: None  # noqa: E731
    # the blocking that fits the target's registers, chosen when numba compiles this
    source = functools.partial(outer_block_source, rows=rows_for_registers(vector_registers()))
    return written_for_d(source, "outer_block", unroll, noop, _U=_U)


def unroll_tag(d: int) -> tuple:
    """d zeros for the written-out pair loops (d <= 8), else () (see dynamics.unroll_tag)."""
    return (0,) * d if d <= MAX_UNROLLED_D else ()


@njit
def _row_chunk(X, n_valid, J_row, lam, clamp, i, grad_row, S, m, z, y, u, ones, unroll):
    """sum over the chunk's valid lanes of e_i; -sum alpha_ij xi_i xi_j^T into grad_row."""
    N = _U(X.shape[0])
    d = _U(X.shape[1])
    W = _U(X.shape[2])
    dt = X.dtype.type
    Xf = X.reshape(-1)
    Jf = J_row.reshape(-1)
    Gf = grad_row.reshape(-1)
    Sf = S.reshape(-1)
    oi = i * d * W
    for j in range(N):  # pass 1: scaled (clamped) scores
        if j == i:
            continue
        if len(unroll) > 0:
            _score_block(Xf, Jf, j * d * d, oi, j * d * W, W, lam, clamp, Sf, j * W, unroll)
        else:
            couple(J_row[j], X[j], y)
            dot_lanes(X[i], y, S[j])
            for p in range(W):
                S[j, p] = min(S[j, p], clamp) * lam
    for p in range(W):
        m[p] = dt(-1e30)
    lane_max(S, ones, i, m, z)  # their max per lane
    top = clamp * lam  # a clamped scaled score equals this exactly
    for p in range(W):
        z[p] = dt(0)
    for j in range(N):  # pass 2: weights and the normaliser; clamped pairs get no gradient
        if j == i:
            continue
        for p in range(W):
            w = fast_exp(S[j, p] - m[p])
            z[p] += w
            S[j, p] = w if S[j, p] < top else dt(0)
    loss = 0.0
    for p in range(n_valid):  # padded lanes hold zero spins: no loss, no gradient
        loss -= (float(m[p]) + np.log(float(z[p]))) / lam
    for p in range(W):
        z[p] = dt(1) / z[p]
    for j in range(N):
        if j == i:
            continue
        for p in range(W):
            S[j, p] *= z[p]
    for j in range(N):  # pass 3: the gradient
        if j == i:
            continue
        if len(unroll) > 0:
            _outer_block(Xf, oi, j * d * W, W, Sf, j * W, Gf, j * d * d, unroll)
        else:
            for a in range(d):
                for p in range(W):
                    u[a, p] = S[j, p] * X[i, a, p]
            _outer_lanes(u, X[j], grad_row[j])
    return loss


@njit
def _outer_lanes(u, xj, g):
    """g[a, b] -= sum_p u[a, p] xj[b, p] (float64 g): the generic gradient (d > 8)."""
    d = _U(u.shape[0])
    L = _U(u.shape[1])
    dt = u.dtype.type
    for a in range(d):
        for b in range(d):
            acc = dt(0)
            for p in range(L):
                acc += u[a, p] * xj[b, p]
            g[a, b] -= acc


@njit
def _row(X, n_valid, J_row, lam, clamp, i, grad_row, unroll):
    """:func:`_row_chunk` with its own scratch buffers (one call per row and chunk)."""
    N, d, W = X.shape
    dt = X.dtype.type
    S = aligned_work(N * W, X).reshape((N, W))
    m = aligned_work(W, X)
    z = aligned_work(W, X)
    y = aligned_work(d * W, X).reshape((d, W))
    u = aligned_work(d * W, X).reshape((d, W))
    ones = np.ones(N, X.dtype)
    return _row_chunk(
        X, n_valid, J_row, dt(lam), dt(clamp), _U(i), grad_row, S, m, z, y, u, ones, unroll
    )


@njit(parallel=True)
def _all_rows(X, n_valid, J, lam, clamp, grad64, row_losses, unroll):
    for i in prange(J.shape[0]):
        row_losses[i] += _row(X, n_valid, J[i], lam, clamp, i, grad64[i], unroll)


def loss_and_grad(xi, J, lam, grad_out, clamp=np.inf) -> float:
    """L(J) and dL/dJ written into ``grad_out`` (diagonal blocks zero); rows in parallel.

    ``xi`` (P, N, d) and ``J`` (N, N, d, d) C-contiguous in one float dtype; scores clamped
    at ``clamp`` before lambda; no checks. The patterns stream through one chunk at a time.
    """
    P, N, d = xi.shape
    X = aligned_empty((N, d, chunk_width(P)), xi.dtype)
    grad64 = np.zeros(J.shape, np.float64)
    row_losses = np.zeros(N, np.float64)
    unroll = unroll_tag(d)
    for start in range(0, P, X.shape[2]):
        _fill_chunk(xi, start, X)
        n_valid = min(X.shape[2], P - start)
        _all_rows(X, n_valid, J, lam, clamp, grad64, row_losses, unroll)
    np.divide(grad64, P, out=grad_out, casting="unsafe")
    return float(row_losses.sum()) / P


def row_loss_and_grad(xi, J_row, lam, i, grad_row_out, tiles=None, clamp=np.inf) -> float:
    """(1/P) sum_mu e_i and its gradient in J_row = J[i] (N, d, d); one thread, GIL released.

    Pass ``tiles=chunks(xi)`` to avoid re-chunking the patterns at every call.
    """
    Xc = chunks(xi) if tiles is None else tiles
    unroll = unroll_tag(xi.shape[2])
    return float(_row_all_chunks(Xc, xi.shape[0], J_row, lam, clamp, int(i), grad_row_out, unroll))


@njit
def _row_all_chunks(Xc, n_samples, J_row, lam, clamp, i, grad_out_row, unroll):
    grad64 = np.zeros(J_row.shape, np.float64)
    loss = 0.0
    W = Xc.shape[3]
    for c in range(Xc.shape[0]):
        n_valid = min(W, n_samples - c * W)
        loss += _row(Xc[c], n_valid, J_row, lam, clamp, i, grad64, unroll)
    out, g = grad_out_row.reshape(-1), grad64.reshape(-1)
    for k in range(g.size):
        out[k] = g[k] / n_samples
    return loss / n_samples
