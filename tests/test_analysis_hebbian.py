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


def test_block_singular_values_are_numpy_block_by_block(rng):
    # one batched call over all N^2 blocks, against a loop of numpy.linalg.svd
    _, J = random_system(rng, N=6, d=3)
    blocks = coupling_spectrum(J).block_singular_values
    assert blocks.shape == (6, 6, 3)
    for i in range(6):
        for j in range(6):
            np.testing.assert_allclose(
                blocks[i, j], np.linalg.svd(J[i, j], compute_uv=False), rtol=1e-12, atol=1e-14
            )


def symmetric_couplings(rng, N, d):
    """J with J_ji = J_ij^T: a symmetric (N d, N d) matrix, as Hebbian couplings are."""
    _, J = random_system(rng, N=N, d=d)
    return (J + J.transpose(1, 0, 3, 2)) / 2


@pytest.mark.parametrize("asymmetry", [0.0, 1e-6])
def test_spectra_of_symmetric_and_nearly_symmetric_couplings_are_numpys(rng, asymmetry):
    # symmetric M takes the one-eigendecomposition path; 1e-6 off symmetry in float64 is far
    # above rounding and must take the general one (complex eigenvalues and all)
    J = symmetric_couplings(rng, 6, 3)
    J = J + asymmetry * random_system(rng, N=6, d=3)[1]
    M = coupling_matrix(J)
    sp = coupling_spectrum(J)
    ev = np.linalg.eigvals(M)
    np.testing.assert_allclose(np.sort_complex(sp.eigenvalues), np.sort_complex(ev), atol=1e-12)
    np.testing.assert_allclose(sp.singular_values, np.linalg.svd(M, compute_uv=False), atol=1e-12)
    sym = np.sort(np.linalg.eigvalsh((M + M.T) / 2))[::-1]
    np.testing.assert_allclose(sp.symmetric_eigenvalues, sym, atol=1e-12)
    assert np.all(np.diff(sp.singular_values) <= 0)


def test_float32_hebbian_couplings_take_the_symmetric_path(rng):
    from spinsa import hebbian_couplings

    xi, _ = random_system(rng, P=40, N=6, d=3, dtype=np.float32)
    K = hebbian_couplings(xi)  # float32 BLAS: symmetric up to float32 rounding at most
    assert K.dtype == np.float32
    M = coupling_matrix(K.astype(np.float64))
    sp = coupling_spectrum(K)
    assert np.all(sp.eigenvalues.imag == 0)  # real: read off the symmetric problem
    scale = np.abs(M).max()
    np.testing.assert_allclose(
        sp.singular_values, np.linalg.svd(M, compute_uv=False), atol=1e-12 * scale
    )


def test_spectra_can_be_left_out(rng):
    xi, J = random_system(rng, P=4, N=5, d=2)
    sp = coupling_spectrum(J, eigenvalues=False, blocks=False)
    assert sp.eigenvalues is None and sp.block_singular_values is None
    assert set(sp.to_arrays()) == {"singular_values", "symmetric_eigenvalues"}
    full = compare_with_hebbian(J, xi)
    bare = compare_with_hebbian(J, xi, spectra=False)
    for name in ("singular_values", "symmetric_eigenvalues"):
        for suffix in ("", "_hebbian"):
            assert getattr(bare, name + suffix) is None
            assert getattr(full, name + suffix) is not None
    np.testing.assert_array_equal(bare.pair_cosine, full.pair_cosine)
    assert bare.global_cosine == full.global_cosine
    np.testing.assert_allclose(full.singular_values, coupling_spectrum(J).singular_values)


def test_positions_may_be_the_embeddings_method():
    # emb.token_positions is a method (it takes an anchor); passing it uncalled works too,
    # and the distances do not depend on the anchor
    from spinsa import PatchEmbedding

    emb = PatchEmbedding(image_shape=(4, 6), patch=2)
    rng = np.random.default_rng(1)
    xi, J = random_system(rng, P=3, N=emb.n_tokens, d=emb.d)
    by_method = compare_with_hebbian(J, xi, positions=emb.token_positions, spectra=False)
    by_array = compare_with_hebbian(J, xi, positions=emb.token_positions("center"), spectra=False)
    np.testing.assert_allclose(by_method.distance, by_array.distance)
    assert by_method.distance[0, 1] == pytest.approx(2.0)
    sd = strength_vs_distance(J, emb.token_positions)
    np.testing.assert_allclose(sd.distance, strength_vs_distance(J, emb.token_positions()).distance)
    with pytest.raises(ValueError, match="positions"):
        compare_with_hebbian(J, xi, positions=lambda: np.zeros((2, 2)))
