"""The von Mises-Fisher distribution on S^{d-1}: its normaliser and mean resultant length.

    p(x) = exp(kappa mu . x) / Z_d(kappa),
    Z_d(kappa) = (2 pi)^{d/2} I_{d/2-1}(kappa) / kappa^{d/2-1},
    A_d(kappa) = d log Z_d / d kappa = I_{d/2}(kappa) / I_{d/2-1}(kappa) = E[x . mu].

It is the conditional law of one spin in the two-body model, and each component of the
attention model's conditional at a temperature (docs/model.md, 'The model at a temperature').
Z_d(0) is the area of the sphere; d = 1 is the Ising case (S^0 = {-1, +1}, Z_1 = 2 cosh kappa).
The arithmetic is the numba scalars of :mod:`spinsa.kernels.vmf`, so samplers and losses
compiled with numba use the same numbers; these functions apply them to arrays.
"""

from __future__ import annotations

import math

import numpy as np

from spinsa._checks import check_count, check_finite
from spinsa.kernels import vmf as _k

__all__ = ["log_partition", "log_sphere_area", "mean_resultant_length"]


def log_sphere_area(d: int) -> float:
    """log of the area of S^{d-1}: log(2 pi^{d/2} / Gamma(d/2)).  (d = 1: log 2, two points.)"""
    d = check_count(d, "d", 1)
    return math.log(2.0) + 0.5 * d * math.log(math.pi) - math.lgamma(0.5 * d)


def _both(kappa, d: int) -> tuple[np.ndarray, np.ndarray]:
    d = check_count(d, "d", 1)
    kappa = np.asarray(kappa, dtype=np.float64)
    check_finite(kappa, "kappa")
    if np.any(kappa < 0):
        raise ValueError("kappa must be >= 0 (a concentration, beta |h|)")
    logz, mean = _k.log_partition_and_mean_array(np.ascontiguousarray(kappa).reshape(-1), d)
    return logz.reshape(kappa.shape), mean.reshape(kappa.shape)


def log_partition(kappa, d: int) -> np.ndarray:
    """log Z_d(kappa), the von Mises-Fisher normaliser on S^{d-1}.

    Parameters
    ----------
    kappa : array_like, any shape
        Concentrations >= 0.
    d : int
        Spin dimension (d = 1 gives the Ising case, Z_1 = 2 cosh kappa).

    Returns
    -------
    ndarray of float64, shape of ``kappa``
        (d/2) log(2 pi) + log I_{d/2-1}(kappa) - (d/2 - 1) log kappa; finite for every finite
        kappa >= 0, equal to :func:`log_sphere_area` at 0 and ~ kappa - ((d-1)/2) log kappa
        for large kappa.
    """
    return _both(kappa, d)[0]


def mean_resultant_length(kappa, d: int) -> np.ndarray:
    """A_d(kappa) = I_{d/2}(kappa) / I_{d/2-1}(kappa) = d log Z_d / d kappa = E[x . mu].

    Parameters
    ----------
    kappa, d
        As in :func:`log_partition`.

    Returns
    -------
    ndarray of float64, shape of ``kappa``, values in [0, 1)
        ~ kappa / d for small kappa, 1 - (d - 1) / (2 kappa) for large kappa.
    """
    return _both(kappa, d)[1]
