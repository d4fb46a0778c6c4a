"""The two-body vector-spin model: Bessel normalisation, objective, and its optimum vs Hebb."""

import math

import numpy as np
import pytest
from reference import random_system
from scipy import integrate, optimize, special

from spinsa.analysis import (
    fit_twobody,
    log_partition,
    log_sphere_area,
    mean_resultant_length,
    twobody_log_density,
    twobody_log_likelihoods,
    twobody_nll,
    twobody_nll_and_grad,
    twobody_vs_hebbian,
)


def unit(rng, *shape):
    x = rng.standard_normal(shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def hebb(xi):
    K = np.einsum("pia,pjb->ijab", xi, xi) / xi.shape[0]
    K[np.arange(xi.shape[1]), np.arange(xi.shape[1])] = 0
    return K


@pytest.mark.parametrize("d", [1, 2, 3, 4, 8, 33])
def test_log_partition_at_zero_is_the_sphere_area(d):
    area = 2 * math.pi ** (d / 2) / math.gamma(d / 2)
    assert log_sphere_area(d) == pytest.approx(math.log(area), rel=1e-14)
    np.testing.assert_allclose(log_partition([0.0, 1e-300, 1e-12], d), math.log(area), rtol=1e-12)


def test_log_partition_closed_forms():
    k = np.array([1e-6, 0.3, 1.0, 2.5, 10.0, 100.0, 700.0])
    np.testing.assert_allclose(log_partition(k, 1), np.log(2 * np.cosh(k)), rtol=1e-12)
    np.testing.assert_allclose(
        log_partition(k, 2), np.log(2 * np.pi * special.iv(0, k)), rtol=1e-12
    )
    z3 = np.log(4 * np.pi) + k + np.log(-np.expm1(-2 * k) / 2) - np.log(k)  # 4 pi sinh k / k
    np.testing.assert_allclose(log_partition(k, 3), z3, rtol=1e-12)


@pytest.mark.parametrize("d", [2, 5, 8, 32])
def test_log_partition_against_iv_and_across_the_series_switch(d):
    nu = d / 2 - 1
    k = np.linspace(0.05, 40, 400)
    expected = d / 2 * np.log(2 * np.pi) + np.log(special.iv(nu, k)) - nu * np.log(k)
    np.testing.assert_allclose(log_partition(k, d), expected, rtol=1e-12)
    edge = 2 * math.sqrt(nu + 1)  # where the series hands over to ive
    a, b = log_partition([edge * (1 - 1e-12), edge * (1 + 1e-12)], d)
    assert a == pytest.approx(b, rel=1e-11)


def test_log_partition_is_stable_for_large_kappa_and_large_d():
    d = 8
    k = np.array([1e5, 1e6, 1e9, 1e12, 1e300])
    nu, mu, u = d / 2 - 1, (d - 2) ** 2, 1 / (8 * k)
    hankel = 1 - (mu - 1) * u + (mu - 1) * (mu - 9) / 2 * u**2
    asym = d / 2 * np.log(2 * np.pi) + k - 0.5 * np.log(2 * np.pi * k) - nu * np.log(k)
    out = log_partition(k, d)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, asym + np.log(hankel), rtol=1e-13)
    # 1 - A_d(kappa) ~ (d - 1) / (2 kappa) keeps its relative precision
    one_minus_A = 1 - mean_resultant_length(k[:4], d)
    np.testing.assert_allclose(one_minus_A, (d - 1) / (2 * k[:4]), rtol=2e-3)
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 30
    for d, kappa in [(1000, 10.0), (1000, 60.0), (400, 300.0), (8, 1e3), (8, 5e8), (8, 2e9)]:
        nu = d / 2 - 1
        exact = float(
            d / 2 * mp.log(2 * mp.pi) + mp.log(mp.besseli(nu, kappa)) - nu * mp.log(kappa)
        )
        assert log_partition(kappa, d) == pytest.approx(exact, rel=1e-12)
        ratio = float(mp.besseli(nu + 1, kappa) / mp.besseli(nu, kappa))
        assert mean_resultant_length(kappa, d) == pytest.approx(ratio, rel=1e-12)


@pytest.mark.parametrize("kappa", [0.0, 0.7, 5.0, 40.0])
def test_density_integrates_to_one_on_the_circle(kappa):
    h = kappa * np.array([np.cos(0.4), np.sin(0.4)])

    def p(theta):
        x = np.array([np.cos(theta), np.sin(theta)])
        return np.exp(twobody_log_density(x, h))

    total, _ = integrate.quad(p, 0, 2 * np.pi, limit=200, points=[0.4])
    assert total == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize("kappa", [0.0, 1.3, 12.0])
def test_density_integrates_to_one_on_the_two_sphere(kappa):
    direction = np.array([0.3, -0.5, 0.8])
    h = kappa * direction / np.linalg.norm(direction)
    beta = 0.5

    def p(phi, theta):
        x = np.array([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)])
        return np.exp(twobody_log_density(x, h, beta)) * np.sin(theta)

    total, _ = integrate.dblquad(p, 0, np.pi, 0, 2 * np.pi, epsabs=1e-11, epsrel=1e-9)
    assert total == pytest.approx(1.0, rel=1e-7)


