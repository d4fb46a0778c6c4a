"""The von Mises-Fisher normaliser log Z_d and A_d = d log Z_d / d kappa, against quadrature."""

import math

import numpy as np
import pytest
from scipy import integrate

from spinsa.vmf import log_partition, log_sphere_area, mean_resultant_length

KAPPAS = [0.0, 1e-12, 1e-3, 0.1, 1.0, 5.0, 29.9, 30.0, 31.0, 100.0, 700.0, 3e3, 1e4]


def log_z_by_quadrature(kappa: float, d: int) -> float:
    """log of the area-weighted integral over the polar angle, t = cos(angle):

    Z_d = |S^{d-2}| int_{-1}^{1} e^{kappa t} (1 - t^2)^{(d-3)/2} dt, with 1 - t = u / kappa so
    that the peak at t = 1 is resolved at any kappa (quad's algebraic weight takes the ends).
    """
    if d == 1:
        return math.log(2.0 * math.cosh(kappa)) if kappa < 700 else kappa
    a = 0.5 * (d - 3)
    if kappa == 0.0:
        value, _ = integrate.quad(lambda t: 1.0, -1, 1, weight="alg", wvar=(a, a))
        return log_sphere_area(d - 1) + math.log(value)
    top = 2.0 * kappa
    if top <= 80.0:
        value, _ = integrate.quad(
            lambda u: math.exp(-u), 0.0, top, weight="alg", wvar=(a, a), epsabs=0, epsrel=1e-13
        )
    else:  # e^{-u} has died out long before u = 2 kappa: the far end's weight is smooth
        value, _ = integrate.quad(
            lambda u: math.exp(-u) * (top - u) ** a,
            0.0,
            80.0,
            weight="alg",
            wvar=(a, 0.0),
            epsabs=0,
            epsrel=1e-13,
            limit=200,
        )
    return log_sphere_area(d - 1) + kappa + math.log(value) - (2 * a + 1) * math.log(kappa)


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
@pytest.mark.parametrize("d", range(1, 17))
def test_log_partition_against_quadrature(d):
    got = log_partition(KAPPAS, d)
    want = np.array([log_z_by_quadrature(k, d) for k in KAPPAS])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("d", [1, 2, 3, 8, 16, 64])
def test_mean_resultant_is_the_derivative_and_tends_to_kappa_over_d(d):
    kappa = np.array([0.5, 3.0, 29.0, 30.5, 250.0, 5e3])
    h = 1e-2 * kappa  # five-point stencil: truncation ~ h^4, rounding ~ eps |log Z| / h
    f = [log_partition(kappa + s * h, d) for s in (-2, -1, 1, 2)]
    numeric = (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h)
    np.testing.assert_allclose(mean_resultant_length(kappa, d), numeric, rtol=1e-8)
    small = np.array([1e-300, 1e-12, 1e-6])
    np.testing.assert_allclose(mean_resultant_length(small, d) / small, 1.0 / d, rtol=1e-6)
    assert mean_resultant_length(0.0, d) == 0.0


@pytest.mark.parametrize("d", [1, 2, 3, 5, 8, 40])
def test_continuous_across_the_regimes(d):
    # the series, Hankel's expansion and the closed forms meet without a jump
    nu = d / 2 - 1
    for edge in (30.0, 2 * (nu + 1) ** 2):
        a, b = log_partition([edge * (1 - 1e-12), edge * (1 + 1e-12)], d)
        assert abs(a - b) < 1e-10 * max(1.0, abs(a))


def test_bad_kappa_is_refused():
    with pytest.raises(ValueError, match="kappa must be >= 0"):
        log_partition([-1.0], 3)
    with pytest.raises(ValueError, match="kappa"):
        mean_resultant_length([np.nan], 3)
