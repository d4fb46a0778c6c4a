"""Tests of the backprop forecasters of the sequence benchmark (RNN, transformer, S4D).

The S4D convolution is checked against its own recurrence and a numpy kernel; training runs
on a tiny AR(2) series on the CPU in a second or two per model.
"""

import dataclasses
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import spinsa.sequences.train as train_module  # noqa: E402
from spinsa._convergence import stopping_epoch  # noqa: E402
from spinsa.sequences.models import (  # noqa: E402
    MODEL_NAMES,
    S4DForecaster,
    S4DKernel,
    S4DLayer,
    make_model,
)
from spinsa.sequences.train import (  # noqa: E402
    RESUME_NEUTRAL,
    ForecasterConfig,
    load_checkpoint,
    load_forecaster,
    predict,
    train_forecaster,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ar2_windows(rng, n_train=600, n_val=200, context=16):
    """Windows of a normalised AR(2) series s_t = 1.3 s_{t-1} - 0.6 s_{t-2} + e_t.

    The best linear forecast has MSE ~ 0.2 of the series' variance (predicting 0: ~1).
    """
    T = n_train + n_val + context + 100
    e = rng.standard_normal(T)
    s = np.zeros(T)
    for t in range(2, T):
        s[t] = 1.3 * s[t - 1] - 0.6 * s[t - 2] + e[t]
    s = s[100:]  # burn-in
    s = (s - s.mean()) / s.std()
    x = np.lib.stride_tricks.sliding_window_view(s[:-1], context).astype(np.float32)
    y = s[context:].astype(np.float32)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def assert_same_weights(a, b):
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


def assert_same_result(a, b):
    assert_same_weights(a.model, b.model)
    np.testing.assert_array_equal(a.train_loss, b.train_loss)
    np.testing.assert_array_equal(a.val_loss, b.val_loss)
    assert a.convergence == b.convergence


def randomise_ssm(kernel, rng):
    """Steps and decays far from the initial ones (slow and fast modes), in place."""
    with torch.no_grad():
        shape = kernel.log_A_real.shape
        kernel.log_dt.copy_(torch.from_numpy(rng.uniform(np.log(1e-3), np.log(0.5), shape[0])))
        kernel.log_A_real.copy_(torch.from_numpy(rng.uniform(-4, 1, shape)))
        kernel.A_imag.copy_(torch.from_numpy(rng.uniform(-30, 30, shape)))


# --------------------------------------------------------------------------- S4D


def test_s4d_fft_convolution_equals_the_recurrence(rng):
    """THE TARGET: y = K * u + D u by FFT equals the recurrence (float64, to 1e-5).

    x_k = Ā x_{k-1} + B̄ u_k,  y_k = 2 Re(C x_k) + D u_k.
    """
    torch.manual_seed(0)
    kernel = S4DKernel(channels=8, state=16).double()
    u = torch.from_numpy(rng.standard_normal((3, 8, 100)))
    for randomised in (False, True):
        if randomised:
            randomise_ssm(kernel, rng)
        y_fft, y_rec = kernel(u), kernel.recurrence(u)
        assert y_fft.shape == y_rec.shape == (3, 8, 100) and y_fft.dtype == torch.float64
        np.testing.assert_allclose(y_fft.detach(), y_rec.detach(), rtol=0, atol=1e-5)

    layer = S4DLayer().double()  # default sizes: H = 64, N = 64 (32 complex modes)
    randomise_ssm(layer.kernel, rng)
    x = torch.from_numpy(rng.standard_normal((2, 96, 64)))
    np.testing.assert_allclose(layer(x).detach(), layer.recurrence(x).detach(), rtol=0, atol=1e-5)

    model = make_model("s4d", 40, seed=1).double()
    x = torch.from_numpy(rng.standard_normal((5, 40)))
    np.testing.assert_allclose(model(x).detach(), model.recurrence(x).detach(), rtol=0, atol=1e-5)

    # the float32 forward pass against the float64 recurrence
    layer32 = S4DLayer()
    x32 = torch.from_numpy(rng.standard_normal((2, 96, 64)).astype(np.float32))
    np.testing.assert_allclose(
        layer32(x32).detach(), layer32.recurrence(x32).detach(), rtol=1e-4, atol=1e-4
    )


def test_s4d_kernel_matches_numpy_formula(rng):
    torch.manual_seed(1)
    kernel = S4DKernel(channels=3, state=8).double()
    randomise_ssm(kernel, rng)
    p = {k: v.detach().numpy() for k, v in kernel.named_parameters()}
    A = -np.exp(p["log_A_real"]) + 1j * p["A_imag"]
    A_bar = np.exp(np.exp(p["log_dt"])[:, None] * A)
    B_bar = (A_bar - 1) / A
    C = p["C"][..., 0] + 1j * p["C"][..., 1]
    K = np.stack([2 * (C * B_bar * A_bar**l).sum(-1).real for l in range(30)], axis=-1)
    np.testing.assert_allclose(kernel.kernel(30).detach(), K, rtol=1e-10, atol=1e-12)


def test_s4d_lin_initialisation():
    torch.manual_seed(2)
    kernel = S4DKernel()
    A = (-torch.exp(kernel.log_A_real) + 1j * kernel.A_imag).detach()
    assert A.shape == (64, 32)
    np.testing.assert_allclose(A.real, -0.5)
    np.testing.assert_allclose(A.imag, np.pi * np.arange(32)[None].repeat(64, 0), rtol=1e-6)
    dt = torch.exp(kernel.log_dt).detach()
    assert dt.shape == (64,) and 1e-3 <= dt.min() and dt.max() <= 1e-1
    assert kernel.C.shape == (64, 32, 2) and abs(kernel.C.std().item() ** 2 - 0.5) < 0.05
    with pytest.raises(ValueError, match="state must be even"):
        S4DKernel(state=7)


# --------------------------------------------------------------------------- models


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_models_map_windows_to_values_deterministically(rng, name):
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = make_model(name, 12, seed=5)
    assert torch.equal(torch.random.get_rng_state(), before)  # the global RNG is left alone
    b, c = make_model(name, 12, seed=5), make_model(name, 12, seed=6)
    assert_same_weights(a, b)
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))
    x = torch.from_numpy(rng.standard_normal((7, 12)).astype(np.float32))
    a.eval()
    y = a(x)
    assert y.shape == (7,) and y.dtype == torch.float32
    assert torch.equal(y, a(x))
    out = predict(a, x.numpy(), batch_size=3)
    assert out.shape == (7,) and out.dtype == np.float32
    np.testing.assert_allclose(out, y.detach().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"shape \(B, 12\)"):
        a(x[:, :5])


