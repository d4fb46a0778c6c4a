"""The minibatch fit: one loop for every method and parametrisation (torch optimisers).

Each step asks :mod:`spinsa.fit.gradients` for ∂loss/∂J of the method on a minibatch, adds
the L2 penalty, hands it to the parametrisation (:mod:`spinsa.fit.parametrisation`: J
itself or its factors, with the projection off the constraint's radial direction), clips,
steps the optimiser and puts J back on its constraint. The full-batch pseudo-likelihood is
evaluated every ``eval_every`` epochs, whatever the method, so that every fit's history is
the same quantity.
"""

from __future__ import annotations

import re
import warnings

import numpy as np

from spinsa._torch import device_name, import_torch, resolve_device
from spinsa.fit.convergence import divergence_norm, mark_diverged
from spinsa.fit.gradients import make_gradient
from spinsa.fit.objective import constrained_grad, full_objective
from spinsa.fit.parametrisation import make_parametrisation
from spinsa.fit.torch_backend import (
    _diag_mask,
    auto_chunk_size,
    closed_form,
    deterministic,
    normalised_closed_form,
    row_closed_form,
)

__all__ = ["fit_torch"]


def _make_optimizer(torch, tensors, config):
    options = dict(lr=config.lr, weight_decay=config.weight_decay)
    if config.optimizer == "sgd":
        return torch.optim.SGD(tensors, momentum=config.momentum, **options)
    return {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[config.optimizer](
        tensors, **options
    )


def _key(name: str, i: int) -> str:
    """The checkpoint's name of the optimiser state ``name`` of parameter ``i`` (the first
    parameter's names are plain, as they were when J was the only one)."""
    return name if i == 0 else f"{name}_p{i}"


def _optimizer_arrays(opt) -> dict[str, np.ndarray]:
    """The optimiser's per-parameter state as numpy arrays (for the checkpoint)."""
    state = opt.state_dict()["state"]
    return {
        _key(k, i): v.detach().cpu().numpy().copy()
        for i, per_param in state.items()
        for k, v in per_param.items()
        if v is not None
    }


def _load_optimizer_arrays(torch, opt, arrays: dict[str, np.ndarray], dev) -> None:
    if not arrays:
        return
    params = opt.param_groups[0]["params"]
    sd = opt.state_dict()
    names = {k for k in arrays if not re.search(r"_p\d+$", k)}
    sd["state"] = {
        i: {k: torch.from_numpy(np.array(arrays[_key(k, i)])) for k in names}
        for i in range(len(params))
    }
    opt.load_state_dict(sd)
    # load_state_dict casts float state to the parameter's dtype and device; 'step' stays put
    for p in params:
        for k, v in opt.state[p].items():
            if torch.is_tensor(v) and k != "step":
                opt.state[p][k] = v.to(dev)


def fit_torch(xi: np.ndarray, state, config, run) -> None:
    """Minibatch fit of ``config.method`` (:mod:`spinsa.fit.gradients`) with the couplings
    parametrised by ``config.couplings`` (:mod:`spinsa.fit.parametrisation`); updates
    ``state`` in place.

    ``xi`` (P, N, d) validated patterns in the fit dtype; ``state`` a
    :class:`spinsa.fit.checkpoint.FitState` (fresh or loaded); ``run`` the driver that records
    steps, checkpoints and reports progress (:class:`spinsa.fit.api._Run`).
    """
    torch = import_torch()
    dev = resolve_device(config.device)
    state.device = device_name(dev)
    P, N, d = xi.shape
    B = min(config.batch_size, P)
    itemsize = xi.dtype.itemsize
    chunk = config.chunk_size or auto_chunk_size(N, d, itemsize)
    lam, clamp = config.lam, config.score_clamp
    targets = state.targets
    # the radial component of the gradient that the rescaling would undo
    fixed = config.constraint in ("global", "row")
    project = config.constraint if config.project_grad and fixed else None

    with deterministic(dev), torch.no_grad():
        x_all = torch.from_numpy(xi).to(dev)
        mask = _diag_mask(torch, N, dev)
        rng = np.random.default_rng()
        rng.bit_generator.state = state.rng_state
        params = make_parametrisation(torch, state, config, dev, rng)
        opt = _make_optimizer(torch, params.tensors, config)
        _load_optimizer_arrays(torch, opt, state.optimizer, dev)
        gradient = make_gradient(torch, config, xi, x_all, state, chunk)

        if dev.type == "cpu":  # the full-batch evaluation: the numba kernel is faster here
            full_kernel = full_objective(xi, config.score_clamp, config.loss)
            G_host = np.empty(state.J.shape, dtype=xi.dtype)

        def evaluate():
            """Full-batch L(J) and the norm of its constrained gradient, once per epoch."""
            J = params.couplings()
            if dev.type == "cpu":
                Jn = J.numpy()
                loss, G = full_kernel(Jn, lam, G_host), G_host
            else:
                if config.loss == "normalised":
                    loss, Gt = normalised_closed_form(torch, x_all, J, lam, chunk, mask)
                else:
                    loss, Gt = closed_form(torch, x_all, J, lam, chunk, mask, clamp)
                Jn, G = J.cpu().numpy(), Gt.cpu().numpy()
            g = constrained_grad(Jn, G, config.constraint, config.l2)
            state.n_samples_seen += P
            return float(loss), float(np.linalg.norm(g))

        if not state.epoch_loss:
            run.record_epoch(*evaluate(), J=params.couplings().cpu().numpy())
        max_norm = _divergence_guard(config, N)

        for epoch in range(state.epoch, config.epochs):
            if run.stop_early():  # spinsa.fit.convergence: the criterion is met
                break
            if config.lr_decay_every is not None:  # StepLR, from the epoch: resumes exactly
                decay = config.lr_decay ** (epoch // config.lr_decay_every)
                opt.param_groups[0]["lr"] = config.lr * decay
            perm = rng.permutation(P)
            for start in range(0, P, B):
                idx = perm[start : start + B]
                J = params.couplings()
                if config.site_sampling == "one":
                    i = int(rng.integers(N))
                    xb = x_all.index_select(0, torch.from_numpy(idx).to(dev))
                    loss, g_row = row_closed_form(torch, xb, J[i], lam, i, clamp)
                    grad = torch.zeros_like(J)
                    grad[i] = g_row
                else:
                    loss, grad = gradient(idx, J, rng)
                if config.constraint == "l2":
                    grad.add_(J, alpha=config.l2)
                params.set_grad(grad, project)
                if config.clip is not None:
                    gnorm = torch.nn.utils.clip_grad_norm_(params.tensors, config.clip)
                else:
                    gnorm = torch.linalg.vector_norm(
                        torch.stack([p.grad.norm() for p in params.tensors])
                    )
                opt.step()
                for p in params.tensors:
                    p.grad = None
                params.rescale(targets, config.constraint)
                state.n_samples_seen += len(idx) / (N if config.site_sampling == "one" else 1)
                norm = float(params.couplings().norm())
                run.record_step(
                    float(loss),
                    float(gnorm),
                    norm,
                    lambda: params.couplings().cpu().numpy().copy(),
                )
                if norm > max_norm:
                    break
            # the last epoch, the one early stopping ends on, or a divergence, is evaluated
            last = epoch + 1 == config.epochs or run.stop_early() or norm > max_norm
            if last or (epoch + 1) % config.eval_every == 0:
                loss, gnorm = evaluate()
            else:
                loss, gnorm = float("nan"), float("nan")
            state.epoch = epoch + 1
            state.J = params.couplings().cpu().numpy().copy()
            state.rng_state = rng.bit_generator.state
            state.optimizer = _optimizer_arrays(opt)
            state.extra.update(params.extra())
            run.record_epoch(loss, gnorm, J=state.J)
            run.end_of_epoch(checkpoint_now=last or state.epoch % config.checkpoint_every == 0)
            if norm > max_norm:
                run.finish_epochs()
                mark_diverged(
                    state, config, norm, max_norm, f"after epoch {state.epoch}", stacklevel=6
                )  # the user's call of fit_pseudolikelihood
                return
        state.J = params.couplings().cpu().numpy().copy()
        run.finish_epochs()


def _divergence_guard(config, n_tokens: int) -> float:
    """The |J| at which a fit stops (:func:`spinsa.fit.convergence.divergence_norm`); warns
    about full-sweep CD chains, whose CD has no fixed point at the planted couplings."""
    if config.method == "cd" and config.chain == "sweep":
        warnings.warn(
            "CD with full Gibbs sweeps (chain='sweep') can diverge: the attention model's "
            "conditionals belong to no joint law (N >= 3), so the chains' law is not the "
            "one whose normaliser the data term needs, and |J| may grow without bound "
            "(docs/training-methods.md). chain='site' converges; the fit stops if |J| "
            "exceeds max_norm.",
            UserWarning,
            stacklevel=4,
        )
    return divergence_norm(config, n_tokens)
