"""The von Mises-Fisher normaliser and its derivative as numba scalars (docs/model.md, 'The
model at a temperature').

    Z_d(kappa) = (2 pi)^{d/2} I_nu(kappa) / kappa^nu,   nu = d/2 - 1,
    A_d(kappa) = d log Z_d / d kappa = I_{nu+1}(kappa) / I_nu(kappa).

Everything is written in terms of f_nu(kappa) = log(I_nu(kappa) / kappa^nu), which is finite
at kappa = 0, and of the difference f_{nu+1} - f_nu, so that A_d = kappa exp(f_{nu+1} - f_nu)
keeps full relative precision (it is never the ratio of two large numbers). Three regimes:

- kappa below the series limit: the power series
  I_nu(kappa) / kappa^nu = 2^-nu sum_k (kappa^2/4)^k / (k! Gamma(nu + k + 1)), all terms
  positive, summed with a running rescale so that it never overflows;
- kappa above :func:`hankel_from`: Hankel's large-argument expansion
  I_nu(kappa) ~ e^kappa / sqrt(2 pi kappa) sum_j (-1)^j a_j(nu) / kappa^j, stopped at its
  smallest term (below 1e-17 by the choice of the limit);
- d = 1 (nu = -1/2, Ising) and d = 3 (nu = 1/2) have closed forms, 2 cosh(kappa) and
  4 pi sinh(kappa) / kappa, used at every kappa above the series limit.

scipy.special cannot be called from numba, hence this module; :mod:`spinsa.vmf` wraps it for
arrays. tests/test_vmf.py checks log Z_d against quadrature and A_d against its derivative.
"""

from __future__ import annotations

import math

import numpy as np

from spinsa.kernels._numba import njit, prange

_LOG_2PI = math.log(2.0 * math.pi)
_TINY = 1e-17  # relative size of the last term kept in either series
_SERIES_TO = 30.0  # the power series below this kappa (and below hankel_from(nu))
_RESCALE = 1e200  # the series' running sum is rescaled past this, to stay finite


@njit(inline="always")
def hankel_from(nu):
    """The smallest kappa from which Hankel's expansion reaches 1e-17 for order nu + 1."""
    m = nu + 1.0
    return max(_SERIES_TO, 2.0 * m * m)


@njit
def _series(nu, kappa):
    """log of sum_k (kappa^2/4)^k / (k! (nu+1)_k) for orders nu and nu + 1 (both >= 0 terms).

    Returns ``(s0, s1)``, the logs of the two sums. The k-th terms peak near k ~ kappa/2; the
    loop stops once both terms fall below _TINY of their sums.
    """
    q = 0.25 * kappa * kappa
    t0 = 1.0
    t1 = 1.0
    s0 = 1.0
    s1 = 1.0
    scale = 0.0  # log of the factor both sums were divided by
    k = 0
    while True:
        k += 1
        t0 *= q / (k * (nu + k))
        t1 *= q / (k * (nu + 1.0 + k))
        s0 += t0
        s1 += t1
        if t0 < _TINY * s0 and t1 < _TINY * s1 and k > q / (nu + 1.0 + k):
            break
        if s0 > _RESCALE or s1 > _RESCALE:
            t0 /= _RESCALE
            t1 /= _RESCALE
            s0 /= _RESCALE
            s1 /= _RESCALE
            scale += math.log(_RESCALE)
    return math.log(s0) + scale, math.log(s1) + scale


@njit
def _hankel(nu, kappa):
    """log of sqrt(2 pi kappa) e^-kappa I_nu(kappa), Hankel's expansion (kappa >= hankel_from)."""
    mu = 4.0 * nu * nu
    term = 1.0
    total = 1.0
    for j in range(1, 200):
        new = term * (-(mu - (2 * j - 1) ** 2) / (8.0 * j * kappa))
        if abs(new) >= abs(term):  # the asymptotic series starts to grow: stop at its smallest
            break
        term = new
        total += term
        if abs(term) < _TINY * abs(total):
            break
    return math.log(total)


@njit
def log_bessel_pair(nu, kappa):
    """``(f, g)``: f = log(I_nu(kappa) / kappa^nu) and g = f_{nu+1}(kappa) - f_nu(kappa).

    Finite for every kappa >= 0: f(0) = -nu log 2 - log Gamma(nu + 1), g(0) = -log(2 (nu + 1)).
    ``nu`` >= -1/2 (d >= 1).
    """
    head = -nu * math.log(2.0) - math.lgamma(nu + 1.0)
    shift = -math.log(2.0) - math.log(nu + 1.0)
    if kappa < _SERIES_TO or (kappa < hankel_from(nu) and nu != -0.5 and nu != 0.5):
        s0, s1 = _series(nu, kappa)
        return head + s0, shift + s1 - s0
    logk = math.log(kappa)
    # the e^kappa / sqrt(2 pi kappa) of both orders cancels in g
    base = kappa - 0.5 * (_LOG_2PI + logk)
    if nu == -0.5:  # I_{-1/2} = sqrt(2/(pi k)) cosh k, I_{1/2} = sqrt(2/(pi k)) sinh k
        e = math.exp(-2.0 * kappa)
        f = base + math.log1p(e) + 0.5 * logk
        return f, math.log(-math.expm1(-2.0 * kappa)) - math.log1p(e) - logk
    if nu == 0.5:  # I_{3/2} / I_{1/2} = coth k - 1/k
        e = math.exp(-2.0 * kappa)
        f = base + math.log(-math.expm1(-2.0 * kappa)) - 0.5 * logk
        ratio = (1.0 + e) / (1.0 - e) - 1.0 / kappa
        return f, math.log(ratio) - logk
    h0 = _hankel(nu, kappa)
    h1 = _hankel(nu + 1.0, kappa)
    return base + h0 - nu * logk, h1 - h0 - logk


@njit
def log_partition(kappa, d):
    """log Z_d(kappa) (scalar, numba)."""
    f, _ = log_bessel_pair(0.5 * d - 1.0, kappa)
    return f + 0.5 * d * _LOG_2PI


@njit
def log_partition_and_mean(kappa, d):
    """``(log Z_d(kappa), A_d(kappa))`` in one evaluation (scalar, numba)."""
    f, g = log_bessel_pair(0.5 * d - 1.0, kappa)
    return f + 0.5 * d * _LOG_2PI, kappa * math.exp(g)


@njit(parallel=True)
def _log_partition_and_mean_into(kappa, d, logz, amean):
    for n in prange(kappa.size):
        logz[n], amean[n] = log_partition_and_mean(kappa[n], d)


def log_partition_and_mean_array(kappa, d):
    """(log Z_d, A_d) of a flat float64 array of concentrations >= 0 (no checks)."""
    logz, amean = np.empty_like(kappa), np.empty_like(kappa)
    _log_partition_and_mean_into(kappa, float(d), logz, amean)
    return logz, amean