def test_make_model_rejects_bad_arguments():
    with pytest.raises(ValueError, match="name must be one of"):
        make_model("lstm", 8)
    with pytest.raises(ValueError, match="context"):
        make_model("rnn", 0)
    assert isinstance(make_model("s4d", 4), S4DForecaster)


def test_only_the_models_module_needs_torch():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # as if torch were not installed
        import spinsa.sequences.train as t
        from spinsa._checks import MissingDependencyError
        t.ForecasterConfig(epochs=3)
        try:
            import spinsa.sequences.models
        except MissingDependencyError as err:
            assert "spinsa[torch]" in str(err)
        else:
            raise AssertionError("no error without torch")
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_training_beats_predicting_zero(rng, name):
    x_train, y_train, x_val, y_val = ar2_windows(rng)
    cfg = ForecasterConfig(epochs=4, batch_size=64, device="cpu")
    result = train_forecaster(name, x_train, y_train, x_val, y_val, cfg)
    zero = float(np.mean(y_val.astype(np.float64) ** 2))
    assert result.n_epochs == len(result.train_loss) == 4
    assert result.best_val_loss < 0.5 * zero, (result.val_loss, zero)
    assert result.best_val_loss == result.val_loss.min()
    assert not result.model.training and result.seconds > 0
    # the result holds the best epoch's weights
    mse = np.mean((predict(result.model, x_val).astype(np.float64) - y_val) ** 2)
    np.testing.assert_allclose(mse, result.best_val_loss, rtol=1e-5)


