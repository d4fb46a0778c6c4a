"""Training beyond the pseudo-likelihood: contrastive divergence, backprop through the
dynamics, factorised couplings (docs/model.md, 'Beyond the pseudo-likelihood')."""

import numpy as np
import pytest
from test_fit_backends import Killed, _killer, small

import spinsa
from spinsa.analysis import coupling_cosine
from spinsa.fit import FitConfig, load_fit

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

from spinsa.fit.backprop import bptt_loss_and_grad, corrupt  # noqa: E402
from spinsa.fit.parametrisation import FactorisedCouplings  # noqa: E402


# ---------------------------------------------------------------- contrastive divergence
def two_planted_patterns(N=16, d=4, seed=0):
    """Two unit patterns, orthogonal token by token, so that their Hebbian couplings hold
    both as fixed points of x <- Norm(h) exactly (no cross-talk)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((N, d))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b = rng.standard_normal((N, d))
    b -= (b * a).sum(1, keepdims=True) * a
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    return np.stack([a, b]).astype(np.float32)


@pytest.mark.parametrize(
    "opts",
    [dict(k=1), dict(k=1, persistent=True)],
    ids=["CD-1", "PCD"],
)
def test_cd_with_the_dynamics_recovers_a_planted_hebbian_model(opts):
    """The deterministic-dynamics chain (chain="dynamics"): from J = 0 with γ = 0 the first
    step is along the Hebbian couplings, and the planted
    states are fixed points of every J of that direction. (CD-k with k > 1 does not pass
    here: the synchronous dynamics reaches 2-cycles, and the fit alternates between two
    couplings of cosines about 0.98 and 0.78 with the planted ones; docs/training-methods.)"""
    patterns = two_planted_patterns()
    N, d = patterns.shape[1:]
    xi = patterns[np.arange(64) % 2]  # the planted states, 32 copies each: full batches
    planted = spinsa.hebbian_couplings(patterns)
    res = spinsa.fit_pseudolikelihood(
        xi, np.zeros((N, N, d, d), np.float32), backend="torch", method="cd", lam=1.0,
        chain="dynamics", gamma=0.0, constraint="l2", l2=1e-3, optimizer="sgd", momentum=0.0,
        lr=1.0,
        epochs=60, batch_size=64, device="cpu", **opts,
    )  # fmt: skip
    assert coupling_cosine(res.J, planted) >= 0.95
    # both patterns are attractors of the fitted couplings at the planted strength: noisy
    # starts fall back onto them, and they stay
    J = (res.J * (np.linalg.norm(planted) / np.linalg.norm(res.J))).astype(np.float32)
    rng = np.random.default_rng(1)
    x0 = np.repeat(patterns, 20, axis=0)
    x0 += 0.2 * rng.standard_normal(x0.shape).astype(np.float32)
    x0 /= np.linalg.norm(x0, axis=2, keepdims=True)
    final = spinsa.run(np.concatenate([x0, patterns]), J, 1.0, 100, gamma=0.0).states[-1]
    targets = np.concatenate([np.repeat(patterns, 20, axis=0), patterns])
    overlaps = (final * targets).sum(axis=2).mean(axis=1)
    assert overlaps.min() >= 0.95, overlaps


def test_cd_gradient_is_the_difference_of_two_closed_forms(rng):
    """One SGD step of CD-k from J0 moves J by -lr (G(data) - G(k steps later))."""
    xi = small(rng, P=8)
    N, d = xi.shape[1:]
    J0 = spinsa.random_couplings(N, d, seed=2)
    res = spinsa.fit_pseudolikelihood(
        xi, J0, backend="torch", method="cd", chain="dynamics", k=2, lam=2.0, constraint="l2",
        l2=1e-9,
        optimizer="sgd", momentum=0.0, lr=0.1, epochs=1, batch_size=8, device="cpu",
    )  # fmt: skip
    model = spinsa.run(xi, J0, 2.0, 2, gamma=1.0).states[-1]
    G = spinsa.pl_loss_and_grad(xi, J0, 2.0)[1] - spinsa.pl_loss_and_grad(model, J0, 2.0)[1]
    np.testing.assert_allclose(res.J, J0 - 0.1 * (G + 1e-9 * J0), atol=2e-6)


# ---------------------------------------------------------------- backprop through dynamics
@pytest.mark.parametrize("task", ["masked", "denoise"])
def test_bptt_gradient_equals_finite_differences(task):
    rng = np.random.default_rng(3)
    P, N, d = 3, 5, 3
    clean = rng.standard_normal((P, N, d))
    clean /= np.linalg.norm(clean, axis=2, keepdims=True)
    x0 = corrupt(clean, task, rng, 0.4, 0.3)
    J = rng.standard_normal((N, N, d, d)) / d
    J[np.arange(N), np.arange(N)] = 0
    loss, grad = bptt_loss_and_grad(x0, clean, J, 2.0, tau=4, gamma=0.5)
    assert grad.dtype == np.float64
    h = 1e-6
    fd = np.zeros_like(J)
    for idx in np.ndindex(J.shape):
        if idx[0] == idx[1]:
            continue
        up, down = J.copy(), J.copy()
        up[idx] += h
        down[idx] -= h
        f = lambda K: bptt_loss_and_grad(x0, clean, K, 2.0, tau=4, gamma=0.5)[0]  # noqa: E731
        fd[idx] = (f(up) - f(down)) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=0, atol=1e-6)
    # checkpointing recomputes; it changes nothing
    np.testing.assert_array_equal(
        grad, bptt_loss_and_grad(x0, clean, J, 2.0, tau=4, gamma=0.5, checkpoint=False)[1]
    )


def test_bptt_fit_lowers_the_task_error(rng):
    xi = small(rng, P=24, N=8, d=3)
    res = spinsa.fit_pseudolikelihood(
        xi, backend="torch", method="bptt", lam=1.0, epochs=6, batch_size=8, lr=0.05,
        device="cpu", constraint="global", norm=4.0,
    )  # fmt: skip
    assert res.J.shape == (8, 8, 3, 3)
    np.testing.assert_allclose(np.linalg.norm(res.J), 4.0, rtol=1e-5)
    first, last = res.step_loss[:3].mean(), res.step_loss[-3:].mean()
    assert last < first


# ---------------------------------------------------------------- factorised couplings
def test_factor_gradients_are_the_chain_rule(rng):
    N, d, H, r = 4, 3, 2, 2
    K = torch.from_numpy(rng.standard_normal((N, N, H, r, d)))
    Q = torch.from_numpy(rng.standard_normal((N, N, H, r, d)))
    G = torch.from_numpy(rng.standard_normal((N, N, d, d)))
    params = FactorisedCouplings(torch, K, Q, N)
    J = params.couplings()
    expected = np.einsum("ijhca,ijhcb->ijab", K.numpy(), Q.numpy())
    expected[np.arange(N), np.arange(N)] = 0
    np.testing.assert_allclose(J.numpy(), expected, atol=1e-12)
    Ka, Qa = K.clone().requires_grad_(), Q.clone().requires_grad_()
    Ja = torch.einsum("ijhca,ijhcb->ijab", Ka, Qa) * (~torch.eye(N, dtype=bool))[..., None, None]
    (Ja * G).sum().backward()
    params.set_grad(G * (~torch.eye(N, dtype=bool))[..., None, None], project=None)
    np.testing.assert_allclose(K.grad.numpy(), Ka.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(Q.grad.numpy(), Qa.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("couplings", ["factorised", "shared"])
def test_factorised_fit_keeps_its_form_and_norm(rng, tmp_path, couplings):
    xi = small(rng, P=20, N=6, d=4)
    res = spinsa.fit_pseudolikelihood(
        xi, backend="torch", couplings=couplings, heads=2, rank=1, epochs=3, batch_size=5,
        lr=0.02, device="cpu", norm=3.0,
    )  # fmt: skip
    J = res.J.astype(np.float64)
    N = J.shape[0]
    np.testing.assert_allclose(np.linalg.norm(J), 3.0, rtol=1e-5)
    assert res.epoch_loss[-1] < res.epoch_loss[0]
    off = ~np.eye(N, dtype=bool)
    assert np.all(J[~off] == 0)
    ranks = [np.linalg.matrix_rank(J[i, j], tol=1e-5) for i, j in zip(*np.nonzero(off))]
    assert max(ranks) <= 2  # two heads of rank 1
    if couplings == "shared":  # one block for every pair
        np.testing.assert_allclose(J[off], np.broadcast_to(J[0, 1], J[off].shape), atol=1e-6)
    # the factors are kept, and J is their expansion; both survive the fit file
    K, Q = res.factors["K"], res.factors["Q"]
    assert K.shape == ((N, N, 2, 1, 4) if couplings == "factorised" else (2, 1, 4))
    expanded = (
        np.broadcast_to(np.einsum("...hca,...hcb->...ab", K, Q), J.shape) * off[..., None, None]
    )
    np.testing.assert_allclose(expanded, J, atol=1e-6)
    res.save(tmp_path / "fit.h5")
    back = load_fit(tmp_path / "fit.h5")
    np.testing.assert_array_equal(back.factors["K"], K)
    assert back.config == res.config


@pytest.mark.parametrize(
    "opts",
    [
        dict(method="cd", chain="sweep", k=2, persistent=True, optimizer="adamw", lr=0.05),
        dict(method="cd", optimizer="adamw", lr=0.05),
        dict(method="bptt", lr=0.05, tau_min=1, tau_max=3),
        dict(couplings="factorised", heads=2, rank=2, optimizer="adam", lr=0.05),
    ],
    ids=["PCD", "CD-site", "BPTT", "factorised"],
)
@pytest.mark.filterwarnings("ignore:CD with full Gibbs sweeps")
def test_kill_and_resume_gives_the_uninterrupted_result(rng, tmp_path, opts):
    xi = small(rng)
    opts = dict(backend="torch", epochs=4, batch_size=5, device="cpu", **opts)
    full = spinsa.fit_pseudolikelihood(xi, checkpoint=tmp_path / "a.h5", **opts)
    ckpt = tmp_path / "b.h5"
    with pytest.raises(Killed):
        spinsa.fit_pseudolikelihood(xi, checkpoint=ckpt, callback=_killer(7), **opts)
    resumed = spinsa.fit_pseudolikelihood(xi, checkpoint=ckpt, **opts)
    assert resumed.resumed_from > 0
    np.testing.assert_allclose(resumed.J, full.J, rtol=0, atol=1e-6)
    np.testing.assert_allclose(resumed.step_loss, full.step_loss, rtol=1e-6)


# ---------------------------------------------------------------- options
@pytest.mark.parametrize(
    "options, message",
    [
        (dict(k=3), "k is an option of method='cd'"),
        (dict(method="cd", backend="lbfgs"), "runs on the minibatch backend"),
        (dict(couplings="factorised", backend="lbfgs"), "runs on the minibatch backend"),
        (dict(method="bptt", tau_min=5, tau_max=3), "tau_max"),
        (dict(method="bptt", mask_fraction=1.5), "mask_fraction"),
        (dict(rank=2), "option of couplings="),
        (dict(couplings="shared", constraint="row"), "rows cannot have"),
        (dict(method="cd", site_sampling="one"), "site_sampling='one'"),
        (dict(method="nce"), "method"),
        (dict(method="cd", standardize=True), "standardize and score_clamp"),
        (dict(method="cd", k=2), "k and persistent are options of chain='sweep'"),
        (dict(method="cd", gamma=0.0), "gamma is an option of chain='dynamics'"),
        (dict(method="cd", chain="gibbs"), "chain"),
        (dict(chain="sweep"), "chain is an option of method='cd'"),
        (dict(method="bptt", noise_std=0.2), "noise_std is an option of task='denoise'"),
        (dict(method="bptt", task="denoise", mask_fraction=0.5), "option of task='masked'"),
    ],
)
def test_bad_method_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        FitConfig(**options)


def test_plain_configs_store_no_method_options():
    """A PL fit's stored config is what it was before the methods existed (so the hashes of
    scan points and old checkpoints stay valid); a CD fit's carries its own options."""
    plain = FitConfig().to_dict()
    assert not {"method", "k", "gamma", "couplings", "heads"} & set(plain)
    assert "chain" not in plain and "max_norm" not in plain
    cd = FitConfig(method="cd", chain="sweep", k=5).to_dict()
    assert cd["method"] == "cd" and cd["k"] == 5 and cd["chain"] == "sweep"
    assert "tau_min" not in cd
    assert FitConfig.from_dict(cd) == FitConfig(method="cd", chain="sweep", k=5)


