"""Couplings J of shape (N, N, d, d): random, Hebbian, lattice, and their norms.

Every function here returns couplings whose diagonal blocks J[i, i] are exactly zero
(a token does not couple to itself: docs/model.md, 'Spins and couplings').
"""

from __future__ import annotations

import numpy as np

from spinsa._checks import (
    check_count,
    check_couplings,
    check_positive,
    check_result,
    check_spins,
)


def zero_diagonal(J: np.ndarray) -> np.ndarray:
    """Set the diagonal blocks J[i, i] to zero, in place; returns J."""
    n = J.shape[0]
    J[np.arange(n), np.arange(n)] = 0
    return J


def random_couplings(N, d, scale=1.0, seed=0, dtype=np.float32) -> np.ndarray:
    """Gaussian couplings J_ij^{ab} ~ N(0, scale^2 / d), zero diagonal blocks.

    With unit spins the scores x_i . J_ij x_j then have variance about scale^2 / d.

    Parameters
    ----------
    N : int
        Number of tokens, >= 2.
    d : int
        Spin dimension, >= 1.
    scale : float
        Standard deviation of the entries times sqrt(d), > 0.
    seed : int or numpy.random.Generator
    dtype : float32 or float64

    Returns
    -------
    ndarray, shape (N, N, d, d)
    """
    N = check_count(N, "N", minimum=2)
    d = check_count(d, "d", minimum=1)
    scale = check_positive(scale, "scale")
    rng = np.random.default_rng(seed)
    J = rng.standard_normal((N, N, d, d)) * (scale / np.sqrt(d))
    with np.errstate(over="ignore"):  # refused just below, naming scale
        J = J.astype(dtype)
    check_result(J, "the random couplings", f"scale = {scale:g} overflows {np.dtype(dtype)}; "
                 "use a smaller scale")  # fmt: skip
    return zero_diagonal(J)


def hebbian_couplings(xi) -> np.ndarray:
    """Hebbian couplings J_ij = (1/P) sum_mu xi_i^mu (xi_j^mu)^T, zero diagonal blocks.

    Parameters
    ----------
    xi : array_like, shape (P, N, d)
        Patterns.

    Returns
    -------
    ndarray, shape (N, N, d, d)
        float32 unless ``xi`` is float64.
    """
    xi = check_spins(xi, "xi")
    P, N, d = xi.shape
    if P == 0:  # the mean over no patterns is undefined, not NaN
        raise ValueError("xi holds no patterns (P = 0); Hebbian couplings average over patterns")
    flat = xi.reshape(P, N * d)
    J = (flat.T @ flat).reshape(N, d, N, d).transpose(0, 2, 1, 3) / P  # BLAS, K = P
    return zero_diagonal(np.ascontiguousarray(J, dtype=xi.dtype))


def lattice_couplings(shape, d=1, coupling=1.0, periodic=True, dtype=np.float64) -> np.ndarray:
    """Nearest-neighbour couplings of a hypercubic lattice: J_ij = coupling * I_d for every
    bond i-j, zero elsewhere.

    With ``d = 1`` and the two-body model (:func:`spinsa.sampling.gibbs`,
    ``model="twobody"``) this is the Ising model at inverse temperature beta (``d = 2``: XY,
    ``d = 3``: Heisenberg), energy -coupling * sum over bonds of x_i . x_j.

    Parameters
    ----------
    shape : int or tuple of int
        Sites along each lattice direction, each >= 2 (an int is a 1-D chain); sites are
        numbered in row-major (C) order, N = prod(shape).
    d : int
        Spin dimension, >= 1.
    coupling : float
        The bond strength (negative: antiferromagnetic).
    periodic : bool
        Bonds across the boundaries (a torus). A periodic direction of length 2 bonds its
        two sites twice, so their coupling is 2 * coupling.
    dtype : float32 or float64

    Returns
    -------
    ndarray, shape (N, N, d, d)
        Symmetric (J_ji = J_ij^T), zero diagonal blocks.
    """
    dims = (shape,) if np.ndim(shape) == 0 else tuple(shape)
    if not dims:
        raise ValueError("shape must name at least one lattice direction, got ()")
    dims = tuple(check_count(n, "each lattice length in shape", minimum=2) for n in dims)
    d = check_count(d, "d", minimum=1)
    coupling = float(coupling)
    if not np.isfinite(coupling):
        raise ValueError(f"coupling must be a finite number, got {coupling!r}")
    N = int(np.prod(dims))
    A = np.zeros((N, N))
    site = np.arange(N).reshape(dims)
    for axis, n in enumerate(dims):
        a = site if periodic else np.take(site, range(n - 1), axis=axis)
        b = np.roll(site, -1, axis=axis) if periodic else np.take(site, range(1, n), axis=axis)
        np.add.at(A, (a.ravel(), b.ravel()), coupling)  # add.at: L = 2 bonds twice
        np.add.at(A, (b.ravel(), a.ravel()), coupling)
    J = A[:, :, None, None] * np.eye(d)
    return zero_diagonal(J.astype(dtype))


def frobenius_norm(J) -> float:
    """Global Frobenius norm |J| = sqrt(sum_ijab J_ij^ab^2)."""
    J = check_couplings(J)
    return float(np.sqrt(np.sum(J.astype(np.float64) ** 2)))


def row_norms(J) -> np.ndarray:
    """Frobenius norm of each row J_i = (J_i1, ..., J_iN), shape (N,)."""
    J = check_couplings(J)
    return np.sqrt(np.sum(J.astype(np.float64) ** 2, axis=(1, 2, 3)))


def set_norm(J, value) -> np.ndarray:
    """A copy of J rescaled to global Frobenius norm ``value`` (> 0)."""
    J = check_couplings(J)
    value = check_positive(value, "value")
    norm = frobenius_norm(J)
    if norm == 0:
        raise ValueError("J is zero everywhere: its norm cannot be set by rescaling")
    return (J * (value / norm)).astype(J.dtype)


def set_row_norms(J, values) -> np.ndarray:
    """A copy of J with the Frobenius norm of row i set to ``values[i]`` (or one scalar)."""
    J = check_couplings(J)
    N = J.shape[0]
    values = np.broadcast_to(np.asarray(values, dtype=np.float64), (N,))
    if not (np.isfinite(values).all() and (values > 0).all()):
        raise ValueError("values must be finite and > 0 for every row")
    norms = row_norms(J)
    if (norms == 0).any():
        rows = np.flatnonzero(norms == 0)[:5].tolist()
        raise ValueError(f"rows {rows} of J are zero: their norm cannot be set by rescaling")
    return (J * (values / norms)[:, None, None, None]).astype(J.dtype)