def test_early_stopping_keeps_the_best_weights(rng, tmp_path):
    # validation targets of the opposite sign: learning the series makes them worse
    x_train, y_train, x_val, y_val = ar2_windows(rng, n_train=300, n_val=100)
    cfg = ForecasterConfig(epochs=30, batch_size=32, lr=3e-3, patience=2, device="cpu")
    path = tmp_path / "early.pt"
    result = train_forecaster("s4d", x_train, y_train, x_val, -y_val, cfg, checkpoint=path)
    assert result.converged and result.convergence.max_epochs == cfg.epochs
    # it stopped at the first epoch where the rule holds, well before the cap
    stop = stopping_epoch(result.val_loss, cfg.rel_tol, cfg.patience)
    assert result.n_epochs == stop + 1 == result.convergence.epochs_used < cfg.epochs
    assert stopping_epoch(result.val_loss[:-1], cfg.rel_tol, cfg.patience) is None
    assert result.best_epoch == int(np.argmin(result.val_loss))
    mse = np.mean((predict(result.model, x_val).astype(np.float64) + y_val) ** 2)
    np.testing.assert_allclose(mse, result.best_val_loss, rtol=1e-5)
    # a finished checkpoint returns at once with the same result
    again = train_forecaster("s4d", x_train, y_train, x_val, -y_val, cfg, checkpoint=path)
    assert_same_result(again, result)
    assert_same_result(load_forecaster(path), result)


@pytest.mark.parametrize("name", ["transformer", "s4d"])
def test_kill_and_resume_give_the_uninterrupted_result(rng, tmp_path, monkeypatch, name):
    x_train, y_train, x_val, y_val = ar2_windows(rng, n_train=200, n_val=60, context=8)
    data = (x_train, y_train, x_val, y_val)
    cfg = ForecasterConfig(epochs=5, batch_size=32, device="cpu")
    torch.manual_seed(7)
    before = torch.random.get_rng_state()
    ref = train_forecaster(name, *data, cfg, checkpoint=tmp_path / "ref.pt")
    assert torch.equal(torch.random.get_rng_state(), before)  # dropout ran in a forked RNG
    assert ref.n_epochs == 5

    # stopped after epoch 2 on purpose, then resumed by a new call
    path = tmp_path / "stopped.pt"
    part = train_forecaster(name, *data, cfg, checkpoint=path, stop_after=2)
    assert part.n_epochs == 2 and load_checkpoint(path)["epoch"] == 2
    assert_same_result(train_forecaster(name, *data, cfg, checkpoint=path, progress=True), ref)

    # killed in the middle of epoch 4 (after its steps, before its checkpoint)
    path = tmp_path / "killed.pt"
    real_mse, calls = train_module._mse, []

    def dying_mse(*args, **kw):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real_mse(*args, **kw)

    monkeypatch.setattr(train_module, "_mse", dying_mse)
    with pytest.raises(KeyboardInterrupt):
        train_forecaster(name, *data, cfg, checkpoint=path)
    monkeypatch.setattr(train_module, "_mse", real_mse)
    assert load_checkpoint(path)["epoch"] == 3
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary file left behind
    assert_same_result(train_forecaster(name, *data, cfg, checkpoint=path), ref)


def test_kill_and_resume_with_an_early_stop_give_the_uninterrupted_result(
    rng, tmp_path, monkeypatch
):
    x_train, y_train, x_val, y_val = ar2_windows(rng, n_train=200, n_val=60, context=8)
    data = (x_train, y_train, x_val, y_val)
    cfg = ForecasterConfig(epochs=30, batch_size=32, lr=1e-3, patience=3, device="cpu")
    ref = train_forecaster("rnn", *data, cfg)
    assert ref.converged and 6 <= ref.n_epochs < cfg.epochs  # stopped by the rule
    # killed while validating the last epoch but one (its checkpoint not yet written)
    path = tmp_path / "killed.pt"
    real_mse, calls = train_module._mse, []

    def dying_mse(*args, **kw):
        calls.append(1)
        if len(calls) == ref.n_epochs - 1:
            raise KeyboardInterrupt
        return real_mse(*args, **kw)

    monkeypatch.setattr(train_module, "_mse", dying_mse)
    with pytest.raises(KeyboardInterrupt):
        train_forecaster("rnn", *data, cfg, checkpoint=path)
    monkeypatch.setattr(train_module, "_mse", real_mse)
    assert load_checkpoint(path)["epoch"] == ref.n_epochs - 2
    assert not load_checkpoint(path)["convergence"]["converged"]
    resumed = train_forecaster("rnn", *data, cfg, checkpoint=path)
    assert_same_result(resumed, ref)
    assert load_checkpoint(path)["convergence"] == ref.convergence.to_attrs()
    assert_same_result(load_forecaster(path), ref)


