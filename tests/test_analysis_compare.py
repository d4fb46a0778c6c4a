"""Comparison of coupling tensors: each quantity against a plain numpy formula."""

import numpy as np
import pytest
from reference import random_system

import spinsa
from spinsa.analysis import (
    AttentionEntropy,
    PairwiseCosines,
    attention_entropy,
    compare_tasks,
    coupling_spectra,
    distance_dependence,
    error_lifetimes,
    load_analysis,
    pairwise_cosines,
    pseudolikelihood_values,
    save_analysis,
)
from spinsa.tasks import mean_sem

OFF = ~np.eye(5, dtype=bool)


def matrix(J):
    """M[(i, a), (j, b)] = J[i, j, a, b] by loops."""
    N, _, d, _ = J.shape
    M = np.zeros((N * d, N * d))
    for i in range(N):
        for j in range(N):
            M[i * d : (i + 1) * d, j * d : (j + 1) * d] = J[i, j]
    return M


def numpy_attention(x, J, lam):
    s = np.einsum("pia,ijab,pjb->pij", x, J, x) * lam
    N = x.shape[1]
    s[:, np.arange(N), np.arange(N)] = -np.inf
    e = np.exp(s - s.max(axis=2, keepdims=True))
    return e / e.sum(axis=2, keepdims=True)


# ------------------------------------------------------------------------------- cosines
def test_cosine_of_a_tensor_with_itself_is_1_and_with_its_negative_minus_1(rng):
    _, J = random_system(rng, N=5, d=3)
    r = pairwise_cosines([J, J, -J], ["a", "b", "c"])
    sign = np.array([[1, 1, -1], [1, 1, -1], [-1, -1, 1]])
    np.testing.assert_allclose(r.cosine, sign, atol=1e-12)
    np.testing.assert_array_equal(r.pairs, [[0, 1], [0, 2], [1, 2]])
    for p, (a, b) in enumerate(r.pairs):
        np.testing.assert_allclose(r.pair_cosine[p][OFF], sign[a, b], atol=1e-12)
        assert np.isnan(np.diag(r.pair_cosine[p])).all()
        assert r.mean[p] == pytest.approx(sign[a, b])
        np.testing.assert_allclose(r.quantiles[p], sign[a, b], atol=1e-12)
    assert r.names == ("a", "b", "c")


def test_cosines_of_two_random_tensors_match_numpy(rng):
    _, J = random_system(rng, N=5, d=3)
    _, K = random_system(rng, N=5, d=3)
    r = pairwise_cosines([J, K])
    assert r.cosine[0, 1] == pytest.approx(np.vdot(J, K) / np.linalg.norm(J) / np.linalg.norm(K))
    a, b = J[1, 3].ravel(), K[1, 3].ravel()
    assert r.pair_cosine[0, 1, 3] == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    off = r.pair_cosine[0][OFF]
    assert r.mean[0] == pytest.approx(off.mean())
    np.testing.assert_allclose(r.quantiles[0], np.quantile(off, r.levels))
    assert r.names == ("J0", "J1")


def test_cosines_refuse_one_tensor_mismatched_shapes_and_bad_names(rng):
    _, J = random_system(rng, N=5, d=3)
    _, K = random_system(rng, N=4, d=3)
    with pytest.raises(ValueError, match="at least 2"):
        pairwise_cosines([J])
    with pytest.raises(ValueError, match=r"Js\[1\]"):
        pairwise_cosines([J, K])
    with pytest.raises(ValueError, match="distinct"):
        pairwise_cosines([J, J], ["a", "a"])
    with pytest.raises(ValueError, match="sequence"):
        pairwise_cosines(J)


