"""Decode spin states to pixels and score them, fused: each state is read once.

Per image p, with s_i = c F^T x_i and each pixel's pair (u, v) = (s_i[2k], s_i[2k + 1])
clamped to [0, top], the decoded pixel is q = u / (u + v) (0 where u + v = 0), as
:meth:`spinsa.PatchEmbedding.decode_pixels`; u and v come from the even and odd columns of
c F (``basis_u``, ``basis_v``, shapes (d, aC)). From the decoded image the kernel takes, in
float64:

- the mean squared error against the clean image over all pixels, and its sums over the
  masked pixels (the visible ones by difference), as :func:`spinsa.tasks.reconstruction_errors`;
- the Pearson correlation with a target image (centred, of norm ``target_norm``);
- the mean over tokens of |x_i - prev_i|, the step size of the evaluation.

Pixels are held in token-minor order, pixel k of token i at [k, i], so that every inner loop
runs over the N tokens contiguously; the clean images, mask and target come in that order
(:class:`spinsa.tasks.StateScorer` arranges them once). A non-finite spin component sets
``bad[p]``; the caller raises."""

from __future__ import annotations

import math

import numpy as np

from spinsa.kernels._numba import njit, prange


@njit
def _transpose(x_p, prev_p, with_prev, xt):
    """x_p (N, d) into ``xt`` (d, N) float64; returns (all finite, mean over tokens of
    |x_i - prev_i| or 0)."""
    N, d = x_p.shape
    ok = True
    total = 0.0
    for i in range(N):
        acc = 0.0
        for b in range(d):
            xb = float(x_p[i, b])
            ok = ok and math.isfinite(xb)
            xt[b, i] = xb
            if with_prev:
                diff = xb - float(prev_p[i, b])
                acc += diff * diff
        total += math.sqrt(acc)
    return ok, total / N


@njit
def _decode_image(xt, basis_u, basis_v, top, round32, u, v, img):
    """Decoded pixels of one state (``xt``, (d, N)) into ``img`` (M, N) float64, pixel k of
    token i at [k, i]; ``u``, ``v`` (M, N) are work space. Token-minor order keeps every
    inner loop contiguous over the N tokens."""
    d, N = xt.shape
    M = basis_u.shape[1]
    for k in range(M):
        for i in range(N):
            u[k, i] = 0.0
            v[k, i] = 0.0
        for b in range(d):
            bu = basis_u[b, k]
            bv = basis_v[b, k]
            for i in range(N):
                u[k, i] += bu * xt[b, i]
                v[k, i] += bv * xt[b, i]
        for i in range(N):
            uu = min(max(u[k, i], 0.0), top)
            vv = min(max(v[k, i], 0.0), top)
            den = uu + vv
            q = uu / den if den > 0.0 else 0.0
            if round32:  # the pixel float32 spins decode to, so errors are of that image
                q = float(np.float32(q))
            img[k, i] = q


@njit
def _correlation(img, target_c, target_norm):
    """Pearson correlation of ``img`` (M, N) with the centred target (M, N); NaN if either
    is constant. Two passes over the image (in cache): the mean, then the centred sums."""
    M, N = img.shape
    mean = 0.0
    for k in range(M):
        for i in range(N):
            mean += img[k, i]
    mean /= M * N
    dot = 0.0
    ss = 0.0
    for k in range(M):
        for i in range(N):
            a = img[k, i] - mean
            dot += a * target_c[k, i]
            ss += a * a
    den = math.sqrt(ss) * target_norm
    return dot / den if den > 0.0 else np.nan


@njit(parallel=True)
def decode_scores(
    x, prev, basis_u, basis_v, top, pix, round32, clean, mask, target, target_norm, flags,
    out_errors, out_corr, out_step, out_decoded, bad,
):  # fmt: skip
    """Decode every state of ``x`` and score it, images in parallel.

    Pixels are in token-minor order here: pixel k of token i (its pair is
    (s_i[2k], s_i[2k + 1])) at [k, i] of an (M, N) array, M = aC.

    Parameters
    ----------
    x, prev : ndarray, shape (P, N, d)
        States and the states of the step before (read when ``flags[2]``).
    basis_u, basis_v : ndarray, shape (d, M), float64
        The even and odd columns of c F: u_ik = x_i @ basis_u[:, k], v_ik likewise.
    top : float
        Upper clamp of u and v (1, or c for the notebook's scale).
    pix : ndarray of int64, shape (N, M)
        Flat index into the image (H W C) of token i's k-th pixel (for ``out_decoded``).
    round32 : bool
        Round decoded pixels to float32 before scoring.
    clean : ndarray, shape (P, M, N)
    mask : ndarray of bool, shape (P, M, N)
        Masked pixels (read when ``flags[0]``).
    target : ndarray, shape (M, N), float64
        The centred target image (read when ``flags[1]``), of norm ``target_norm``.
    flags : ndarray of bool, shape (4,)
        Mask, target, prev given; decoded images wanted.
    out_errors : ndarray, shape (3, P), float64
        Written: mean squared error over all pixels, sum of squared errors over the masked
        pixels, and over the visible ones.
    out_corr, out_step : ndarray, shape (P,), float64
        Written when ``flags[1]`` and ``flags[2]``.
    out_decoded : ndarray, shape (P, H W C)
        Written when ``flags[3]``.
    bad : ndarray of bool, shape (P,)
        Written: True where a spin of the image is not finite.
    """
    P, N, d = x.shape
    M = basis_u.shape[1]
    n = M * N
    for p in prange(P):
        xt = np.empty((d, N))
        u = np.empty((M, N))
        v = np.empty((M, N))
        img = np.empty((M, N))
        ok, step = _transpose(x[p], prev[p], flags[2], xt)
        bad[p] = not ok
        _decode_image(xt, basis_u, basis_v, top, round32, u, v, img)
        sum_all = 0.0
        sum_masked = 0.0
        for k in range(M):
            if flags[0]:  # two loops, each without a branch inside: both vectorise
                for i in range(N):
                    diff = img[k, i] - float(clean[p, k, i])
                    sq = diff * diff
                    sum_all += sq
                    sum_masked += sq if mask[p, k, i] else 0.0
            else:
                for i in range(N):
                    diff = img[k, i] - float(clean[p, k, i])
                    sum_all += diff * diff
        out_errors[0, p] = sum_all / n
        out_errors[1, p] = sum_masked
        out_errors[2, p] = sum_all - sum_masked
        if flags[1]:
            out_corr[p] = _correlation(img, target, target_norm)
        if flags[2]:
            out_step[p] = step
        if flags[3]:
            for i in range(N):
                for k in range(M):
                    out_decoded[p, pix[i, k]] = img[k, i]
