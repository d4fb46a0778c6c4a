"""The minibatch gradient of each training method, ∂loss/∂J for the expanded couplings.

- ``"pl"``: the pseudo-likelihood's closed form (docs/model.md, 'The objective'), or the
  normalised one's (``loss="normalised"``);
- ``"cd"``: contrastive divergence, G(data) − G(model) with G the same closed form; its
  "loss" is ⟨e⟩_data − ⟨e⟩_model. The model's states (``chain``): ``"site"``, for every
  sample and row i the data with x_i redrawn from its conditional (row i's model term is
  the closed form of e_i there, whose expectation is the normaliser's gradient);
  ``"sweep"``, k systematic Gibbs sweeps from the data (CD-k) or from persistent chains
  (PCD); ``"dynamics"``, k steps of the deterministic dynamics;
- ``"bptt"``: the task's error after τ unrolled steps, by torch autograd
  (:mod:`spinsa.fit.backprop`).

On the CPU the closed form and the dynamics are the numba kernels (:mod:`spinsa.kernels`);
on a GPU they are torch (the closed form of :mod:`spinsa.fit.torch_backend` and
:func:`spinsa.fit.backprop.torch_step`). Each gradient is a callable
``gradient(idx, J, rng) -> (loss, grad)`` with ``idx`` the minibatch's pattern indices and J
the current couplings (a tensor); ``grad`` is a tensor on J's device.
"""

from __future__ import annotations

import numpy as np

from spinsa.fit.backprop import corrupt, torch_step, unrolled_loss
from spinsa.fit.torch_backend import closed_form as torch_closed_form
from spinsa.fit.torch_backend import normalised_closed_form
from spinsa.kernels import dynamics as _k_dynamics
from spinsa.kernels import normalised as _k_normalised
from spinsa.kernels import objective as _k_objective
from spinsa.sampling import heat_bath_sweeps, row_matched_states

__all__ = ["make_gradient"]


def _sweeps(x: np.ndarray, J: np.ndarray, lam: float, gamma: float, steps: int) -> np.ndarray:
    """x (P, N, d) after ``steps`` synchronous steps of eq. 1 on the sphere: the sweep kernel
    of :func:`spinsa.run` without its checks, records and energies (this runs once per
    minibatch). The fast path's bounds are the blocks' Frobenius norms: above the spectral
    norms of ``block_bounds``, so as safe, and far cheaper to get for a J used only once."""
    Xt = _k_dynamics.to_tiles(x)
    new = _k_dynamics.tiles_like(Xt)
    energies = np.empty(Xt.shape[:2] + Xt.shape[3:], dtype=Xt.dtype)
    bounds = np.linalg.norm(J, axis=(2, 3)).astype(J.dtype)
    sphere = _k_dynamics.NORM_CODES["sphere"]
    for _ in range(steps):
        _k_dynamics.sweep(Xt, J, lam, np.inf, gamma, sphere, True, new, energies, bounds)
        Xt, new = new, Xt
    return _k_dynamics.from_tiles(Xt, x.shape[0])


def make_gradient(torch, config, xi: np.ndarray, x_all, state, chunk: int):
    """The minibatch gradient of ``config.method`` on the patterns ``xi`` (numpy, P N d) /
    ``x_all`` (the same, a tensor on the fit's device); ``state.extra`` keeps PCD's chains."""
    dev = x_all.device
    on_cpu = dev.type == "cpu"
    clamp = config.score_clamp
    lam = config.lam
    exclude = torch.eye(xi.shape[1], dtype=torch.bool, device=dev)

    # host buffers of the closed form, reused every step: the data's and the model's
    host = [np.empty((xi.shape[1],) * 2 + (xi.shape[2],) * 2, xi.dtype) for _ in range(2)]
    kernel_clamp = np.inf if clamp is None else clamp

    def closed_form(x, J, slot: int = 0):
        """(⟨Σ_i e_i⟩, ∂/∂J) on states x (numpy on the CPU, a tensor on the GPU); on the CPU
        the gradient is host buffer ``slot``, overwritten by the next call."""
        if config.loss == "normalised":
            if on_cpu:
                loss = _k_normalised.loss_and_grad(x, x, J.numpy(), lam, host[slot])
                return float(loss), torch.from_numpy(host[slot])
            loss, G = normalised_closed_form(torch, x, J, lam, chunk, exclude)
            return float(loss), G
        if on_cpu:
            loss = _k_objective.loss_and_grad(x, J.numpy(), lam, host[slot], kernel_clamp)
            return float(loss), torch.from_numpy(host[slot])
        loss, G = torch_closed_form(torch, x, J, lam, chunk, exclude, clamp)
        return float(loss), G

    def site_term(x, x_site, J):
        """(⟨Σ_i e_i⟩, ∂/∂J) with row i at x_i = x_site[:, i] and the others from x."""
        if on_cpu:
            loss = _k_normalised.loss_and_grad(x_site, x, J.numpy(), lam, host[1], False)
            host[1] /= lam  # the plain kernel computes lam e_i
            return float(loss) / lam, torch.from_numpy(host[1])
        loss, G = normalised_closed_form(torch, x, J, lam, chunk, exclude, x_site, False)
        return float(loss) / lam, G.div_(lam)

    def to_host(x):
        return x if on_cpu else x.cpu().numpy()

    def host_J(J):
        return J.numpy() if on_cpu else J.cpu().numpy()

    def to_dev(x):
        return x if on_cpu else torch.from_numpy(x).to(dev)

    def advance(x, J, steps: int, rng):
        """x after ``steps`` steps of the chain (Gibbs sweeps or the dynamics) at λ = lam."""
        if config.chain == "sweep":
            return to_dev(heat_bath_sweeps(to_host(x), host_J(J), lam, steps, rng))
        if on_cpu:
            return _sweeps(x, J.numpy(), lam, config.gamma, steps)
        for _ in range(steps):
            x = torch_step(torch, x, J, lam, config.gamma, exclude)
        return x

    def batch(idx):
        return xi[idx] if on_cpu else x_all.index_select(0, torch.from_numpy(idx).to(dev))

    if config.method == "pl":
        return lambda idx, J, rng: closed_form(batch(idx), J)

    if config.method == "cd":

        def cd(idx, J, rng):
            x = batch(idx)
            if config.chain == "site":
                x_site = to_dev(row_matched_states(to_host(x), host_J(J), lam, rng))
                loss_data, G = closed_form(x, J)
                loss_model, G_model = site_term(x, x_site, J)
                return loss_data - loss_model, G.sub_(G_model)
            # PCD's chains start at the first minibatch and carry on from there
            chains = state.extra.get("chains") if config.persistent else None
            start = x if chains is None else to_dev(chains)
            model = advance(start, J, config.k, rng)
            if config.persistent:
                state.extra["chains"] = to_host(model)
            loss_data, G = closed_form(x, J)
            loss_model, G_model = closed_form(model, J, slot=1)
            return loss_data - loss_model, G.sub_(G_model)

        return cd

    def bptt(idx, J, rng):
        clean = xi[idx]
        tau = int(rng.integers(config.tau_min, config.tau_max + 1))
        x0 = corrupt(clean, config.task, rng, config.mask_fraction, config.noise_std)
        Jp = J.detach().requires_grad_(True)
        with torch.enable_grad():
            loss = unrolled_loss(
                torch, torch.from_numpy(x0).to(dev), torch.from_numpy(clean).to(dev), Jp,
                lam, config.gamma, tau,
            )  # fmt: skip
            (G,) = torch.autograd.grad(loss, Jp)
        return float(loss), G

    return bptt
