"""What the minibatch optimiser moves: the couplings themselves, or factors of them.

Every method computes ∂loss/∂J for the expanded couplings J (N, N, d, d); a
parametrisation turns that into the gradients of its own tensors and keeps the norm
constraint. The factorised couplings of docs/model.md, 'Beyond the pseudo-likelihood' (the
slides' eq. 19):

    J_ij = Σ_h K_ijhᵀ Q_ijh        K, Q: (N, N, H, r, d)   ("factorised")
    J_ij = Σ_h K_hᵀ Q_h, i ≠ j     K, Q: (H, r, d)         ("shared": the transformer's
                                                           position-independent couplings)

with the chain rule ∂L/∂K_h = Q_h Gᵀ and ∂L/∂Q_h = K_h G for G = ∂L/∂J_ij (summed over the
pairs i ≠ j when shared). The diagonal blocks J_ii are zero: their factors start at zero and
get no gradient. J is bilinear in (K, Q), so scaling both by √c scales J by c: that is how
the factors keep |J| (or every |J_i·|) fixed.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FullCouplings", "FactorisedCouplings", "make_parametrisation", "factor_shape"]


def factor_shape(couplings: str, n_tokens: int, d: int, heads: int, rank: int | None):
    """Shape of K and of Q: (N, N, H, r, d) factorised, (H, r, d) shared."""
    r = d if rank is None else rank
    return (n_tokens, n_tokens, heads, r, d) if couplings == "factorised" else (heads, r, d)


class FullCouplings:
    """Every block J_ij free: the parameter is J."""

    def __init__(self, torch, J):
        self.torch, self.J = torch, J
        self.tensors = [J]

    def couplings(self):
        return self.J

    def set_grad(self, grad, project: str | None) -> None:
        """J.grad = ``grad`` without its component along J (``project``: "global"/"row")."""
        if project is not None:
            _remove_radial(self.torch, [grad], [self.J], project == "row")
        self.J.grad = grad

    def rescale(self, targets, constraint: str) -> None:
        _rescale(self.torch, self.J, self.tensors, targets, constraint, power=1)

    def extra(self) -> dict[str, np.ndarray]:
        return {}


class FactorisedCouplings:
    """J expanded from factors K, Q (see the module docstring); zero diagonal blocks."""

    def __init__(self, torch, K, Q, n_tokens: int):
        self.torch, self.K, self.Q = torch, K, Q
        self.tensors = [K, Q]
        self.shared = K.ndim == 3
        self.off_diagonal = ~torch.eye(n_tokens, dtype=torch.bool, device=K.device)
        self._J = None

    def couplings(self):
        """J (N, N, d, d), recomputed after every step."""
        if self._J is None:
            J = self.torch.einsum("...hca,...hcb->...ab", self.K, self.Q)
            N = self.off_diagonal.shape[0]
            if self.shared:
                J = J.expand(N, N, *J.shape).clone()
            self._J = J.mul_(self.off_diagonal[:, :, None, None])
        return self._J

    def set_grad(self, grad, project: str | None) -> None:
        if self.shared:
            grad = grad.sum(dim=(0, 1))  # the diagonal blocks of grad are zero
        self.K.grad = self.torch.einsum("...ab,...hcb->...hca", grad, self.Q)
        self.Q.grad = self.torch.einsum("...ab,...hca->...hcb", grad, self.K)
        if project is not None:  # (K, Q) is the direction that scales J, and the rescaling
            # undoes moves along it (the tangent of |J| = const is not exactly its complement)
            _remove_radial(self.torch, [self.K.grad, self.Q.grad], self.tensors, project == "row")
        self._J = None

    def rescale(self, targets, constraint: str) -> None:
        self._J = None
        _rescale(self.torch, self.couplings(), self.tensors, targets, constraint, power=0.5)
        self._J = None

    def extra(self) -> dict[str, np.ndarray]:
        return {"K": self.K.cpu().numpy().copy(), "Q": self.Q.cpu().numpy().copy()}


def _remove_radial(torch, grads, params, per_row: bool) -> None:
    """grads -= params · <params, grads>/<params, params>, globally or per row (first axis)."""
    if per_row:
        dot = sum((p * g).flatten(1).sum(dim=1) for p, g in zip(params, grads, strict=True))
        nn = sum((p * p).flatten(1).sum(dim=1) for p in params)
        coef = torch.where(nn > 0, dot / nn.clamp_min(1e-30), 0.0)
        for p, g in zip(params, grads, strict=True):
            g.sub_(p * coef.reshape(-1, *[1] * (p.ndim - 1)))
        return
    dot = sum(torch.sum(p * g) for p, g in zip(params, grads, strict=True))
    nn = sum(torch.sum(p * p) for p in params)
    if nn > 0:
        for p, g in zip(params, grads, strict=True):
            g.sub_(p * (dot / nn))


def _rescale(torch, J, params, targets, constraint: str, power: float) -> None:
    """Scale ``params`` by (target / |J|) ** power so that |J| (or each |J_i·|) is the target."""
    if constraint == "global":
        factor = (float(targets[0]) / J.norm()) ** power
        for p in params:
            p.mul_(factor)
    elif constraint == "row":
        target = torch.as_tensor(targets, dtype=J.dtype, device=J.device)
        factor = (target / J.flatten(1).norm(dim=1)) ** power
        for p in params:
            p.mul_(factor.reshape(-1, *[1] * (p.ndim - 1)))


def make_parametrisation(torch, state, config, dev, rng: np.random.Generator):
    """The parametrisation of ``config.couplings``, from the state (fresh or resumed).

    A fresh factorised fit draws K, Q ~ N(0, 1) from ``rng`` and rescales them onto the
    constraint, so that it starts at the norm(s) a full fit would keep.
    """
    J = torch.from_numpy(state.J.copy()).to(dev)
    if config.couplings == "full":
        return FullCouplings(torch, J)
    N, d = J.shape[0], J.shape[2]
    if "K" not in state.extra:
        shape = factor_shape(config.couplings, N, d, config.heads, config.rank)
        dtype = state.J.dtype
        for name in ("K", "Q"):
            factor = rng.standard_normal(shape).astype(dtype)
            if config.couplings == "factorised":
                factor[np.arange(N), np.arange(N)] = 0  # J_ii = 0
            state.extra[name] = factor
        fresh = True
    else:
        fresh = False
    K, Q = (torch.from_numpy(state.extra[k].copy()).to(dev) for k in ("K", "Q"))
    params = FactorisedCouplings(torch, K, Q, N)
    if fresh:
        if config.constraint in ("l2", "none"):  # no norm to keep: start at the full fit's |J|
            params.rescale(np.array([np.linalg.norm(state.J)]), "global")
        else:
            params.rescale(state.targets, config.constraint)
        state.extra.update(params.extra())
    return params