# ------------------------------------------------------------------------------- spectra
def test_spectra_of_a_symmetric_tensor(rng):
    _, J = random_system(rng, N=4, d=3)
    S = (J + J.transpose(1, 0, 3, 2)) / 2  # S_ji = S_ij^T: M is symmetric
    r = coupling_spectra([S, J], ["sym", "raw"])
    M = matrix(S)
    eig = np.sort(np.linalg.eigvalsh(M))[::-1]
    np.testing.assert_allclose(r.symmetric_eigenvalues[0], eig, atol=1e-10)
    np.testing.assert_allclose(np.sort(r.eigenvalues[0].real)[::-1], eig, atol=1e-10)
    np.testing.assert_allclose(r.eigenvalues[0].imag, 0.0, atol=1e-10)
    np.testing.assert_allclose(r.singular_values[0], np.sort(np.abs(eig))[::-1], atol=1e-10)
    sym_J = np.sort(np.linalg.eigvalsh((matrix(J) + matrix(J).T) / 2))[::-1]
    np.testing.assert_allclose(r.symmetric_eigenvalues[1], sym_J, atol=1e-10)
    assert r.norm[1] == pytest.approx(np.linalg.norm(J))
    assert r.stable_rank[1] == pytest.approx(
        np.linalg.norm(J) ** 2 / np.linalg.norm(matrix(J), 2) ** 2
    )
    assert r.positive_fraction[0] == pytest.approx(np.mean(eig > 0))
    # blocks: the off-diagonal ones, row-major, each by numpy's SVD
    blocks = [
        np.linalg.svd(J[i, j], compute_uv=False) for i in range(4) for j in range(4) if i != j
    ]
    np.testing.assert_allclose(r.block_singular_values[1], blocks, atol=1e-12)
    m, s, _ = mean_sem(np.array(blocks), axis=0)
    np.testing.assert_allclose(r.block_mean[1], m)
    np.testing.assert_allclose(r.block_sem[1], s)


def test_blocks_of_hebbian_couplings_of_one_pattern_have_rank_one(rng):
    xi, J = random_system(rng, P=1, N=4, d=3)
    r = coupling_spectra([spinsa.hebbian_couplings(xi), J])
    assert r.block_top_fraction[0] == pytest.approx(1.0)
    assert 1 / 3 <= r.block_top_fraction[1] < 1.0


# ------------------------------------------------------------------------------ distance
def test_distance_dependence_is_in_units_of_each_tensors_mean(rng):
    _, J = random_system(rng, N=6, d=2)
    positions = np.stack(np.divmod(np.arange(6), 3), axis=1)  # a 2 x 3 grid
    r = distance_dependence([J, 5.0 * J], positions, grid_shape=(2, 3))
    strength = np.linalg.norm(J, axis=(2, 3))
    off = ~np.eye(6, dtype=bool)
    assert r.scale[0] == pytest.approx(strength[off].mean())
    assert r.scale[1] == pytest.approx(5.0 * strength[off].mean())
    np.testing.assert_allclose(r.mean[0], r.mean[1])  # the norm divides out
    dist = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    for b, d0 in enumerate(r.bin_distance):
        at = off & np.isclose(dist, d0)
        assert r.count[b] == at.sum()
        assert r.mean[0, b] == pytest.approx(strength[at].mean() / r.scale[0])
    # every (i, j) at displacement (0, +1): pairs (0,1), (1,2), (3,4), (4,5)
    right = np.mean([strength[0, 1], strength[1, 2], strength[3, 4], strength[4, 5]])
    assert r.offset[0][1, 3] == pytest.approx(right / r.scale[0])
    assert np.isnan(r.offset[0][1, 2])


# ------------------------------------------------------------------------------- entropy
def test_entropy_of_uniform_attention_is_log_n_minus_1(rng):
    x, J = random_system(rng, P=4, N=5, d=3)
    r = attention_entropy(x, [np.zeros_like(J), J], lam=2.0, names=["zero", "J"])
    assert isinstance(r, AttentionEntropy)
    assert r.max_entropy == pytest.approx(np.log(4))
    assert r.mean[0] == pytest.approx(np.log(4))
    np.testing.assert_allclose(r.site_entropy[0], np.log(4))
    assert r.sem[0] == pytest.approx(0.0, abs=1e-12)
    assert r.mean[1] < np.log(4)