def test_ising_case_sums_to_one():
    h = np.array([0.0, 0.4, 3.0, 50.0])[:, None]
    total = np.exp(twobody_log_density(np.ones_like(h), h)) + np.exp(
        twobody_log_density(-np.ones_like(h), h)
    )
    np.testing.assert_allclose(total, 1.0, rtol=1e-13)


@pytest.mark.parametrize("d", [1, 3, 8])
def test_mean_resultant_length_is_the_derivative(d):
    k = np.array([1e-3, 0.5, 2.0, 9.0, 200.0])
    eps = 1e-6 * np.maximum(k, 1)
    fd = (log_partition(k + eps, d) - log_partition(k - eps, d)) / (2 * eps)
    np.testing.assert_allclose(mean_resultant_length(k, d), fd, rtol=1e-6)
    assert mean_resultant_length(0.0, d) == 0.0
    assert mean_resultant_length(1e-8, d) == pytest.approx(1e-8 / d, rel=1e-9)


def test_objective_matches_the_densities_and_its_gradient(rng):
    xi = unit(rng, 4, 5, 3)
    _, J = random_system(rng, N=5, d=3, scale=0.7)
    beta = 1.3
    loss, grad = twobody_nll_and_grad(xi, J, beta)
    h = np.einsum("ijab,pjb->pia", J - J * np.eye(5)[:, :, None, None], xi)
    expected = -twobody_log_density(xi, h, beta).sum() / 4
    assert loss == pytest.approx(expected, rel=1e-12)
    assert twobody_nll(xi, J, beta) == pytest.approx(loss, rel=1e-12)
    assert twobody_log_likelihoods(xi, J, beta).shape == (4, 5)
    num = np.zeros_like(J)
    for idx in np.ndindex(J.shape):
        if idx[0] == idx[1]:
            continue
        e = np.zeros_like(J)
        e[idx] = 1e-6
        num[idx] = (twobody_nll(xi, J + e, beta) - twobody_nll(xi, J - e, beta)) / 2e-6
    np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(grad[2, 2], 0.0)


def test_gradient_at_zero_is_minus_hebb(rng):
    xi = unit(rng, 6, 4, 3)
    _, grad = twobody_nll_and_grad(xi, np.zeros((4, 4, 3, 3)), beta=2.0)
    np.testing.assert_allclose(grad, -2.0 * hebb(xi), atol=1e-14)


def test_objective_is_convex(rng):
    xi = unit(rng, 5, 4, 3)
    for _ in range(10):
        _, A = random_system(rng, N=4, d=3, scale=3.0)
        _, B = random_system(rng, N=4, d=3, scale=3.0)
        t = rng.random()
        mid = twobody_nll(xi, t * A + (1 - t) * B)
        assert mid <= t * twobody_nll(xi, A) + (1 - t) * twobody_nll(xi, B) + 1e-12


def test_one_pattern_optimum_points_along_hebb(rng):
    N, d, beta, l2 = 6, 3, 1.0, 0.5
    xi = unit(rng, 1, N, d)
    fit = fit_twobody(xi, beta, l2=l2)
    H = hebb(xi)
    cos = np.vdot(fit.J, H) / np.linalg.norm(fit.J) / np.linalg.norm(H)
    assert cos == pytest.approx(1.0, abs=1e-8)
    # J* = c H with l2 c = beta (1 - A_d(beta c (N - 1)))
    c_exact = optimize.brentq(
        lambda c: l2 * c - beta * (1 - mean_resultant_length(beta * c * (N - 1), d)), 1e-9, 100
    )
    c_fit = np.vdot(fit.J, H) / np.vdot(H, H)
    assert c_fit == pytest.approx(c_exact, rel=1e-6)
    assert fit.converged and fit.grad_norm < 1e-6
    fixed = fit_twobody(xi, beta, norm=2.0)
    assert np.linalg.norm(fixed.J) == pytest.approx(2.0)
    assert np.vdot(fixed.J, H) / 2.0 / np.linalg.norm(H) == pytest.approx(1.0, abs=1e-6)


def test_vs_hebbian_as_p_grows(rng):
    xi = unit(rng, 12, 5, 3)
    res = twobody_vs_hebbian(xi, [1, 3, 12], l2=0.5)
    assert res.cosine[0] == pytest.approx(1.0, abs=1e-7)
    assert np.all(res.loss_fit <= res.loss_hebbian + 1e-9)
    assert res.cosine[-1] < 1.0 - 1e-3
    assert res.converged.all()


def test_bad_arguments(rng):
    xi = unit(rng, 2, 3, 2)
    with pytest.raises(ValueError, match="exactly one"):
        fit_twobody(xi)
    with pytest.raises(ValueError, match="exactly one"):
        fit_twobody(xi, l2=1.0, norm=1.0)
    with pytest.raises(ValueError, match="backend"):
        fit_twobody(xi, l2=1.0, backend="adam")
    with pytest.raises(ValueError, match="kappa"):
        log_partition(-1.0, 3)
    with pytest.raises(ValueError, match="n_patterns"):
        twobody_vs_hebbian(xi, [5], l2=1.0)
