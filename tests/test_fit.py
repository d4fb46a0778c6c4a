"""The pseudo-likelihood objective, its torch versions, the checks on the data, the config."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
from reference import pl_loss_and_grad, random_system

import spinsa
from spinsa.fit import (
    PRESETS,
    FitConfig,
    InsufficientMemoryError,
    check_patterns,
    estimate_memory,
    pl_row_loss_and_grad,
)

torch = pytest.importorskip("torch")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def numerical_grad(f, J, entries, h=1e-6):
    out = []
    for idx in entries:
        Jp, Jm = J.copy(), J.copy()
        Jp[idx] += h
        Jm[idx] -= h
        out.append((f(Jp) - f(Jm)) / (2 * h))
    return np.array(out)


# ----------------------------------------------------------------- the objective
@pytest.mark.parametrize("lam", [0.5, 5.0, 40.0])
def test_objective_and_gradient_match_numpy_reference(rng, lam):
    xi, J = random_system(rng, P=7, N=6, d=3)
    loss, grad = spinsa.pl_loss_and_grad(xi, J, lam)
    ref_loss, ref_grad = pl_loss_and_grad(xi, J, lam)
    assert isinstance(loss, float)
    assert grad.shape == J.shape and grad.dtype == np.float64
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-10)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-14)


def test_objective_float32_close_to_float64(rng):
    xi, J = random_system(rng, P=9, N=7, d=4)
    l64, g64 = spinsa.pl_loss_and_grad(xi, J, 5.0)
    l32, g32 = spinsa.pl_loss_and_grad(xi.astype(np.float32), J.astype(np.float32), 5.0)
    assert g32.dtype == np.float32
    np.testing.assert_allclose(l32, l64, rtol=1e-5)
    np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-6)


def test_gradient_matches_finite_differences(rng):
    xi, J = random_system(rng, P=5, N=5, d=3)
    lam = 3.0
    _, grad = spinsa.pl_loss_and_grad(xi, J, lam)
    entries = [tuple(rng.integers(0, s) for s in J.shape) for _ in range(12)]
    entries = [e for e in entries if e[0] != e[1]]
    num = numerical_grad(lambda Jx: spinsa.pl_loss_and_grad(xi, Jx, lam)[0], J, entries)
    np.testing.assert_allclose([grad[e] for e in entries], num, rtol=1e-6, atol=1e-9)


def test_gradient_diagonal_blocks_are_zero(rng):
    xi, J = random_system(rng, P=4, N=6, d=3)
    J[np.arange(6), np.arange(6)] = 1.0  # ignored by the objective
    loss, grad = spinsa.pl_loss_and_grad(xi, J, 2.0)
    assert np.all(grad[np.arange(6), np.arange(6)] == 0)
    J[np.arange(6), np.arange(6)] = 0.0
    assert loss == pytest.approx(spinsa.pl_loss_and_grad(xi, J, 2.0)[0], rel=1e-12)


def test_loss_at_zero_couplings_is_uniform_attention(rng):
    xi, _ = random_system(rng, P=3, N=8, d=2)
    loss, grad = spinsa.pl_loss_and_grad(xi, np.zeros((8, 8, 2, 2)), 4.0)
    assert loss == pytest.approx(-8 * np.log(7) / 4.0, rel=1e-12)
    # alpha_ij = 1/(N-1): the gradient is minus the Hebbian couplings over N - 1
    hebb = np.einsum("pia,pjb->ijab", xi, xi) / 3
    hebb[np.arange(8), np.arange(8)] = 0
    np.testing.assert_allclose(grad, -hebb / 7, rtol=1e-10, atol=1e-15)


def test_loss_is_rotation_invariant(rng):
    xi, J = random_system(rng, P=4, N=5, d=3)
    R, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    xr = np.einsum("ab,pib->pia", R, xi)
    Jr = np.einsum("ac,ijcd,bd->ijab", R, J, R)
    assert spinsa.pl_loss_and_grad(xr, Jr, 5.0)[0] == pytest.approx(
        spinsa.pl_loss_and_grad(xi, J, 5.0)[0], rel=1e-12
    )


def test_row_objective_sums_to_the_full_one(rng):
    xi, J = random_system(rng, P=6, N=5, d=3)
    loss, grad = spinsa.pl_loss_and_grad(xi, J, 5.0)
    rows = [pl_row_loss_and_grad(xi, J[i], 5.0, i) for i in range(5)]
    assert sum(r[0] for r in rows) == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(np.stack([r[1] for r in rows]), grad, rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize(
    "xi_shape, J_shape, lam, match",
    [
        ((3, 4, 2), (4, 4, 3, 3), 1.0, "N = 4 tokens of d = 2"),
        ((3, 4, 2), (5, 5, 2, 2), 1.0, "expected J.shape"),
        ((3, 4, 2), (4, 4, 2, 2), 0.0, "lam"),
        ((3, 4, 2), (4, 4, 2, 2), -1.0, "lam"),
        ((0, 4, 2), (4, 4, 2, 2), 1.0, "empty"),
        ((4, 2), (4, 4, 2, 2), 1.0, "shape"),
    ],
)
def test_objective_rejects_bad_input(xi_shape, J_shape, lam, match):
    with pytest.raises(ValueError, match=match):
        spinsa.pl_loss_and_grad(np.ones(xi_shape), np.zeros(J_shape), lam)


def test_objective_rejects_nan(rng):
    xi, J = random_system(rng, P=3, N=4, d=2)
    xi[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        spinsa.pl_loss_and_grad(xi, J, 1.0)
    xi[1, 2, 0] = 0.0
    J[0, 1, 0, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        spinsa.pl_loss_and_grad(xi, J, 1.0)


def test_row_objective_rejects_bad_site(rng):
    xi, J = random_system(rng, P=3, N=4, d=2)
    with pytest.raises(ValueError, match="site index"):
        pl_row_loss_and_grad(xi, J[0], 1.0, 4)
    with pytest.raises(ValueError, match="J_row"):
        pl_row_loss_and_grad(xi, J[0, :3], 1.0, 0)


# ----------------------------------------------------------------- torch versions
@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_torch_closed_form_matches_reference_float64(rng, chunk_size):
    from spinsa.fit.torch_backend import torch_loss_and_grad

    xi, J = random_system(rng, P=7, N=6, d=3)
    loss, grad = torch_loss_and_grad(xi, J, 5.0, chunk_size=chunk_size)
    ref_loss, ref_grad = pl_loss_and_grad(xi, J, 5.0)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-10)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-14)
    assert np.all(grad[np.arange(6), np.arange(6)] == 0)


def test_torch_and_numba_agree_in_float32(rng):
    from spinsa.fit.torch_backend import torch_loss_and_grad

    xi, J = random_system(rng, P=20, N=10, d=4, dtype=np.float32)
    loss_n, grad_n = spinsa.pl_loss_and_grad(xi, J, 5.0)
    loss_t, grad_t = torch_loss_and_grad(xi, J, 5.0, chunk_size=7)
    assert grad_t.dtype == np.float32
    np.testing.assert_allclose(loss_t, loss_n, rtol=1e-5)
    np.testing.assert_allclose(grad_t, grad_n, rtol=1e-5, atol=1e-6)


def test_torch_row_closed_form(rng):
    from spinsa.fit.torch_backend import torch_row_loss_and_grad

    xi, J = random_system(rng, P=6, N=5, d=3)
    for i in (0, 3):
        loss, grad = torch_row_loss_and_grad(xi, J[i], 5.0, i)
        ref_loss, ref_grad = pl_row_loss_and_grad(xi, J[i], 5.0, i)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-10)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-15)


def test_autograd_reference_agrees_with_closed_form(rng):
    from spinsa.fit.torch_backend import autograd_loss_and_grad, torch_loss_and_grad

    xi, J = random_system(rng, P=5, N=6, d=3)
    loss_a, grad_a = autograd_loss_and_grad(xi, J, 3.0, chunk_size=2)
    loss_c, grad_c = torch_loss_and_grad(xi, J, 3.0)
    np.testing.assert_allclose(loss_a, loss_c, rtol=1e-12)
    np.testing.assert_allclose(grad_a, grad_c, rtol=1e-10, atol=1e-14)


def test_torch_functions_accept_tensors(rng):
    from spinsa.fit.torch_backend import torch_loss_and_grad

    xi, J = random_system(rng, P=4, N=5, d=2)
    loss, grad = torch_loss_and_grad(torch.from_numpy(xi), torch.from_numpy(J), 2.0)
    assert isinstance(grad, torch.Tensor)
    np.testing.assert_allclose(
        grad.numpy(), pl_loss_and_grad(xi, J, 2.0)[1], rtol=1e-10, atol=1e-15
    )


def test_torch_missing_says_how_to_install(monkeypatch, rng):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    xi, _ = random_system(rng, P=3, N=4, d=2)
    with pytest.raises(ImportError, match=r'pip install "spinsa\[torch\]"'):
        spinsa.fit_pseudolikelihood(xi, backend="torch", epochs=1)
    from spinsa.fit.torch_backend import torch_loss_and_grad

    with pytest.raises(ImportError, match=r'pip install "spinsa\[torch\]"'):
        torch_loss_and_grad(xi, np.zeros((4, 4, 2, 2)), 1.0)


def test_cuda_requested_but_absent(rng):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    xi, _ = random_system(rng, P=3, N=4, d=2)
    with pytest.raises(ValueError, match="CUDA is not available"):
        spinsa.fit_pseudolikelihood(xi, backend="torch", device="cuda", epochs=1)


def test_import_spinsa_does_not_import_torch():
    code = (
        "import sys, spinsa; spinsa.FitConfig(); "
        "bad = [m for m in ('torch', 'scipy.optimize', 'dask', 'matplotlib') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------- patterns
def test_unit_patterns_pass_silently(rng):
    xi, _ = random_system(rng, P=3, N=4, d=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = check_patterns(xi.astype(np.float32))
    assert out.dtype == np.float32 and out.flags.c_contiguous
    assert check_patterns(xi).dtype == np.float64
    assert check_patterns(xi, dtype=np.float32).dtype == np.float32


def test_non_unit_patterns_warn_normalize_or_ignore(rng):
    xi, _ = random_system(rng, P=3, N=4, d=3, unit=False)
    with pytest.warns(UserWarning, match="not unit spins"):
        out = check_patterns(xi, "warn", dtype=np.float64)
    np.testing.assert_array_equal(out, xi)  # fitted as given
    xi[0, 1] = 0.0
    with pytest.warns(UserWarning, match="zero spins"):
        out = check_patterns(xi, "normalize", dtype=np.float64)
    norms = np.linalg.norm(out, axis=-1)
    assert norms[0, 1] == 0
    np.testing.assert_allclose(np.delete(norms.ravel(), 1), 1.0, rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_patterns(xi, "ignore")


@pytest.mark.parametrize(
    "xi, match",
    [
        (np.zeros((0, 4, 2)), "empty"),
        (np.full((2, 4, 2), np.nan), "NaN"),
        (np.ones((4, 2)), "shape"),
        (np.ones((2, 1, 2)), "at least 2 tokens"),
    ],
)
def test_bad_patterns_are_refused(xi, match):
    with pytest.raises(ValueError, match=match):
        check_patterns(xi)


# ----------------------------------------------------------------- config
def test_config_validation():
    with pytest.raises(ValueError, match="lam must be"):
        FitConfig(lam=0.0)
    with pytest.raises(ValueError, match="backend must be one of 'torch', 'lbfgs'"):
        FitConfig(backend="adam")
    with pytest.raises(ValueError, match="'adam', 'adamw', 'sgd'"):
        FitConfig(optimizer="lion")
    with pytest.raises(ValueError, match="'global', 'row', 'l2'"):
        FitConfig(constraint="sphere")
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        FitConfig(batch_size=0)
    with pytest.raises(ValueError, match="epochs"):
        FitConfig(epochs=2.5)
    with pytest.raises(ValueError, match="norm must be"):
        FitConfig(norm=-1.0)
    with pytest.raises(ValueError, match="site_sampling='one'"):
        FitConfig(backend="lbfgs", site_sampling="one")
    with pytest.raises(ValueError, match="unknown fit option"):
        FitConfig.from_preset(None, learning_rate=0.1)


def test_unknown_backend_and_preset_list_the_known_ones(rng):
    xi, _ = random_system(rng, P=3, N=4, d=2)
    with pytest.raises(ValueError, match="'torch', 'lbfgs'"):
        spinsa.fit_pseudolikelihood(xi, backend="newton")
    with pytest.raises(ValueError, match="'damico2024'"):
        spinsa.fit_pseudolikelihood(xi, preset="vaswani2017")


def test_damico2024_preset_is_the_published_recipe():
    cfg = FitConfig.from_preset("damico2024")
    assert (cfg.backend, cfg.optimizer, cfg.lr, cfg.weight_decay) == ("torch", "adamw", 5e-4, 1e-6)
    assert (cfg.batch_size, cfg.site_sampling, cfg.clip, cfg.lam) == (256, "one", 1.0, 5.0)
    assert (cfg.constraint, cfg.norm, cfg.init, cfg.project_grad) == (
        "global",
        None,
        "uniform",
        False,
    )
    # the loss sees standardised features and clamped scores; StepLR(10, 0.5)
    assert (cfg.standardize, cfg.score_clamp, cfg.lr_decay_every, cfg.lr_decay) == (
        True,
        20.0,
        10,
        0.5,
    )
    assert cfg.preset == "damico2024"
    assert FitConfig.from_preset("damico2024", lr=1e-3).lr == 1e-3
    assert set(PRESETS) == {"damico2024"}


def test_config_round_trips_through_a_dict():
    cfg = FitConfig(backend="lbfgs", constraint="row", norm=2, seed=3)
    assert cfg.norm == 2.0 and isinstance(cfg.norm, float)
    assert FitConfig(**cfg.to_dict()) == cfg


# ----------------------------------------------------------------- memory
def test_estimate_memory_scales_and_names_the_knob():
    # on a GPU the torch closed form's chunk is the knob
    small = estimate_memory(100, 16, 4, backend="torch", device="cuda", chunk_size=10)
    large = estimate_memory(100, 16, 4, backend="torch", device="cuda", chunk_size=100)
    per_sample = 4 * 16 * 16 * 4 * 4
    assert large.device_bytes - small.device_bytes == 90 * per_sample
    with pytest.raises(InsufficientMemoryError, match="chunk_size"):
        large.check(host_available=2**40, device_available=1000)
    # on the CPU the numba closed form streams the minibatch: batch_size is the knob
    small = estimate_memory(1000, 16, 4, backend="torch", device="cpu", batch_size=10)
    large = estimate_memory(1000, 16, 4, backend="torch", device="cpu", batch_size=100)
    assert large.host_bytes - small.host_bytes == 16 * 4 * 90 * 4
    assert (
        estimate_memory(100, 16, 4, backend="lbfgs", dtype="float64").host_bytes
        > estimate_memory(100, 16, 4, backend="lbfgs").host_bytes
    )
    with pytest.raises(InsufficientMemoryError, match="batch_size") as err:
        large.check(host_available=1000)
    assert isinstance(err.value, MemoryError) and isinstance(err.value, ValueError)
    assert "needs about 733.0 KiB of RAM" in str(err.value)


def test_lbfgs_memory_beyond_the_patterns_does_not_grow_with_p():
    """The full objective streams the patterns in chunks: 5,000 more patterns cost exactly
    their own bytes; the row fits keep one transposed copy of them besides."""
    data = 5000 * 16 * 4 * 4
    small, large = (estimate_memory(P, 16, 4, backend="lbfgs").host_bytes for P in (5000, 10000))
    assert large - small == data
    small, large = (
        estimate_memory(P, 16, 4, backend="lbfgs", constraint="row").host_bytes
        for P in (5000, 10000)
    )
    assert large - small == 2 * data


def test_estimate_memory_of_dynamics():
    est = estimate_memory(10, 5, 3, kind="dynamics", steps=10, record_every=5)
    states = 3 * 10 * 5 * 3 * 4  # records at t = 0, 5, 10
    expected = states + 11 * 10 * 8 + 3 * 10 * 5 * 3 * 4 + 5 * 5 * 3 * 3 * 4
    assert est.host_bytes == expected and est.device == "cpu"
    with pytest.raises(InsufficientMemoryError, match="record_every"):
        est.check(host_available=100)


def test_fit_refuses_a_configuration_that_does_not_fit(rng, monkeypatch):
    import spinsa.fit.memory as memory

    monkeypatch.setattr(memory, "available_memory", lambda device="cpu": 10_000)
    xi, _ = random_system(rng, P=50, N=8, d=3)
    with pytest.raises(InsufficientMemoryError, match="needs about"):
        spinsa.fit_pseudolikelihood(xi, backend="lbfgs")
    # the check can be switched off
    res = spinsa.fit_pseudolikelihood(xi, backend="lbfgs", max_iter=1, check_memory=False)
    assert res.n_steps == 1


# ----------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_cuda_closed_form_matches_the_cpu(rng):
    from spinsa.fit.torch_backend import torch_loss_and_grad

    xi, J = random_system(rng, P=20, N=10, d=4, dtype=np.float32)
    loss_c, grad_c = torch_loss_and_grad(xi, J, 5.0, device="cpu")
    loss_g, grad_g = torch_loss_and_grad(xi, J, 5.0, device="cuda", chunk_size=6)
    np.testing.assert_allclose(loss_g, loss_c, rtol=1e-5)
    np.testing.assert_allclose(grad_g, grad_c, rtol=1e-4, atol=1e-6)


@pytest.mark.gpu
def test_fit_runs_on_cuda(rng):
    xi, _ = random_system(rng, P=20, N=8, d=3, dtype=np.float32)
    res = spinsa.fit_pseudolikelihood(
        xi,
        backend="torch",
        device="cuda",
        epochs=3,
        batch_size=8,
        constraint="row",
        norm=1.0,
        lr=0.01,
    )
    assert res.device.startswith("cuda")
    np.testing.assert_allclose(np.linalg.norm(res.J.reshape(8, -1), axis=1), 1.0, rtol=1e-5)
    assert res.loss < res.epoch_loss[0]