def test_checkpoint_of_another_config_or_data_is_refused(rng, tmp_path):
    x_train, y_train, x_val, y_val = ar2_windows(rng, n_train=100, n_val=40, context=8)
    data = (x_train, y_train, x_val, y_val)
    cfg = ForecasterConfig(epochs=2, batch_size=50, device="cpu")
    path = tmp_path / "c.pt"
    train_forecaster("rnn", *data, cfg, checkpoint=path, stop_after=1)
    with pytest.raises(ValueError, match="another config: lr"):
        train_forecaster("rnn", *data, cfg.replace(lr=2e-3), checkpoint=path)
    with pytest.raises(ValueError, match="another config: epochs"):
        train_forecaster("rnn", *data, cfg.replace(epochs=3), checkpoint=path)
    with pytest.raises(ValueError, match="another config: name = 'rnn' there, 's4d' now"):
        train_forecaster("s4d", *data, cfg, checkpoint=path)
    with pytest.raises(ValueError, match="other data"):
        train_forecaster("rnn", x_train, -y_train, x_val, y_val, cfg, checkpoint=path)
    with pytest.raises(ValueError, match="context = 8 there, 7 now"):
        train_forecaster("rnn", x_train[:, 1:], y_train, x_val[:, 1:], y_val, cfg, checkpoint=path)
    assert load_checkpoint(path)["epoch"] == 1  # untouched by the refusals
    # fields that do not change the numbers may differ
    assert set(RESUME_NEUTRAL) <= {f.name for f in dataclasses.fields(ForecasterConfig)}
    result = train_forecaster("rnn", *data, cfg.replace(checkpoint_every=5), checkpoint=path)
    assert result.n_epochs == 2
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable"):
        train_forecaster("rnn", *data, cfg, checkpoint=tmp_path / "junk.pt")


def test_config_and_data_validation(rng):
    for bad in (
        dict(epochs=0),
        dict(batch_size=1.5),
        dict(lr=0.0),
        dict(weight_decay=-1.0),
        dict(patience=0),
        dict(rel_tol=1.0),
        dict(rel_tol=-0.01),
        dict(seed=-1),
        dict(device="gpu"),
        dict(checkpoint_every=0),
    ):
        (field,) = bad
        with pytest.raises(ValueError, match=field):
            ForecasterConfig(**bad)
    x_train, y_train, x_val, y_val = ar2_windows(rng, n_train=20, n_val=10, context=4)
    cfg = ForecasterConfig(epochs=1, device="cpu")
    with pytest.raises(ValueError, match="name must be one of"):
        train_forecaster("gru", x_train, y_train, x_val, y_val, cfg)
    with pytest.raises(ValueError, match="x_train must have shape"):
        train_forecaster("rnn", x_train[0], y_train, x_val, y_val, cfg)
    with pytest.raises(ValueError, match="y_val must have shape"):
        train_forecaster("rnn", x_train, y_train, x_val, y_val[:-1], cfg)
    with pytest.raises(ValueError, match="x_val has windows of 3"):
        train_forecaster("rnn", x_train, y_train, x_val[:, 1:], y_val, cfg)
    bad = x_train.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="x_train contains 1 NaN"):
        train_forecaster("rnn", bad, y_train, x_val, y_val, cfg)
    with pytest.raises(ValueError, match="config must be a ForecasterConfig"):
        train_forecaster("rnn", x_train, y_train, x_val, y_val, {"epochs": 1})
