"""The normalised pseudo-likelihood (docs/model.md, 'The normalised pseudo-likelihood'):
the numba kernel against a plain numpy formula, its gradient against finite differences
(a zero block included), the torch backend against numba, and the fit with it."""

from math import lgamma

import numpy as np
import pytest
from scipy.special import ive, logsumexp

import spinsa
from spinsa.fit import FitConfig, normalised_loss_and_grad, pl_loss_and_grad


def unit(rng, shape):
    x = rng.standard_normal(shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def system(rng, P=5, N=4, d=3, scale=1.0):
    x = unit(rng, (P, N, d))
    J = scale * rng.standard_normal((N, N, d, d))
    J[np.arange(N), np.arange(N)] = 0
    return x, J


def log_z_scipy(kappa, d):
    """log Z_d from scipy's exponentially scaled Bessel function (a zero kappa by its limit)."""
    nu = d / 2 - 1
    kappa = np.asarray(kappa, float)
    safe = np.where(kappa > 0, kappa, 1.0)
    val = 0.5 * d * np.log(2 * np.pi) + np.log(ive(nu, safe)) + safe - nu * np.log(safe)
    area = np.log(2.0) + 0.5 * d * np.log(np.pi) - lgamma(0.5 * d)
    return np.where(kappa > 0, val, area)


def numpy_loss(x, J, lam, x_site=None):
    """The formula itself, with einsum and scipy: -(1/P) Σ_μ Σ_i log p(x_i | x_\\i)."""
    xs = x if x_site is None else x_site
    P, N, d = x.shape
    h = np.einsum("ijab,pjb->pija", J, x)
    s = lam * np.einsum("pia,pija->pij", xs, h)
    logz = log_z_scipy(lam * np.linalg.norm(h, axis=3), d)
    off = ~np.eye(N, dtype=bool)
    s = np.where(off, s, -np.inf)
    logz = np.where(off, logz, -np.inf)
    return -(logsumexp(s, axis=2) - logsumexp(logz, axis=2)).sum() / P


@pytest.mark.parametrize("d", [1, 2, 3, 5])
def test_kernel_matches_the_numpy_formula(rng, d):
    x, J = system(rng, d=d)
    for x_site in (None, unit(rng, x.shape)):
        loss, _ = normalised_loss_and_grad(x, J, 2.0, x_site=x_site)
        np.testing.assert_allclose(loss, numpy_loss(x, J, 2.0, x_site), rtol=1e-10)


def central_differences(f, J, mask, h=1e-6):
    G = np.zeros_like(J)
    for idx in zip(*np.nonzero(mask), strict=True):
        Jp, Jm = J.copy(), J.copy()
        Jp[idx] += h
        Jm[idx] -= h
        G[idx] = (f(Jp) - f(Jm)) / (2 * h)
    return G


@pytest.mark.parametrize("d", [1, 3, 4])
def test_gradient_equals_finite_differences_with_a_zero_block(rng, d):
    """≤ 1e-6 relative in float64, with the block J_01 = 0 (h_01 = 0: a uniform component)."""
    x, J = system(rng, P=4, N=4, d=d)
    J[0, 1] = 0.0
    x_site = unit(rng, x.shape)
    for xs in (None, x_site):
        _, G = normalised_loss_and_grad(x, J, 1.5, x_site=xs)
        mask = ~np.eye(4, dtype=bool)[:, :, None, None] & np.ones(J.shape, bool)
        G_fd = central_differences(lambda K: numpy_loss(x, K, 1.5, xs), J, mask)
        np.testing.assert_allclose(G, G_fd, rtol=1e-6, atol=1e-6 * np.abs(G_fd).max())
        assert np.all(G[np.arange(4), np.arange(4)] == 0)


def test_without_normaliser_it_is_the_papers_loss_on_row_matched_states(rng):
    """pl_loss_and_grad(x_site=...) reads x_i from x_site; x_site = x is the paper's loss."""
    x, J = system(rng, d=3)
    ref = pl_loss_and_grad(x, J, 2.0)
    same = pl_loss_and_grad(x, J, 2.0, x_site=x)
    np.testing.assert_allclose(same[0], ref[0], rtol=1e-10)
    np.testing.assert_allclose(same[1], ref[1], rtol=1e-9, atol=1e-12)
    # the row-i term on the state with site i replaced, computed one row at a time
    xs = unit(rng, x.shape)
    loss, G = pl_loss_and_grad(x, J, 2.0, x_site=xs)
    total, rows = 0.0, np.zeros_like(J)
    for i in range(x.shape[1]):
        mixed = x.copy()
        mixed[:, i] = xs[:, i]
        total += spinsa.fit.pl_row_loss_and_grad(mixed, J[i], 2.0, i)[0]
        rows[i] = spinsa.fit.pl_row_loss_and_grad(mixed, J[i], 2.0, i)[1]
    np.testing.assert_allclose(loss, total, rtol=1e-10)
    np.testing.assert_allclose(G, rows, rtol=1e-9, atol=1e-12)


def test_torch_backend_matches_numba(rng):
    pytest.importorskip("torch")
    from spinsa.fit.torch_backend import torch_normalised_loss_and_grad

    x, J = system(rng, P=7, N=5, d=3)
    J[1, 2] = 0.0
    loss, G = normalised_loss_and_grad(x, J, 3.0)
    loss_t, G_t = torch_normalised_loss_and_grad(x, J, 3.0, chunk_size=3)
    np.testing.assert_allclose(loss_t, loss, rtol=1e-10)
    np.testing.assert_allclose(G_t, G, rtol=1e-9, atol=1e-12)


def test_loss_is_bounded_and_the_fit_needs_no_constraint(rng):
    """Scaling J up does not drive the normalised loss to -inf as it does the paper's."""
    x, J = system(rng, P=20, N=4, d=3)
    big = [normalised_loss_and_grad(x, c * J, 2.0)[0] for c in (1, 10, 100)]
    assert big[2] > big[0] - 1.0
    assert FitConfig(loss="normalised", constraint="none").constraint == "none"
    with pytest.raises(ValueError, match="unbounded below"):
        FitConfig(constraint="none")
    with pytest.raises(ValueError, match="standardize, score_clamp"):
        FitConfig(loss="normalised", score_clamp=20.0)
    assert "loss" not in FitConfig().to_dict()  # a plain fit's stored config is unchanged
    assert FitConfig(loss="normalised").to_dict()["loss"] == "normalised"


@pytest.mark.parametrize("backend", ["lbfgs", "torch"])
def test_fit_reaches_the_minimum_of_the_normalised_loss(rng, backend):
    """Both backends end where the gradient (of loss + l2 penalty) vanishes, and agree."""
    if backend == "torch":
        pytest.importorskip("torch")
    x = unit(rng, (40, 4, 2))
    opts = dict(loss="normalised", constraint="l2", l2=0.05, lam=2.0, dtype="float64",
                init="normal", unit_spins="ignore")  # fmt: skip
    if backend == "lbfgs":
        res = spinsa.fit_pseudolikelihood(x, backend="lbfgs", gtol=1e-9, **opts)
    else:
        res = spinsa.fit_pseudolikelihood(
            x, backend="torch", device="cpu", optimizer="adam", lr=0.05, epochs=400,
            batch_size=40, **opts,
        )  # fmt: skip
    _, G = normalised_loss_and_grad(x, res.J, 2.0)
    g = G + 0.05 * res.J
    assert np.linalg.norm(g) < (1e-5 if backend == "lbfgs" else 1e-3) * max(1, np.linalg.norm(G))
