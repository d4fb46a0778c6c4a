"""The Jacobian of the synchronous update and the stability of fixed points: against finite
differences, against spectra known in closed form, and against the dynamics itself."""

import numpy as np
import pytest
from reference import random_system

import spinsa
from spinsa.analysis import fixed_point_stability, update_jacobian


def numerical_jacobian(x, J, lam, gamma, norm, eps=1e-6):
    """Central differences of spinsa.step, column by column: (N d, N d)."""
    N, d = x.shape
    M = np.empty((N * d, N * d))
    for col in range(N * d):
        dx = np.zeros(N * d)
        dx[col] = eps
        up = spinsa.step((x.reshape(-1) + dx).reshape(1, N, d), J, lam, gamma, norm)
        down = spinsa.step((x.reshape(-1) - dx).reshape(1, N, d), J, lam, gamma, norm)
        M[:, col] = (up - down).reshape(-1) / (2 * eps)
    return M


@pytest.mark.parametrize("norm", ["sphere", "layernorm", "none"])
def test_jacobian_is_the_derivative_of_the_update(norm, rng):
    x, J = random_system(rng, P=1, N=5, d=3)
    M = update_jacobian(J, 1.7, x[0], gamma=0.6, norm=norm)
    assert M.shape == (15, 15)
    np.testing.assert_allclose(M, numerical_jacobian(x[0], J, 1.7, 0.6, norm), atol=2e-7)


@pytest.mark.parametrize("norm", ["sphere", "layernorm", "none"])
def test_the_residual_and_the_jacobian_share_one_softmax(norm, rng, monkeypatch):
    """fixed_point_stability computes the attention once (it ran spinsa.step for the
    residual, then the softmax again for the Jacobian); the update it takes the residual
    of is spinsa.step's."""
    from spinsa.analysis import stability

    x, J = random_system(rng, P=1, N=5, d=3)
    F, _ = stability._linearise(x[0], J, 1.7, 0.6, norm)
    np.testing.assert_allclose(F, spinsa.step(x, J, 1.7, 0.6, norm)[0], rtol=0, atol=1e-13)
    calls = []
    attention = stability._attention
    monkeypatch.setattr(stability, "_attention", lambda *a: calls.append(1) or attention(*a))
    r = fixed_point_stability(J, 1.7, x[0], gamma=0.6, norm=norm, tol=np.inf)
    assert len(calls) == 1
    assert r.residual == np.abs(F - x[0]).max()


def uniform_state(N, d, c):
    """Every spin along one unit vector u, J_ij = c I (i != j): a fixed point whose
    tangent Jacobian is known: with alpha_ij = 1/(N - 1) and v_ij = h_i = c u, dF restricted
    to the tangent planes is (gamma I + c/(N - 1) (1 1^T - I)) / (gamma + c) over sites."""
    u = np.zeros(d)
    u[0] = 1.0
    J = np.zeros((N, N, d, d))
    J[~np.eye(N, dtype=bool)] = c * np.eye(d)
    return np.tile(u, (N, 1)), J


@pytest.mark.parametrize("c", [0.8, -0.8])
def test_spectrum_of_a_uniform_state_is_known(c):
    N, d, gamma = 5, 3, 1.5
    x, J = uniform_state(N, d, c)
    r = fixed_point_stability(J, 2.0, x, gamma=gamma)
    assert r.tangent and r.eigenvalues.shape == (N * (d - 1),)
    uniform, staggered = 1.0, (gamma - c / (N - 1)) / (gamma + c)
    expected = np.sort([uniform] * (d - 1) + [staggered] * ((N - 1) * (d - 1)))
    np.testing.assert_allclose(np.sort(r.eigenvalues.real), expected, atol=1e-12)
    np.testing.assert_allclose(r.eigenvalues.imag, 0.0, atol=1e-12)
    # a global rotation costs nothing (marginal, radius 1); with c < 0 the staggered
    # modes grow: not stable either way, by the radius
    assert r.spectral_radius == pytest.approx(max(uniform, abs(staggered)))
    assert not r.stable


def test_a_hebbian_pattern_is_stable_and_perturbations_shrink_at_the_radius(rng):
    # one stored pattern: h_i = xi_i, so dF = gamma / (1 + gamma) on every tangent direction
    N, d, gamma, lam = 7, 4, 0.5, 8.0
    xi = rng.standard_normal((1, N, d))
    xi /= np.linalg.norm(xi, axis=-1, keepdims=True)
    J = spinsa.hebbian_couplings(xi).astype(np.float64)
    r = fixed_point_stability(J, lam, xi[0], gamma=gamma)
    assert r.residual < 1e-13 and r.stable
    np.testing.assert_allclose(np.abs(r.eigenvalues), gamma / (1 + gamma), rtol=1e-10)
    # the dynamics agrees: a small perturbation shrinks by the radius per step
    x = xi + 1e-6 * rng.standard_normal(xi.shape)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    traj = spinsa.run(x, J, lam, steps=6, gamma=gamma)
    dist = np.linalg.norm(traj.states[:, 0] - xi[0], axis=(1, 2))
    np.testing.assert_allclose(dist[2:] / dist[1:-1], r.spectral_radius, rtol=1e-3)


def test_tangent_spectrum_is_the_full_one_without_the_radial_zeros(rng):
    # a fixed point found by the dynamics on two stored patterns
    xi = rng.standard_normal((2, 6, 3))
    xi /= np.linalg.norm(xi, axis=-1, keepdims=True)
    J = spinsa.hebbian_couplings(xi).astype(np.float64)
    x = spinsa.run(xi[:1], J, 4.0, steps=400).final[0]
    r = fixed_point_stability(J, 4.0, x)
    full = np.linalg.eigvals(update_jacobian(J, 4.0, x))
    full = full[np.argsort(-np.abs(full))]
    np.testing.assert_allclose(np.abs(full[: r.eigenvalues.size]), np.abs(r.eigenvalues),
                               atol=1e-9)  # fmt: skip
    np.testing.assert_allclose(full[r.eigenvalues.size :], 0.0, atol=1e-9)
    ax = r.plot()
    assert len(ax.collections) == 1


def test_bad_input_says_what_to_do(rng):
    x, J = random_system(rng, P=1, N=4, d=3)
    with pytest.raises(ValueError, match="not a fixed point.*until_converged"):
        fixed_point_stability(J, 1.0, x[0])
    r = fixed_point_stability(J, 1.0, x[0], tol=np.inf)  # the map's spectrum anywhere
    assert r.residual > 0
    with pytest.raises(ValueError, match="one configuration"):
        fixed_point_stability(J, 1.0, np.concatenate([x, x]), tol=np.inf)
    with pytest.raises(ValueError, match="norm"):
        update_jacobian(J, 1.0, x[0], norm="cube")
