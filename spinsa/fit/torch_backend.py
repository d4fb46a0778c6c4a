"""Torch backend of the pseudo-likelihood fit: the closed-form gradient computed in torch.

The objective and its gradient are written out by hand (docs/model.md, 'The objective'),
chunked over samples so that the largest intermediate, ``y[p, i, j] = J_ij ξ_j`` of shape
(chunk, N, N, d), stays within a memory budget; no autograd is used in the fit.
:func:`autograd_loss_and_grad` is the same objective differentiated by torch autograd: it is a
*reference* for tests and benchmarks only.

Torch is imported on first use; without it the functions here raise an ``ImportError`` that
says ``pip install "spinsa[torch]"``.
"""

from __future__ import annotations

import contextlib

import numpy as np

from spinsa._checks import check_positive, check_spins_couplings
from spinsa._torch import import_torch, resolve_device
from spinsa.kernels.vmf import log_partition_and_mean_array

__all__ = [
    "torch_loss_and_grad",
    "torch_normalised_loss_and_grad",
    "torch_row_loss_and_grad",
    "autograd_loss_and_grad",
    "resolve_device",
    "auto_chunk_size",
]

CHUNK_BUDGET_BYTES = 256 * 2**20  # working memory of one chunk when chunk_size is None
_INTERMEDIATES = 4  # (chunk, N, N, d)-sized buffers alive at once, counted generously