def test_entropy_matches_numpy(rng):
    x, J = random_system(rng, P=7, N=5, d=3, scale=3.0)
    a = numpy_attention(x, J, 1.5)
    with np.errstate(divide="ignore", invalid="ignore"):
        H = -np.where(a > 0, a * np.log(a), 0.0).sum(axis=2)  # (P, N)
    r = attention_entropy(x, [J], 1.5)
    m, s, _ = mean_sem(H.mean(axis=1))
    assert r.mean[0] == pytest.approx(m)
    assert r.sem[0] == pytest.approx(s)
    np.testing.assert_allclose(r.site_entropy[0], H.mean(axis=0))
    assert r.n_samples == 7 and r.lam == 1.5


def test_entropy_refuses_spins_of_another_shape(rng):
    x, _ = random_system(rng, P=2, N=4, d=3)
    _, J = random_system(rng, N=5, d=3)
    with pytest.raises(ValueError, match="N = 4"):
        attention_entropy(x, [J], 1.0)


# ----------------------------------------------------------------------- pseudo-likelihood
def test_pl_values_equal_pl_loss_and_grad(rng):
    x, J = random_system(rng, P=6, N=5, d=3)
    _, K = random_system(rng, N=5, d=3, scale=3.0)
    r = pseudolikelihood_values(x, [J, K], lam=2.0)
    for k, T in enumerate((J, K)):
        assert r.loss[k] == pytest.approx(spinsa.pl_loss_and_grad(x, T, 2.0)[0])
        scaled = T * (r.common_norm / np.linalg.norm(T))
        assert r.loss_common[k] == pytest.approx(spinsa.pl_loss_and_grad(x, scaled, 2.0)[0])
    assert r.common == "mean"
    assert r.common_norm == pytest.approx((np.linalg.norm(J) + np.linalg.norm(K)) / 2)
    assert r.loss_zero == pytest.approx(spinsa.pl_loss_and_grad(x, np.zeros_like(J), 2.0)[0])
    given = pseudolikelihood_values(x, [J, K], 2.0, common_norm=1.0, score_clamp=0.1)
    assert given.common == "given" and given.common_norm == 1.0
    unit = J / np.linalg.norm(J)
    assert given.loss_common[0] == pytest.approx(spinsa.pl_loss_and_grad(x, unit, 2.0, 0.1)[0])


# ---------------------------------------------------------------------------------- tasks
def evaluation(rng, curve, references, P=60, noise=0.002, periods=(1, 1, 2, 0)):
    """Arrays in the layout of /evaluation/<task>: per-image errors around ``curve``."""
    T1 = len(curve)
    errors = np.asarray(curve)[:, None] + noise * rng.standard_normal((T1, P))
    parts = {"all": errors, "masked": errors, "visible": errors}
    mean = {k: v.mean(axis=1) for k, v in parts.items()}
    sem = {k: v.std(axis=1, ddof=1) / np.sqrt(P) for k, v in parts.items()}
    refs = {}
    for name, level in references.items():
        e = level + noise * rng.standard_normal(P)
        refs[name] = {"all": e, "masked": e, "visible": e}
    return {
        "times": np.arange(T1),
        "errors": parts,
        "mean": mean,
        "sem": sem,
        "mean_image_corr_mean": np.zeros(T1),
        "mean_image_corr_sem": np.zeros(T1),
        "step_change": np.zeros(T1 - 1),
        "final_mean_image": rng.random((4, 4)),
        "final_coherence": rng.random(P),
        "final_nearest_corr": rng.random(P),
        "final_period": np.resize(np.array(periods), P),
        "references": refs,
    }


