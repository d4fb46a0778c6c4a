"""Hebbian comparison: cosines, strength vs distance, spectra."""

import numpy as np
import pytest
from reference import random_system

from spinsa.analysis import (
    HebbianComparison,
    compare_with_hebbian,
    coupling_cosine,
    coupling_matrix,
    coupling_spectrum,
    matched_hebbian,
    pair_cosines,
    pair_strengths,
    strength_vs_distance,
)


def hebb(xi):
    K = np.einsum("pia,pjb->ijab", xi, xi) / xi.shape[0]
    K[np.arange(xi.shape[1]), np.arange(xi.shape[1])] = 0
    return K


def test_pair_cosines_match_a_loop(rng):
    _, J = random_system(rng, N=5, d=3)
    _, K = random_system(rng, N=5, d=3)
    cos = pair_cosines(J, K)
    for i in range(5):
        assert np.isnan(cos[i, i])
        for j in range(5):
            if i != j:
                a, b = J[i, j].ravel(), K[i, j].ravel()
                assert cos[i, j] == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    assert coupling_cosine(J, K) == pytest.approx(
        np.vdot(J, K) / np.linalg.norm(J) / np.linalg.norm(K)
    )
    np.testing.assert_allclose(pair_cosines(J, 2 * J)[~np.eye(5, dtype=bool)], 1.0)
    np.testing.assert_allclose(pair_strengths(J), np.linalg.norm(J, axis=(2, 3)))


def test_matched_hebbian_has_the_norm_and_direction(rng):
    xi, J = random_system(rng, P=4, N=6, d=3)
    K = matched_hebbian(xi, J)
    assert np.linalg.norm(K) == pytest.approx(np.linalg.norm(J))
    assert coupling_cosine(K, hebb(xi)) == pytest.approx(1.0)
    R = matched_hebbian(xi, J, match="rows")
    np.testing.assert_allclose(
        np.linalg.norm(R.reshape(6, -1), axis=1), np.linalg.norm(J.reshape(6, -1), axis=1)
    )
    np.testing.assert_allclose(pair_cosines(R, hebb(xi))[~np.eye(6, dtype=bool)], 1.0)


def test_hebbian_couplings_compared_with_themselves(rng):
    xi, _ = random_system(rng, P=3, N=5, d=2)
    pos = np.stack(np.divmod(np.arange(5), 3), axis=1)
    cmp = compare_with_hebbian(3.0 * hebb(xi), xi, positions=pos)
    assert isinstance(cmp, HebbianComparison)
    assert cmp.global_cosine == pytest.approx(1.0)
    assert cmp.mean_pair_cosine == pytest.approx(1.0)
    np.testing.assert_allclose(cmp.strength, cmp.strength_hebbian, rtol=1e-10)
    np.testing.assert_allclose(cmp.singular_values, cmp.singular_values_hebbian, rtol=1e-10)
    assert cmp.distance[0, 4] == pytest.approx(np.hypot(1, 1))


def test_strength_vs_distance_on_a_grid(rng):
    _, J = random_system(rng, N=6, d=2)
    pos = np.stack(np.divmod(np.arange(6), 3), axis=1).astype(float)  # 2 x 3 grid
    sd = strength_vs_distance(J, pos)
    S = np.linalg.norm(J, axis=(2, 3))
    D = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    off = ~np.eye(6, dtype=bool)
    assert sd.distance.shape == (30,)
    for b, dist in enumerate(sd.bin_distance):
        sel = off & np.isclose(D, dist)
        assert sd.count[b] == sel.sum()
        assert sd.mean[b] == pytest.approx(S[sel].mean())
        if sel.sum() > 1:
            assert sd.sem[b] == pytest.approx(S[sel].std(ddof=1) / np.sqrt(sel.sum()))
    np.testing.assert_allclose(sd.bin_distance, np.unique(np.round(D[off], 9)))
    binned = strength_vs_distance(J, pos, bins=2)
    assert binned.count.sum() == 30


def test_coupling_matrix_acts_like_the_field(rng):
    x, J = random_system(rng, P=1, N=4, d=3)
    M = coupling_matrix(J)
    h = np.einsum("ijab,jb->ia", J, x[0])
    np.testing.assert_allclose(M @ x[0].ravel(), h.ravel(), rtol=1e-12)


def test_spectrum(rng):
    _, J = random_system(rng, N=4, d=2)
    sp = coupling_spectrum(J)
    M = coupling_matrix(J)
    np.testing.assert_allclose(
        np.sort_complex(sp.eigenvalues), np.sort_complex(np.linalg.eigvals(M))
    )
    np.testing.assert_allclose(sp.singular_values, np.linalg.svd(M, compute_uv=False))
    np.testing.assert_allclose(
        sp.symmetric_eigenvalues, np.sort(np.linalg.eigvalsh((M + M.T) / 2))[::-1], atol=1e-12
    )
    np.testing.assert_allclose(sp.block_singular_values[0, 1], np.linalg.svd(J[0, 1])[1])
    np.testing.assert_allclose(sp.block_singular_values[2, 2], 0.0)
    assert np.all(np.diff(sp.eigenvalues.real) <= 0)


def test_bad_inputs(rng):
    xi, J = random_system(rng, N=4, d=2)
    with pytest.raises(ValueError, match="K"):
        pair_cosines(J, J[:3, :3])
    with pytest.raises(ValueError, match="positions"):
        strength_vs_distance(J, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="match"):
        matched_hebbian(xi, J, match="local")
