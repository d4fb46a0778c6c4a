"""Samplers at a temperature (spinsa.sampling): vMF draws, conditionals, chains, against exact
laws. Statistical tests use fixed seeds and thresholds far from the typical value (p > 1e-3,
|z| < 5), so that they are not flaky."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from spinsa import sampling
from spinsa.vmf import log_partition, mean_resultant_length


def unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


# ------------------------------------------------------------------ vMF
@pytest.mark.parametrize("d", [2, 3, 5, 8])
@pytest.mark.parametrize("kappa", [0.0, 0.7, 6.0, 200.0])
def test_vmf_matches_scipy(d, kappa):
    mu = unit(np.arange(1.0, d + 1.0))
    ours = sampling.sample_vmf(np.tile(mu, (4000, 1)), kappa, rng=11)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-12)
    if kappa == 0:
        theirs = stats.uniform_direction(d).rvs(4000, random_state=12)
    else:
        theirs = stats.vonmises_fisher(mu, kappa).rvs(4000, random_state=12)
    assert stats.ks_2samp(ours @ mu, theirs @ mu).pvalue > 1e-3


@pytest.mark.parametrize("d", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("kappa", [0.0, 0.3, 4.0, 50.0, 1e4, 1e12])
def test_vmf_mean_is_A_d(d, kappa):
    n = 20000
    mu = unit(np.cos(np.arange(d) + 1.0))
    w = sampling.sample_vmf(np.tile(mu, (n, 1)), kappa, rng=5) @ mu
    expected = float(mean_resultant_length(kappa, d))
    se = max(w.std(), 1e-14) / math.sqrt(n)
    assert abs(w.mean() - expected) < 5 * se + 1e-12
    # the spread about the mean, 1 - w, keeps its precision at large kappa: E[1 - w] = 1 - A_d
    if kappa >= 50 and d > 1:
        assert abs(np.mean(1 - w) / (1 - expected) - 1) < 5 * np.std(1 - w) / np.mean(1 - w) / math.sqrt(n)


def test_vmf_ising_law():
    kappa = 0.8
    x = sampling.sample_vmf(np.full((40000, 1), -1.0), kappa, rng=3)
    assert set(np.unique(x)) <= {-1.0, 1.0}
    p_minus = math.exp(kappa) / (2 * math.cosh(kappa))  # x = +mu = -1
    assert stats.binomtest(int((x == -1).sum()), len(x), p_minus).pvalue > 1e-3


def test_vmf_rejects_bad_input():
    with pytest.raises(ValueError, match="kappa must be >= 0"):
        sampling.sample_vmf(np.ones((2, 3)), -1.0)
    with pytest.raises(ValueError, match="zero row"):
        sampling.sample_vmf(np.zeros((2, 3)), 1.0)
    with pytest.raises(ValueError, match="rng must be"):
        sampling.sample_vmf(np.ones((2, 3)), 1.0, rng="seed")


# ------------------------------------------------------------------ one site's conditional
def mixture_system(d, rng, N=4, scale=1.5):
    """Spins (N, d) and couplings with J_01 = 0 (a zero block: a uniform component)."""
    x = unit(rng.standard_normal((N, d)))
    J = scale * rng.standard_normal((N, N, d, d))
    J[0, 1] = 0.0
    for i in range(N):
        J[i, i] = 0.0
    return x, J


def attention_density(points, x, J, lam, i=0):
    """Unnormalised e^{-lam e_i} = sum_{j != i} e^{lam x_i . J_ij x_j} at points (M, d)."""
    out = np.zeros(len(points))
    for j in range(x.shape[0]):
        if j != i:
            out += np.exp(lam * points @ (J[i, j] @ x[j]))
    return out


def redraw_many(x, J, lam, n, rng, model="attention"):
    xs = np.repeat(x[None], n, axis=0)
    return sampling.site_resample(xs, J, lam, np.zeros(n, dtype=int), rng=rng, model=model)


def test_site_resample_changes_only_its_site(rng):
    x = unit(rng.standard_normal((6, 5, 3)))
    J = rng.standard_normal((5, 5, 3, 3))
    sites = np.array([0, 4, 2, 2, 1, 3])
    y = sampling.site_resample(x, J, 1.3, sites, rng=2)
    changed = np.any(y != x, axis=-1)
    np.testing.assert_array_equal(changed, np.eye(5, dtype=bool)[sites])
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(y, sampling.site_resample(x, J, 1.3, sites, rng=2))


def test_mixture_sampler_d2_against_gridded_density(rng):
    x, J = mixture_system(2, rng)
    lam = 1.7
    draws = redraw_many(x, J, lam, 30000, rng=7)[:, 0]
    edges = np.linspace(-np.pi, np.pi, 41)
    fine = np.linspace(-np.pi, np.pi, 40 * 200 + 1)
    mid = 0.5 * (fine[1:] + fine[:-1])
    dens = attention_density(np.stack([np.cos(mid), np.sin(mid)], 1), x, J, lam)
    expected = dens.reshape(40, 200).sum(1)
    expected *= len(draws) / expected.sum()
    observed, _ = np.histogram(np.arctan2(draws[:, 1], draws[:, 0]), edges)
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_mixture_sampler_d3_against_gridded_density(rng):
    x, J = mixture_system(3, rng)
    lam = 1.2
    draws = redraw_many(x, J, lam, 40000, rng=8)[:, 0]
    nz, nphi, sub = 8, 10, 40  # area element dz dphi on S^2
    z = (np.arange(nz * sub) + 0.5) / (nz * sub) * 2 - 1
    phi = (np.arange(nphi * sub) + 0.5) / (nphi * sub) * 2 * np.pi - np.pi
    Z, PHI = np.meshgrid(z, phi, indexing="ij")
    R = np.sqrt(1 - Z**2)
    pts = np.stack([R * np.cos(PHI), R * np.sin(PHI), Z], -1).reshape(-1, 3)
    dens = attention_density(pts, x, J, lam).reshape(nz, sub, nphi, sub).sum((1, 3))
    expected = dens.ravel() * len(draws) / dens.sum()
    observed, _, _ = np.histogram2d(
        draws[:, 2], np.arctan2(draws[:, 1], draws[:, 0]),
        [np.linspace(-1, 1, nz + 1), np.linspace(-np.pi, np.pi, nphi + 1)],
    )
    assert stats.chisquare(observed.ravel(), expected).pvalue > 1e-3


def test_mixture_weights_use_Z_d(rng):
    """The share of the uniform component is |S^{d-1}| / sum_j Z_d(lam |h_0j|): with one other
    block huge, draws far from its mean direction come from the uniform component."""
    d, lam = 3, 1.0
    x, J = mixture_system(d, rng, N=3)
    J[0, 2] = 0.0
    J[0, 2, 0, 0] = 4.0  # h_02 = 4 x_2[0] e_0
    x[2] = [1.0, 0.0, 0.0]
    draws = redraw_many(x, J, lam, 40000, rng=9)[:, 0]
    logw = log_partition(np.array([0.0, 4.0 * lam]), d)
    p_uniform = 1 / (1 + np.exp(logw[1] - logw[0]))
    # P(w < 0): 1/2 under the uniform law; under vMF(e_0, 4) on S^2 w has density ~ e^{4 w}
    p_vmf_neg = (1 - math.exp(-4)) / (math.exp(4) - math.exp(-4))
    expected = p_uniform * 0.5 + (1 - p_uniform) * p_vmf_neg
    k = int((draws[:, 0] < 0).sum())
    assert stats.binomtest(k, len(draws), expected).pvalue > 1e-3


def test_twobody_site_is_vmf_of_the_field(rng):
    d, beta = 3, 0.9
    x, J = mixture_system(d, rng)
    h = sum(J[0, j] @ x[j] for j in range(1, 4))
    draws = redraw_many(x, J, beta, 20000, rng=4, model="twobody")[:, 0]
    mu = h / np.linalg.norm(h)
    theirs = stats.vonmises_fisher(mu, beta * np.linalg.norm(h)).rvs(20000, random_state=3)
    assert stats.ks_2samp(draws @ mu, theirs @ mu).pvalue > 1e-3


def test_site_resample_rejects_bad_sites(rng):
    x = unit(rng.standard_normal((2, 3, 2)))
    J = rng.standard_normal((3, 3, 2, 2))
    with pytest.raises(ValueError, match="sites must lie in"):
        sampling.site_resample(x, J, 1.0, [0, 3])
    with pytest.raises(ValueError, match=r"sites must be integers of shape \(2,\)"):
        sampling.site_resample(x, J, 1.0, [0])
    with pytest.raises(ValueError, match="model must be one of"):
        sampling.site_resample(x, J, 1.0, [0, 1], model="ising")
