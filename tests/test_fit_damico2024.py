"""The damico2024 fit preset against a plain torch transcription of the published notebook.

The notebook's training cell: features standardised over the tokens (torch.std, unbiased,
+ 1e-9), the scores of one random site i clamped at 20 before lambda,
e_i = -log(sum_{j != i} exp(lambda s_ij)) / lambda averaged over the batch, autograd,
clip_grad_norm_(1), AdamW(lr 5e-4, weight decay 1e-6), then J rescaled to its initial RMS;
StepLR(10, 0.5) once per epoch. Written here with autograd and nothing from spinsa.fit.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import spinsa  # noqa: E402
from spinsa.fit.torch_backend import torch_row_loss_and_grad  # noqa: E402

LAM, CLAMP = 5.0, 20.0


def notebook_loss(x, J, i):
    """The notebook's forward for site i (x raw spins (B, N, d), J a leaf tensor)."""
    xs = (x - x.mean(dim=1, keepdim=True)) / (x.std(dim=1, keepdim=True) + 1e-9)
    JS = torch.einsum("jde,bje->bjd", J[i], xs)
    s = torch.einsum("ba,bja->bj", xs[:, i, :], JS).clamp(max=CLAMP)
    e = -torch.log(torch.exp(LAM * s).sum(dim=-1) - torch.exp(LAM * s[:, i])) / LAM
    return e.mean()


def notebook_step(x, J0, i, lr=5e-4, wd=1e-6):
    """One minibatch step of the notebook on site i: (loss, grad, J after the step)."""
    J = torch.nn.Parameter(torch.tensor(J0))
    rms0 = torch.sqrt((J.data * J.data).mean())
    opt = torch.optim.AdamW([J], lr=lr, weight_decay=wd)
    loss = notebook_loss(torch.tensor(x), J, i)
    loss.backward()
    grad = J.grad.clone()
    torch.nn.utils.clip_grad_norm_([J], 1.0)
    opt.step()
    J.data = J.data * (rms0 / torch.sqrt((J.data * J.data).mean()))
    return float(loss.detach()), grad.numpy(), J.data.numpy()


def instance(rng, P=6, N=5, d=4, scale=6.0):
    x = rng.standard_normal((P, N, d))
    x /= np.sqrt(2) * np.linalg.norm(x, axis=-1, keepdims=True)  # the notebook's |x_i| = 1/sqrt 2
    J = scale * rng.standard_normal((N, N, d, d))
    J[np.arange(N), np.arange(N)] = 0
    return x, J


def standardized(x):
    return (x - x.mean(axis=1, keepdims=True)) / (x.std(axis=1, ddof=1, keepdims=True) + 1e-9)


def test_site_loss_and_gradient_equal_the_transcription(rng):
    x, J = instance(rng)
    xs = standardized(x)
    scores = np.einsum("pia,ijab,pjb->pij", xs, J, xs)
    assert (scores > CLAMP).any() and (scores < CLAMP).any()  # the clamp acts on some pairs
    for i in range(J.shape[0]):
        loss, grad = torch_row_loss_and_grad(xs, J[i], LAM, i, score_clamp=CLAMP)
        want_loss, want_grad, _ = notebook_step(x, J, i)
        assert abs(loss - want_loss) < 1e-6
        np.testing.assert_allclose(grad, want_grad[i], atol=1e-6)
        np.testing.assert_array_equal(np.delete(want_grad, i, axis=0), 0)  # one row only


def test_numba_objective_with_the_clamp_equals_the_transcription(rng):
    x, J = instance(rng)
    xs = standardized(x)
    loss, grad = spinsa.pl_loss_and_grad(xs, J, LAM, score_clamp=CLAMP)
    want_loss, want_grad = 0.0, np.zeros_like(J)
    for i in range(J.shape[0]):
        li, gi, _ = notebook_step(x, J, i)
        want_loss += li
        want_grad[i] = gi[i]
    assert abs(loss - want_loss) < 1e-6
    np.testing.assert_allclose(grad, want_grad, atol=1e-6)


def test_one_preset_step_equals_one_notebook_step(rng):
    x, J0 = instance(rng)
    states = []
    res = spinsa.fit_pseudolikelihood(
        x,
        J0,
        preset="damico2024",
        epochs=1,
        batch_size=x.shape[0],  # one minibatch: the whole (shuffled) set, same mean
        dtype="float64",
        device="cpu",
        check_memory=False,
        callback=lambda step, J: states.append(J),
    )
    # which site the step drew: the one whose notebook loss is the recorded loss
    steps = [notebook_step(x, J0, i) for i in range(J0.shape[0])]
    i = int(np.argmin([abs(s[0] - res.step_loss[0]) for s in steps]))
    assert abs(steps[i][0] - res.step_loss[0]) < 1e-6
    np.testing.assert_allclose(states[0], steps[i][2], atol=1e-6)
    np.testing.assert_allclose(res.J, steps[i][2], atol=1e-6)


def test_step_lr_schedule_halves_the_rate_every_k_epochs(rng):
    # plain SGD, full batch, no rescaling: J2 = J1 - (lr / 2) grad(J1) with lr_decay_every=1
    x, J0 = instance(rng, scale=0.05)
    lr, opts = 0.1, dict(constraint="l2", l2=1e-3, momentum=0.0, batch_size=x.shape[0])
    res = spinsa.fit_pseudolikelihood(
        x,
        J0,
        backend="torch",
        optimizer="sgd",
        lr=lr,
        epochs=2,
        lr_decay_every=1,
        lr_decay=0.5,
        dtype="float64",
        device="cpu",
        unit_spins="ignore",
        check_memory=False,
        **opts,
    )
    J = J0.copy()
    for rate in (lr, lr / 2):
        _, g = spinsa.pl_loss_and_grad(x, J, 5.0)
        J = J - rate * (g + 1e-3 * J)
    np.testing.assert_allclose(res.J, J, atol=1e-10)