def auto_chunk_size(n_tokens: int, d: int, itemsize: int, budget: int = CHUNK_BUDGET_BYTES) -> int:
    """Samples per chunk so that the chunk's intermediates stay within ``budget`` bytes."""
    per_sample = _INTERMEDIATES * n_tokens * n_tokens * d * itemsize
    return max(1, int(budget // per_sample))


@contextlib.contextmanager
def deterministic(dev):
    """``torch.use_deterministic_algorithms(True)`` on the CPU for the duration, then restored."""
    torch = import_torch()
    if dev.type != "cpu":
        yield
        return
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)


# ------------------------------------------------------------------ the closed form
def _diag_mask(torch, n_tokens: int, dev):
    return torch.eye(n_tokens, dtype=torch.bool, device=dev)


def _softmax_weights(torch, s, lam: float, clamp, dim: int, exclude):
    """(log-sum-exp of λ min(s, clamp), the gradient's weights α · [s <= clamp]).

    ``s`` (scores) is overwritten; ``exclude`` applies the -inf of the diagonal in place.
    """
    free = None if clamp is None else s <= clamp  # where the clamp does not act
    if clamp is not None:
        s.clamp_(max=clamp)
    s.mul_(lam)
    exclude(s)
    lse = torch.logsumexp(s, dim=dim)
    alpha = torch.exp_(s.sub_(lse.unsqueeze(dim)))  # softmax over j != i, alpha_ii = 0
    return lse, alpha if free is None else alpha.mul_(free)


def _chunk_closed_form(torch, x, J, lam: float, mask, clamp=None):
    """Σ_p Σ_i e_i and Σ_p α_ij x_i x_j^T for one chunk. x (B, N, d), J (N, N, d, d).

    Returns (loss, G) with loss a float64 0-d tensor and G (N, N, d, d) in J's dtype
    (without the -1/P factor).
    """
    y = torch.einsum("ijab,pjb->pija", J, x)  # y[p, i, j] = J_ij x_j
    s = torch.einsum("pia,pija->pij", x, y)
    lse, alpha = _softmax_weights(torch, s, lam, clamp, 2, lambda t: t.masked_fill_(mask, -np.inf))
    ax = torch.mul(alpha[..., None], x[:, None, :, :], out=y)  # alpha_ij x_j, reusing y
    G = torch.einsum("pia,pijb->ijab", x, ax)
    loss = -lse.to(torch.float64).sum() / lam
    return loss, G


def closed_form(torch, x, J, lam: float, chunk_size: int, mask=None, clamp=None):
    """Full objective and gradient on tensors: (L as float64 0-d tensor, ∂L/∂J like J).

    x (P, N, d) and J (N, N, d, d) on one device; sums over chunks accumulate in float64;
    scores clamped at ``clamp`` before λ when it is given.
    """
    P, N, _ = x.shape
    if mask is None:
        mask = _diag_mask(torch, N, x.device)
    loss, acc = _sum_over_chunks(
        torch, P, chunk_size, x.device,
        lambda part: _chunk_closed_form(torch, x[part], J, lam, mask, clamp),
    )  # fmt: skip
    return loss / P, acc.mul_(-1.0 / P).to(J.dtype)


def _sum_over_chunks(torch, P: int, chunk_size: int, device, chunk):
    """(Σ loss, Σ gradient) in float64 of ``chunk(part)`` -> (loss, gradient) over the
    sample slices ``part`` of ``chunk_size``."""
    loss = torch.zeros((), dtype=torch.float64, device=device)
    acc = None
    for start in range(0, P, chunk_size):
        l_c, G_c = chunk(slice(start, start + chunk_size))
        loss += l_c
        G_c = G_c.to(torch.float64)
        acc = G_c if acc is None else acc.add_(G_c)
    return loss, acc


def row_closed_form(torch, x, J_row, lam: float, i: int, clamp=None):
    """Objective of site i, (1/B) Σ_p e_i(x^p), and its gradient in row i. J_row (N, d, d)."""
    B = x.shape[0]
    xi_i = x[:, i]  # (B, d)
    y = torch.einsum("jab,pjb->pja", J_row, x)  # J_ij x_j, (B, N, d)
    s = torch.einsum("pa,pja->pj", xi_i, y)
    lse, alpha = _softmax_weights(torch, s, lam, clamp, 1, lambda t: t[:, i].fill_(-np.inf))
    ax = torch.mul(alpha[..., None], x, out=y)
    G = torch.einsum("pa,pjb->jab", xi_i, ax).mul_(-1.0 / B)
    loss = -lse.to(torch.float64).sum() / (lam * B)
    return loss, G


# ------------------------------------------------------------------ the normalised loss
def _log_partition_and_mean(torch, kappa, d: int):
    """log Z_d(kappa) and A_d(kappa) of a tensor, by the numba scalars on the host (the
    same numbers as the CPU kernel; torch has no Bessel function of general order)."""
    flat = kappa.detach().to("cpu", torch.float64).contiguous().view(-1).numpy()
    logz, amean = log_partition_and_mean_array(flat, d)
    back = lambda a: torch.from_numpy(a).view(kappa.shape).to(kappa.device, kappa.dtype)  # noqa: E731
    return back(logz), back(amean)


def _chunk_normalised(torch, x, J, lam: float, mask, x_site=None, with_norm: bool = True):
    """Σ_p Σ_i l_i and its gradient for one chunk, in the convention of
    :mod:`spinsa.kernels.normalised` (without the normaliser: λ e_i). x (B, N, d)."""
    xs = x if x_site is None else x_site
    y = torch.einsum("ijab,pjb->pija", J, x)  # h_ij = J_ij x_j
    s = torch.einsum("pia,pija->pij", xs, y).mul_(lam).masked_fill_(mask, -np.inf)
    lse = torch.logsumexp(s, dim=2)
    alpha = torch.exp_(s.sub_(lse.unsqueeze(2)))
    G = torch.einsum("pij,pia,pjb->ijab", alpha, xs, x).mul_(-lam)
    loss = -lse.to(torch.float64).sum()
    if with_norm:
        nrm = torch.linalg.vector_norm(y, dim=3)
        logz, amean = _log_partition_and_mean(torch, nrm * lam, x.shape[2])
        logz.masked_fill_(mask, -np.inf)
        lse2 = torch.logsumexp(logz, dim=2)
        # w_ij A_d(kappa_ij) / |h_ij|; a zero block has A_d = 0 and no direction
        c = torch.exp(logz - lse2.unsqueeze(2)) * torch.where(nrm > 0, amean / nrm, 0.0)
        G += torch.einsum("pij,pija,pjb->ijab", c, y, x).mul_(lam)
        loss += lse2.to(torch.float64).sum()
    return loss, G


def normalised_closed_form(
    torch, x, J, lam: float, chunk_size: int, mask=None, x_site=None, with_norm: bool = True
):
    """(mean over samples of Σ_i l_i as a float64 0-d tensor, its gradient like J); chunked as
    :func:`closed_form`. Row i reads x_i from ``x_site`` (default ``x``), x_j from ``x``."""
    P, N, _ = x.shape
    if mask is None:
        mask = _diag_mask(torch, N, x.device)

    def chunk(part):
        xs = None if x_site is None else x_site[part]
        return _chunk_normalised(torch, x[part], J, lam, mask, xs, with_norm)

    loss, acc = _sum_over_chunks(torch, P, chunk_size, x.device, chunk)
    return loss / P, acc.mul_(1.0 / P).to(J.dtype)


def forward_loss(torch, x, J, lam: float, mask=None, clamp=None):
    """Σ_p Σ_i e_i for x (B, N, d), differentiable (used by the autograd reference only)."""
    N = x.shape[1]
    if mask is None:
        mask = _diag_mask(torch, N, x.device)
    s = torch.einsum("pia,ijab,pjb->pij", x, J, x)
    if clamp is not None:
        s = torch.clamp(s, max=clamp)
    s = (s * lam).masked_fill(mask, float("-inf"))
    return -torch.logsumexp(s, dim=2).sum() / lam


# ------------------------------------------------------------------ public wrappers
def _as_tensors(xi, J, device):
    """(x, J, was_numpy) as tensors on one device; numpy inputs are validated first."""
    torch = import_torch()
    if isinstance(xi, torch.Tensor) and isinstance(J, torch.Tensor):
        if xi.ndim != 3 or J.shape != (xi.shape[1], xi.shape[1], xi.shape[2], xi.shape[2]):
            raise ValueError(
                f"xi must be (P, N, d) and J (N, N, d, d); got {tuple(xi.shape)} and "
                f"{tuple(J.shape)}"
            )
        dev = xi.device if device is None else resolve_device(device)
        dtype = torch.promote_types(xi.dtype, J.dtype)
        return xi.to(dev, dtype), J.to(dev, dtype), False
    xi, J = check_spins_couplings(xi, J, x_name="xi")
    dev = resolve_device("cpu" if device is None else device)
    return torch.from_numpy(xi).to(dev), torch.from_numpy(J).to(dev), True


def _check_clamp(score_clamp):
    return None if score_clamp is None else check_positive(score_clamp, "score_clamp")


def _inputs(xi, J, lam, score_clamp, device, chunk_size):
    """(x, J, was_numpy, lam, clamp, chunk_size) validated for the full-objective wrappers."""
    lam, clamp = check_positive(lam, "lam"), _check_clamp(score_clamp)
    x, Jt, was_numpy = _as_tensors(xi, J, device)
    if x.shape[0] == 0:
        raise ValueError("xi is empty (0 patterns)")
    if chunk_size is None:
        chunk_size = auto_chunk_size(x.shape[1], x.shape[2], x.element_size())
    return x, Jt, was_numpy, lam, clamp, int(chunk_size)


def torch_loss_and_grad(
    xi, J, lam: float, chunk_size: int | None = None, device=None, score_clamp=None
):
    """Objective and closed-form gradient (docs/model.md, 'The objective'), computed in torch
    without autograd.

    Parameters
    ----------
    xi : ndarray or torch.Tensor, shape (P, N, d)
    J : ndarray or torch.Tensor, shape (N, N, d, d)
    lam : float
    chunk_size : int, optional
        Samples per chunk (default: :func:`auto_chunk_size`, a 256 MiB budget).
    device : {"cpu", "cuda", "auto"}, optional
        Default: the tensors' device, or the CPU for numpy input.
    score_clamp : float, optional
        Scores clamped at this value before λ (:func:`spinsa.pl_loss_and_grad`).

    Returns
    -------
    loss : float
    grad : same type as ``J``, shape (N, N, d, d)
        Zero diagonal blocks.
    """
    torch = import_torch()
    x, Jt, was_numpy, lam, clamp, chunk_size = _inputs(xi, J, lam, score_clamp, device, chunk_size)
    with torch.no_grad():
        loss, grad = closed_form(torch, x, Jt, lam, chunk_size, clamp=clamp)
    return float(loss), (grad.cpu().numpy() if was_numpy else grad)


def torch_normalised_loss_and_grad(xi, J, lam: float, chunk_size: int | None = None, device=None):
    """The normalised pseudo-likelihood and its closed-form gradient in torch
    (:func:`spinsa.fit.normalised_loss_and_grad`; log Z_d and A_d from the numba scalars on
    the host). Arguments and return values as :func:`torch_loss_and_grad`, without a clamp."""
    torch = import_torch()
    x, Jt, was_numpy, lam, _, chunk_size = _inputs(xi, J, lam, None, device, chunk_size)
    with torch.no_grad():
        loss, grad = normalised_closed_form(torch, x, Jt, lam, chunk_size)
    return float(loss), (grad.cpu().numpy() if was_numpy else grad)


def torch_row_loss_and_grad(xi, J_row, lam: float, i: int, device=None, score_clamp=None):
    """Objective of one site, (1/P) Σ_μ e_i(ξ^μ), and its gradient in row i, in torch.

    ``xi`` (P, N, d), ``J_row`` (N, d, d) = ``J[i]``; returns (loss, grad (N, d, d)) with
    ``grad[i] = 0``, numpy in, numpy out; ``score_clamp`` as in :func:`torch_loss_and_grad`.
    """
    torch = import_torch()
    lam = check_positive(lam, "lam")
    clamp = _check_clamp(score_clamp)
    J_row = np.asarray(J_row)
    if J_row.ndim != 3 or J_row.shape[1] != J_row.shape[2]:
        raise ValueError(f"J_row must have shape (N, d, d), got {J_row.shape}")
    full = np.zeros((J_row.shape[0], *J_row.shape), dtype=J_row.dtype)
    x, Jt, _ = _as_tensors(xi, full, device)
    N = x.shape[1]
    if not 0 <= int(i) < N:
        raise ValueError(f"i must be a site index in [0, {N}), got {i!r}")
    Jr = torch.from_numpy(np.ascontiguousarray(J_row)).to(x.device, x.dtype)
    with torch.no_grad():
        loss, grad = row_closed_form(torch, x, Jr, lam, int(i), clamp)
    return float(loss), grad.cpu().numpy()


def autograd_loss_and_grad(
    xi, J, lam: float, chunk_size: int | None = None, device=None, score_clamp=None
):
    """REFERENCE ONLY: the same objective differentiated by torch autograd.

    For tests and for the benchmark's autograd baseline; the fit never uses it. Same
    arguments and return values as :func:`torch_loss_and_grad`.
    """
    torch = import_torch()
    x, Jt, was_numpy, lam, clamp, chunk_size = _inputs(xi, J, lam, score_clamp, device, chunk_size)
    P, N = x.shape[0], x.shape[1]
    Jt = Jt.detach().clone().requires_grad_(True)
    mask = _diag_mask(torch, N, x.device)
    total = 0.0
    with torch.enable_grad():
        for start in range(0, P, chunk_size):
            chunk = x[start : start + chunk_size]
            loss = forward_loss(torch, chunk, Jt, lam, mask, clamp) / P
            loss.backward()
            total += float(loss.detach())
    grad = Jt.grad.detach()
    return total, (grad.cpu().numpy() if was_numpy else grad)
