"""The normalised pseudo-likelihood and its closed-form gradient (docs/model.md, 'The
normalised pseudo-likelihood').

Per sample and row i, with h_ij = J_ij x_j, s_ij = x_i . h_ij and kappa_ij = lam |h_ij|:

    l_i     = -log sum_{j != i} exp(lam s_ij) + log sum_{j != i} Z_d(kappa_ij)
    dl_i/dJ_ij = -lam [alpha_ij x_i - w_ij A_d(kappa_ij) h_ij / |h_ij|] x_j^T

alpha the softmax of lam s over j, w_ij = Z_d(kappa_ij) / sum_k Z_d(kappa_ik); l_i is minus the
log of the conditional density of x_i given the others at beta = lam. Without the normaliser
(``with_norm`` False) l_i is lam e_i, the paper's loss times lam.

The site state may differ from the others' ("row-matched" states, and the model term of
contrastive divergence with single-site resampling): row i reads x_i from ``xs`` and every
x_j from ``xo``. A plain kernel (rows in parallel, one sample at a time, float64
arithmetic); the tiled kernel of :mod:`spinsa.kernels.objective` is the paper's loss's fast path.
"""

from __future__ import annotations

import math

import numpy as np

from spinsa.kernels._numba import njit, prange
from spinsa.kernels.vmf import log_partition_and_mean


@njit
def _row_sample(xs_i, xo, J_row, i, lam, d_f, with_norm, h, s, logz, amean, grad_row):
    """l_i of one sample; its gradient added into ``grad_row`` (N, d, d) float64."""
    N, d = xo.shape
    m1 = -np.inf
    m2 = -np.inf
    for j in range(N):
        if j == i:
            continue
        nrm2 = 0.0
        sj = 0.0
        for a in range(d):
            acc = 0.0
            for b in range(d):
                acc += float(J_row[j, a, b]) * float(xo[j, b])
            h[j, a] = acc
            nrm2 += acc * acc
            sj += float(xs_i[a]) * acc
        s[j] = lam * sj
        m1 = max(m1, s[j])
        if with_norm:
            nrm = math.sqrt(nrm2)
            lz, am = log_partition_and_mean(lam * nrm, d_f)
            logz[j] = lz
            amean[j] = am / nrm if nrm > 0.0 else 0.0  # A_d(kappa)/|h| -> lam/d: h/|h| A -> 0
            m2 = max(m2, lz)
    z1 = 0.0
    z2 = 0.0
    for j in range(N):
        if j == i:
            continue
        z1 += math.exp(s[j] - m1)
        if with_norm:
            z2 += math.exp(logz[j] - m2)
    loss = -(m1 + math.log(z1))
    if with_norm:
        loss += m2 + math.log(z2)
    for j in range(N):
        if j == i:
            continue
        alpha = math.exp(s[j] - m1) / z1
        w = math.exp(logz[j] - m2) / z2 * amean[j] if with_norm else 0.0
        for a in range(d):
            c = lam * (w * h[j, a] - alpha * float(xs_i[a]))
            for b in range(d):
                grad_row[j, a, b] += c * float(xo[j, b])
    return loss


@njit
def _row(xs, xo, J_row, i, lam, d_f, with_norm, grad_row):
    """sum over samples of l_i and of its gradient (into ``grad_row``, zeroed here)."""
    P, N, d = xo.shape
    h = np.empty((N, d))
    s = np.empty(N)
    logz = np.empty(N)
    amean = np.empty(N)
    grad_row[:] = 0.0
    total = 0.0
    for p in range(P):
        total += _row_sample(
            xs[p, i], xo[p], J_row, i, lam, d_f, with_norm, h, s, logz, amean, grad_row
        )
    return total


@njit(parallel=True)
def _rows(xs, xo, J, lam, d_f, with_norm, grad64, row_losses):
    for i in prange(J.shape[0]):
        row_losses[i] = _row(xs, xo, J[i], i, lam, d_f, with_norm, grad64[i])


def loss_and_grad(xs, xo, J, lam, grad_out, with_norm=True) -> float:
    """(1/P) sum_p sum_i l_i and its gradient written into ``grad_out`` (zero diagonal
    blocks). ``xs``, ``xo`` (P, N, d), ``J`` (N, N, d, d), C-contiguous; no checks."""
    P = xo.shape[0]
    grad64 = np.empty(J.shape, np.float64)
    row_losses = np.empty(J.shape[0], np.float64)
    _rows(xs, xo, J, float(lam), float(xo.shape[2]), bool(with_norm), grad64, row_losses)
    np.divide(grad64, P, out=grad_out, casting="unsafe")
    return float(row_losses.sum()) / P


def row_loss_and_grad(xs, xo, J_row, lam, i, grad_row_out, with_norm=True) -> float:
    """(1/P) sum_p l_i and its gradient in row i, ``J_row`` (N, d, d); one thread."""
    P = xo.shape[0]
    grad64 = np.empty(J_row.shape, np.float64)
    loss = _row(xs, xo, J_row, int(i), float(lam), float(xo.shape[2]), bool(with_norm), grad64)
    np.divide(grad64, P, out=grad_row_out, casting="unsafe")
    return float(loss) / P