def test_factorised_fits_refuse_what_they_cannot_use(rng):
    xi = small(rng, P=8, N=5, d=3)
    J0 = spinsa.random_couplings(5, 3, seed=0)
    with pytest.raises(ValueError, match="not from J0"):
        spinsa.fit_pseudolikelihood(xi, J0, couplings="factorised", device="cpu")
    with pytest.raises(ValueError, match="rank must be <= d = 3"):
        spinsa.fit_pseudolikelihood(xi, couplings="factorised", rank=4, device="cpu")


def test_factorised_start_matches_its_factors_and_has_no_diagonal(rng):
    """With no epoch the result is the rescaled start: J is the expansion of the factors
    returned, and the diagonal factors (which J never sees) are zero."""
    xi = small(rng, P=8, N=5, d=3)
    res = spinsa.fit_pseudolikelihood(xi, couplings="factorised", heads=2, rank=1, epochs=0,
                                      norm=2.0, device="cpu")  # fmt: skip
    K, Q = res.factors["K"], res.factors["Q"]
    np.testing.assert_allclose(np.einsum("ijhca,ijhcb->ijab", K, Q), res.J, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(res.J), 2.0, rtol=1e-5)
    assert not K[np.arange(5), np.arange(5)].any() and not Q[np.arange(5), np.arange(5)].any()
