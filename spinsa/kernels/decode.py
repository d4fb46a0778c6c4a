"""Decode spin states to pixels and score them, fused: each state is read once.

Per image p, with s_i = c F^T x_i (``basis`` = c F, shape (d, 2aC)) and each pixel's pair
(u, v) = (s_i[2k], s_i[2k + 1]) clamped to [0, top], the decoded pixel is
q = u / (u + v) (0 where u + v = 0), as :meth:`spinsa.PatchEmbedding.decode_pixels`. From
the decoded image the kernel takes, in float64:

- the mean squared error against the clean image over all pixels, and its sums over the
  masked pixels (the visible ones by difference), as :func:`spinsa.tasks.reconstruction_errors`;
- the Pearson correlation with a target image (centred ``target_c``, norm ``target_norm``);
- the mean over tokens of |x_i - prev_i|, the step size of the evaluation.

A non-finite spin component sets ``bad[p]``; the caller raises.
"""

from __future__ import annotations

import math

import numpy as np

from spinsa.kernels._numba import njit, prange


@njit
def _decode_image(x_p, basis, top, pix, round32, s, img):
    """Decoded pixels of one state x_p (N, d) into ``img`` (n_pixels,) float64; False if a
    spin component is not finite."""
    N, d = x_p.shape
    K = basis.shape[1]
    ok = True
    for i in range(N):
        for k in range(K):
            s[k] = 0.0
        for b in range(d):
            xb = float(x_p[i, b])
            if not math.isfinite(xb):
                ok = False
            for k in range(K):
                s[k] += xb * basis[b, k]
        for k in range(K // 2):
            u = min(max(s[2 * k], 0.0), top)
            v = min(max(s[2 * k + 1], 0.0), top)
            den = u + v
            q = u / den if den > 0.0 else 0.0
            if round32:  # the pixel float32 spins decode to, so errors are of that image
                q = float(np.float32(q))
            img[pix[i, k]] = q
    return ok


@njit
def _step_size(x_p, prev_p):
    """Mean over tokens of |x_i - prev_i|, in float64."""
    N, d = x_p.shape
    total = 0.0
    for i in range(N):
        acc = 0.0
        for b in range(d):
            diff = float(x_p[i, b]) - float(prev_p[i, b])
            acc += diff * diff
        total += math.sqrt(acc)
    return total / N


@njit
def _correlation(img, target_c, target_norm):
    """Pearson correlation of ``img`` with the centred target; NaN if either is constant."""
    n = img.shape[0]
    mean = 0.0
    for k in range(n):
        mean += img[k]
    mean /= n
    dot = 0.0
    ss = 0.0
    for k in range(n):
        a = img[k] - mean
        dot += a * target_c[k]
        ss += a * a
    den = math.sqrt(ss) * target_norm
    return dot / den if den > 0.0 else np.nan


@njit(parallel=True)
def decode_scores(
    x, prev, basis, top, pix, round32, clean, mask, target_c, target_norm, flags,
    out_errors, out_corr, out_step, out_decoded, bad,
):  # fmt: skip
    """Decode every state of ``x`` and score it, images in parallel.

    Parameters
    ----------
    x, prev : ndarray, shape (P, N, d)
        States and the states of the step before (read when ``flags[2]``).
    basis : ndarray, shape (d, 2aC), float64
        c F: s_i = x_i @ basis.
    top : float
        Upper clamp of u and v (1, or c for the notebook's scale).
    pix : ndarray of int64, shape (N, aC)
        Flat index into the image (H W C) of token i's k-th pixel.
    round32 : bool
        Round decoded pixels to float32 before scoring.
    clean : ndarray, shape (P, n_pixels)
    mask : ndarray of bool, shape (P, n_pixels)
        Masked pixels (read when ``flags[0]``).
    target_c : ndarray, shape (n_pixels,), float64
        The centred target image (read when ``flags[1]``), of norm ``target_norm``.
    flags : ndarray of bool, shape (4,)
        Mask, target, prev given; decoded images wanted.
    out_errors : ndarray, shape (3, P), float64
        Written: mean squared error over all pixels, sum of squared errors over the masked
        pixels, and over the visible ones.
    out_corr, out_step : ndarray, shape (P,), float64
        Written when ``flags[1]`` and ``flags[2]``.
    out_decoded : ndarray, shape (P, n_pixels)
        Written when ``flags[3]``.
    bad : ndarray of bool, shape (P,)
        Written: True where a spin of the image is not finite.
    """
    P = x.shape[0]
    n = clean.shape[1]
    K = basis.shape[1]
    for p in prange(P):
        s = np.empty(K)
        img = np.empty(n)
        bad[p] = not _decode_image(x[p], basis, top, pix, round32, s, img)
        sum_all = 0.0
        sum_masked = 0.0
        for k in range(n):
            diff = img[k] - float(clean[p, k])
            sq = diff * diff
            sum_all += sq
            if flags[0] and mask[p, k]:
                sum_masked += sq
        out_errors[0, p] = sum_all / n
        out_errors[1, p] = sum_masked
        out_errors[2, p] = sum_all - sum_masked
        if flags[1]:
            out_corr[p] = _correlation(img, target_c, target_norm)
        if flags[2]:
            out_step[p] = _step_size(x[p], prev[p])
        if flags[3]:
            for k in range(n):
                out_decoded[p, k] = img[k]
