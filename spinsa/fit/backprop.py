"""Backpropagation through the dynamics: J trained end to end on a task
(docs/model.md, 'Beyond the pseudo-likelihood').

The bare self-attention dynamics (docs/model.md, 'Dynamics') in torch, differentiable,

    x_i(t+1) = (h_i + γ x_i) / |h_i + γ x_i|,   h_i = Σ_{j≠i} α_ij J_ij x_j,
    α_ij = softmax_{j≠i}(λ x_i·J_ij x_j),

unrolled for τ steps from a corrupted pattern; the loss is the mean squared distance
between x(τ) and the clean pattern. Each step runs under ``torch.utils.checkpoint``: the
backward pass recomputes one step at a time, so memory holds the τ + 1 states (O(P N d τ))
and one step's intermediates (O(P N² d)), never all τ of them.

Torch is imported on first use.
"""

from __future__ import annotations

import numpy as np

from spinsa._checks import check_count, check_positive, check_real, check_spins_couplings
from spinsa._torch import import_torch
from spinsa.tasks import mask_tokens

__all__ = ["torch_step", "unrolled_loss", "corrupt", "bptt_loss_and_grad"]


def torch_step(torch, x, J, lam: float, gamma: float, exclude):
    """One synchronous step of the design's dynamics on tensors, differentiable.

    x (P, N, d), J (N, N, d, d); ``exclude`` the (N, N) boolean diagonal. A zero spin whose
    h_i + γ x_i is zero stays zero, as in the numba kernel.
    """
    y = torch.einsum("ijab,pjb->pija", J, x)  # J_ij x_j
    s = torch.einsum("pia,pija->pij", x, y).mul(lam).masked_fill(exclude, -np.inf)
    h = torch.einsum("pij,pija->pia", torch.softmax(s, dim=2), y)
    z = h + gamma * x
    return z / torch.linalg.vector_norm(z, dim=2, keepdim=True).clamp_min(1e-30)


def unrolled_loss(torch, x0, clean, J, lam: float, gamma: float, tau: int, checkpoint=True):
    """(1/P) Σ_p (1/N) Σ_i |x_i(τ) − ξ_i|² after τ steps from x0, differentiable in J.

    x0, clean (P, N, d); J (N, N, d, d) a tensor that may require grad. With ``checkpoint``
    each step's intermediates are recomputed in the backward pass instead of kept.
    """
    from torch.utils.checkpoint import checkpoint as recompute

    exclude = torch.eye(x0.shape[1], dtype=torch.bool, device=x0.device)
    x = x0
    for _ in range(tau):
        if checkpoint:
            x = recompute(torch_step, torch, x, J, lam, gamma, exclude, use_reentrant=False)
        else:
            x = torch_step(torch, x, J, lam, gamma, exclude)
    return (x - clean).pow(2).sum(dim=2).mean()


def corrupt(xb: np.ndarray, task: str, rng: np.random.Generator, mask_fraction: float,
            noise_std: float) -> np.ndarray:  # fmt: skip
    """The task's input in spin space: masked tokens set to zero, or noisy spins projected
    back on the sphere. xb (B, N, d) -> (B, N, d), drawn from ``rng``."""
    if task == "masked":
        return mask_tokens(xb, mask_fraction, rng)[0]
    noisy = xb + noise_std * rng.standard_normal(xb.shape).astype(xb.dtype)
    return noisy / np.maximum(np.linalg.norm(noisy, axis=2, keepdims=True), 1e-30)


def bptt_loss_and_grad(
    x0, clean, J, lam: float, tau: int, gamma: float = 1.0, checkpoint: bool = True
) -> tuple[float, np.ndarray]:
    """The task loss after τ steps of the dynamics and its gradient in J (torch autograd).

    Parameters
    ----------
    x0 : array_like, shape (P, N, d)
        Corrupted inputs (:func:`corrupt`).
    clean : array_like, shape (P, N, d)
        The clean patterns.
    J : array_like, shape (N, N, d, d)
        Couplings; the diagonal blocks are ignored (their gradient is zero).
    lam : float
        λ of the dynamics.
    tau : int
        Steps unrolled, >= 1.
    gamma : float
        γ of the dynamics.
    checkpoint : bool
        Recompute each step in the backward pass (the same numbers, less memory).

    Returns
    -------
    loss : float
        (1/P) Σ_p (1/N) Σ_i |x_i(τ) − ξ_i|².
    grad : ndarray, shape (N, N, d, d)
        ∂loss/∂J, in J's dtype.
    """
    torch = import_torch()
    x0, J = check_spins_couplings(x0, J, x_name="x0")
    clean = np.asarray(clean, dtype=x0.dtype)
    if clean.shape != x0.shape:
        raise ValueError(f"clean must have the shape of x0 {x0.shape}, got {clean.shape}")
    lam, gamma = check_positive(lam, "lam"), check_real(gamma, "gamma")
    tau = check_count(tau, "tau", 1)
    Jt = torch.from_numpy(J.copy()).requires_grad_(True)
    with torch.enable_grad():
        loss = unrolled_loss(
            torch, torch.from_numpy(x0), torch.from_numpy(clean), Jt, lam, gamma, tau, checkpoint
        )
        (grad,) = torch.autograd.grad(loss, Jt)
    return float(loss.detach()), grad.numpy()
