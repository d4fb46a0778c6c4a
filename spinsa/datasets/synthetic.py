"""Synthetic data made in code, with no file and no network: tests and tiny runs use them.

- :func:`random_patterns`: spins uniform on the sphere, the planted model;
- :func:`correlated_patterns`: spins correlated through a common parent;
- :func:`synthetic_digits`: seven-segment digits, image-like data with a class structure.
"""

from __future__ import annotations

import numpy as np

from spinsa._checks import check_choice, check_count, check_real


def _float_dtype(dtype) -> np.dtype:
    """``dtype`` as a numpy dtype if it is float32 or float64 (every data set's choice)."""
    return np.dtype(check_choice(np.dtype(dtype).name, "dtype", ("float32", "float64")))


def _unit_gaussian(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Gaussian vectors normalised along the last axis: uniform on S^{d-1} (float64)."""
    g = rng.standard_normal(shape)
    norm = np.linalg.norm(g, axis=-1, keepdims=True)
    while np.any(norm == 0):  # probability zero, but never divide by it
        bad = (norm == 0)[..., 0]
        g[bad] = rng.standard_normal((int(bad.sum()), shape[-1]))
        norm = np.linalg.norm(g, axis=-1, keepdims=True)
    return g / norm


def random_patterns(P: int, N: int, d: int, seed=0, *, dtype=np.float32) -> np.ndarray:
    """Random patterns of the planted model: every spin uniform on the sphere S^{d-1}.

    ``xi[mu, i] = g / |g|`` with ``g ~ N(0, I_d)``, independent for every pattern and token.

    Parameters
    ----------
    P, N, d : int
        Number of patterns (>= 1), tokens (>= 1), spin dimension (>= 1).
    seed : int, Generator or None
    dtype : float32 (default) or float64

    Returns
    -------
    ndarray, shape (P, N, d)
        Unit spins. For ``d = 1`` the spins are +-1 with equal probability.
    """
    P, N, d = (check_count(n, name, 1) for n, name in ((P, "P"), (N, "N"), (d, "d")))
    dtype = _float_dtype(dtype)
    return _unit_gaussian(np.random.default_rng(seed), (P, N, d)).astype(dtype)


def correlated_patterns(
    P: int,
    N: int,
    d: int,
    correlation: float,
    seed=0,
    *,
    dtype=np.float32,
    return_parent: bool = False,
):
    """Patterns correlated through a common parent (an "ultrametric" family of one level).

    With ``c = correlation`` in [0, 1], a parent ``p`` (N, d) and independent noises
    ``z^mu`` (N, d), all spins uniform on S^{d-1}:

        xi^mu_i = normalize( sqrt(c) p_i + sqrt(1 - c) z^mu_i )

    Before normalisation the mutual overlap ``(1/N) sum_i xi^mu_i . xi^nu_i`` (mu != nu) has
    expectation exactly ``c`` and the overlap with the parent ``sqrt(c)``; after it, both
    hold up to ``O(1/d)`` corrections (the norm ``|sqrt(c) p + sqrt(1-c) z|`` fluctuates by
    ``O(1/sqrt(d))`` around 1). ``c = 0`` gives :func:`random_patterns`; ``c = 1`` gives P
    copies of the parent. The mean mutual overlap increases with ``c``.

    Parameters
    ----------
    P, N, d : int
        Number of patterns, tokens, spin dimension (each >= 1).
    correlation : float in [0, 1]
    seed : int, Generator or None
    dtype : float32 (default) or float64
    return_parent : bool
        Also return the parent.

    Returns
    -------
    xi : ndarray, shape (P, N, d)
        Unit spins.
    parent : ndarray, shape (N, d)
        Only if ``return_parent``.
    """
    P, N, d = (check_count(n, name, 1) for n, name in ((P, "P"), (N, "N"), (d, "d")))
    dtype = _float_dtype(dtype)
    c = check_real(correlation, "correlation")
    if not 0.0 <= c <= 1.0:
        raise ValueError(f"correlation must be in [0, 1], got {correlation!r}")
    rng = np.random.default_rng(seed)
    parent = _unit_gaussian(rng, (N, d))
    noise = _unit_gaussian(rng, (P, N, d))
    mix = np.sqrt(c) * parent[None] + np.sqrt(1.0 - c) * noise
    norm = np.linalg.norm(mix, axis=-1, keepdims=True)
    # exactly antiparallel parent and noise (measure zero): fall back to the parent
    xi = np.where(norm > 0, mix / np.where(norm > 0, norm, 1.0), parent[None])
    xi = xi.astype(dtype)
    return (xi, parent.astype(dtype)) if return_parent else xi


# Seven-segment layout: corners of a unit box (x right, y down) and the segments of each digit.
_CORNERS = {"TL": (0, 0), "TR": (1, 0), "ML": (0, 0.5), "MR": (1, 0.5), "BL": (0, 1), "BR": (1, 1)}
_SEGMENTS = {
    "a": ("TL", "TR"),
    "b": ("TR", "MR"),
    "c": ("MR", "BR"),
    "d": ("BL", "BR"),
    "e": ("ML", "BL"),
    "f": ("TL", "ML"),
    "g": ("ML", "MR"),
}
_DIGIT_SEGMENTS = ("abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc",
                   "abcdefg", "abcdfg")  # fmt: skip


def synthetic_digits(
    P: int, size: int = 28, seed=0, *, dtype=np.float32
) -> tuple[np.ndarray, np.ndarray]:
    """Digit-like images with a class structure, drawn in code (no data set needed).

    Each image is a seven-segment digit 0..9 drawn as bright strokes (1) on a dark
    background (0), like MNIST, with random variations per image: box width 30-45% and
    height 50-64% of ``size``, centre shifted by up to 5%, slant of up to +-0.2, each corner
    jittered by up to 3%, stroke half-width 3.5-6.5% of ``size``, and edges softened over
    0.5-1.5 pixels. The strokes stay clear of the border. At ``size=28`` the mean intensity is
    about 0.16 (MNIST: 0.13), and a nearest-centroid classifier gets about 80% of the labels
    right (MNIST: 82%). Labels are balanced (each digit ``P // 10`` or ``P // 10 + 1`` times) in a
    seeded random order.

    Parameters
    ----------
    P : int
        Number of images (>= 1).
    size : int
        Side of the square image in pixels (>= 8); 28 as MNIST.
    seed : int, Generator or None
    dtype : float32 (default) or float64

    Returns
    -------
    images : ndarray, shape (P, size, size)
        Intensities in [0, 1].
    labels : ndarray of int64, shape (P,)
        The digit drawn, 0..9.
    """
    P = check_count(P, "P", 1)
    size = check_count(size, "size", 8)
    dtype = _float_dtype(dtype)
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(P) % 10).astype(np.int64)
    s = float(size)
    width = rng.uniform(0.30, 0.45, P) * s
    height = rng.uniform(0.50, 0.64, P) * s
    cx = s / 2 + rng.uniform(-0.05, 0.05, P) * s
    cy = s / 2 + rng.uniform(-0.05, 0.05, P) * s
    slant = rng.uniform(-0.2, 0.2, P)
    half = rng.uniform(0.035, 0.065, P) * s
    soft = rng.uniform(0.5, 1.5, P)
    jitter = rng.uniform(-0.03, 0.03, (P, len(_CORNERS), 2)) * s
    corners = {}
    for k, (name, (u, v)) in enumerate(_CORNERS.items()):
        y = cy + (v - 0.5) * height + jitter[:, k, 1]
        x = cx + (u - 0.5) * width + slant * (0.5 - v) * height + jitter[:, k, 0]
        corners[name] = np.stack([x, y], axis=1)  # (P, 2)
    has = np.array([[seg in _DIGIT_SEGMENTS[lab] for seg in _SEGMENTS] for lab in range(10)])
    grid = np.arange(size) + 0.5
    X, Y = np.meshgrid(grid, grid)  # (size, size): X column, Y row
    images = np.zeros((P, size, size), dtype=np.float64)
    block = 2048
    for start in range(0, P, block):
        sl = slice(start, min(start + block, P))
        lab = labels[sl]
        out = images[sl]
        for k, (a_name, b_name) in enumerate(_SEGMENTS.values()):
            on = has[lab, k]
            if not on.any():
                continue
            A = corners[a_name][sl][on][:, :, None, None]  # (m, 2, 1, 1)
            B = corners[b_name][sl][on][:, :, None, None]
            v = B - A
            t = ((X - A[:, 0]) * v[:, 0] + (Y - A[:, 1]) * v[:, 1]) / np.maximum(
                (v**2).sum(axis=1), 1e-12
            )
            t = np.clip(t, 0.0, 1.0)
            dist = np.hypot(X - A[:, 0] - t * v[:, 0], Y - A[:, 1] - t * v[:, 1])
            ink = np.clip(
                (half[sl][on, None, None] - dist) / soft[sl][on, None, None] + 0.5, 0.0, 1.0
            )
            out[on] = np.maximum(out[on], ink)
    return images.astype(dtype), labels