def test_compare_tasks_against_the_references_and_each_other(rng):
    refs = {"noisy_input": 0.20, "mean_image": 0.10}
    good = evaluation(rng, [0.20, 0.05, 0.04, 0.12], refs)  # well below 0.10: beats it
    close = evaluation(rng, [0.20, 0.11, 0.0999, 0.13], refs)  # within the errors: does not
    old = evaluation(rng, [0.20, 0.15, 0.14, 0.16], refs)
    del old["final_nearest_corr"], old["final_period"]  # a file written before they existed
    r = compare_tasks("denoise", [good, close, old], ["good", "close", "old"], paired=True)
    assert r.references == ("noisy_input", "mean_image")
    assert r.best_reference == ("mean_image",) * 3
    np.testing.assert_array_equal(r.best_t, [2, 2, 2])
    np.testing.assert_array_equal(r.beats, [True, False, False])
    assert r.z[0] > 3 and r.z[1] < 3
    e = good["errors"]["all"][2]
    ref = good["references"]["mean_image"]["all"]
    assert r.best_error[0] == pytest.approx(e.mean())
    z = (ref.mean() - e.mean()) / np.sqrt(e.var(ddof=1) / 60 + ref.var(ddof=1) / 60)
    assert r.z[0] == pytest.approx(z)
    # lifetimes below the best reference, image by image
    life = error_lifetimes(good["errors"]["all"], good["times"], ref)
    assert r.lifetime_mean[0] == pytest.approx(life.lifetime.mean())
    assert r.lifetime_mean[0] == pytest.approx(2.0)  # below at t = 1, 2; above at t = 3
    assert r.fraction_censored[0] == 0.0  # (below the noisy input's error to the end)
    # attractors: as stored, NaN where the file lacks them
    assert r.coherence_mean[0] == pytest.approx(good["final_coherence"].mean())
    assert r.fraction_fixed_point[0] == pytest.approx(0.5)
    assert r.fraction_two_cycle[0] == pytest.approx(0.25)
    assert np.isnan(r.nearest_corr_mean[2]) and np.isnan(r.fraction_fixed_point[2])
    # paired: image by image at each model's best t
    d = close["errors"]["all"][2] - good["errors"]["all"][2]
    m, s, _ = mean_sem(d)
    assert r.paired_difference[0, 1] == pytest.approx(m)
    assert r.paired_z[0, 1] == pytest.approx(m / s)
    assert r.paired_z[1, 0] == pytest.approx(-m / s)
    assert np.isnan(np.diag(r.paired_z)).all()
    unpaired = compare_tasks("denoise", [good, close], paired=False)
    assert np.isnan(unpaired.paired_z).all()


def test_masked_task_counts_from_t_1(rng):
    refs = {"masked_input": 0.30, "mean_fill": 0.2}
    # t = 0 is the masked input: its error is the lowest, but not a prediction
    a = evaluation(rng, [0.01, 0.10, 0.15], refs)
    r = compare_tasks("masked", [a])
    assert r.best_t[0] == 1
    # below 0.2 at t = 1, 2 and to the end: censored, a lower bound of t = 2 - 1
    assert r.lifetime_mean[0] == pytest.approx(1.0)
    assert r.fraction_censored[0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="task"):
        compare_tasks("forecast", [a])


def test_results_round_trip_through_hdf5(rng, tmp_path):
    from spinsa import io

    _, J = random_system(rng, N=5, d=3)
    r = pairwise_cosines([J, -J])
    path = io.write_file(tmp_path / "c.h5", {"x": np.zeros(1)}, kind="test")
    save_analysis(path, "cosines", r)
    back = load_analysis(path, "cosines")
    assert isinstance(back, PairwiseCosines) and back.names == r.names
    np.testing.assert_array_equal(back.pair_cosine, r.pair_cosine)
    t = compare_tasks("denoise", [evaluation(rng, [0.2, 0.1], {"mean_image": 0.15})])
    save_analysis(path, "tasks", t)
    again = load_analysis(path, "tasks")
    assert again.best_reference == t.best_reference
    np.testing.assert_array_equal(again.beats, t.beats)
