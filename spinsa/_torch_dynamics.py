"""The dynamics in torch, for GPUs: eq. 1 and the published notebook's, with masks and records.

The same computations as the numba kernels (:mod:`spinsa.kernels.dynamics`), written as
batched matmuls so that a GPU runs them well (docs/model.md has the formulas; docs/benchmarks.md
the figures). :func:`spinsa.run` and :func:`spinsa.damico.damico_run` call this module when
given a torch device; nothing here validates: the public functions have checked everything.

A synchronous step computes, for a chunk of B samples, ``y[j, p, i, a] = sum_b J_ij[a, b]
x_pj[b]`` as one batched matmul over the key tokens j, ``(N, B, d) @ (N, d, N d)``; the scores
``s_ij = x_i . y_ij`` and the fields ``h_i = sum_j alpha_ij y_ij`` are two more batched
matmuls that read y once each. The chunk keeps ``y`` (B N^2 d floats) under
:data:`CHUNK_BYTES` of the device: nothing of size P x N x N x d is formed.

An asynchronous sweep updates the sites one at a time in the numba path's order (the same
``numpy.random.Generator`` draws it), each site for all samples at once:
``u = x_i J_i`` (a ``(P, d) @ (d, N d)`` matmul) gives the scores, and ``(alpha x) J_i^T`` the
field.

The device vocabulary (:data:`DEVICES`): ``"numba"`` (or None), the CPU kernels, the
default; ``"cpu"``, ``"cuda"``, ``"cuda:<k>"``, torch there; ``"auto"``, torch on CUDA when
torch sees a GPU, else numba (on a CPU the numba kernels are the faster).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from spinsa._torch import import_torch, resolve_device
from spinsa.kernels.dynamics import LAYERNORM_EPS

__all__ = ["DEVICES", "check_device", "dynamics_device", "design_run", "damico_run", "fields"]

DEVICES = ("numba", "auto", "cpu", "cuda", "cuda:<k>")
# memory of one chunk's pair tensor y (B, N, N, d): a GPU wants large batches
CHUNK_BYTES = {"cpu": 64 * 2**20, "cuda": 512 * 2**20}


def check_device(device, name: str = "device") -> str:
    """``device`` if it is a name of :data:`DEVICES` (None is ``"numba"``), without looking
    for a GPU (a config may be written where the run will not happen)."""
    if device is None:
        return "numba"
    ok = isinstance(device, str) and (
        device in ("numba", "auto", "cpu", "cuda")
        or (device.startswith("cuda:") and device[5:].isdigit())
    )
    if not ok:
        raise ValueError(
            f"{name} must be one of 'numba' (the CPU kernels, the default), 'auto' (CUDA when "
            f"available, else numba), 'cpu' or 'cuda' / 'cuda:<k>' (torch there); got {device!r}"
        )
    return device


def dynamics_device(device) -> Any:
    """The ``torch.device`` that runs the dynamics, or None for the numba kernels.

    Raises
    ------
    ValueError
        An unknown name, or CUDA asked for where torch sees none (the message says what to
        install or choose instead).
    spinsa.MissingDependencyError
        A torch device without torch installed.
    """
    device = check_device(device)
    if device == "numba":
        return None
    if device == "auto":
        try:
            torch = import_torch()
        except ImportError:
            return None
        return torch.device("cuda") if torch.cuda.is_available() else None
    return resolve_device(device)


# ---------------------------------------------------------------------------- pieces
def _couplings(J: np.ndarray, dev, by_row: bool = True) -> tuple:
    """J on the device, diagonal blocks zeroed, in the two layouts of the matmuls:
    ``by_key[j, b, i d + a] = J_ij[a, b]`` and ``by_row[i, a, j d + b] = J_ij[a, b]``
    (None without ``by_row``: only asynchronous sweeps read it)."""
    torch = import_torch()
    N, d = J.shape[0], J.shape[2]
    Jd = torch.as_tensor(J, device=dev).clone()
    diag = torch.arange(N, device=dev)
    Jd[diag, diag] = 0  # never enter; a zero block keeps 0 * y finite
    by_key = Jd.permute(1, 3, 0, 2).reshape(N, d, N * d).contiguous()
    if not by_row:
        return by_key, None
    return by_key, Jd.permute(0, 2, 1, 3).reshape(N, d, N * d).contiguous()


def _chunk(x, dev) -> int:
    P, N, d = x.shape
    budget = CHUNK_BYTES["cuda" if dev.type == "cuda" else "cpu"]
    return max(1, min(P, budget // max(1, N * N * d * x.element_size())))


def _weights(s, lam: float, clamp: float, key_mask):
    """Log-normalisers (B, N) and weights alpha (B, N, N) of scores s (B, N, N), in place:
    scores clamped from above, the diagonal and masked keys at -inf."""
    torch = import_torch()
    N = s.shape[1]
    if np.isfinite(clamp):
        s.clamp_(max=clamp)
    s.mul_(lam)
    s.diagonal(dim1=1, dim2=2).fill_(-torch.inf)
    if key_mask is not None:
        s.masked_fill_(key_mask[:, None, :].expand(-1, N, -1), -torch.inf)
    top = s.amax(dim=2, keepdim=True)  # -inf only where every key is masked: NaN, as numpy
    w = s.sub_(top).exp_()
    z = w.sum(dim=2, keepdim=True)
    return (top + z.log()).squeeze(2), w.div_(z)  # one exp per pair (logsumexp takes two)


def fields(
    x,
    by_key,
    lam: float,
    clamp: float = np.inf,
    key_mask=None,
    energies: bool = False,
    with_fields: bool = True,
):
    """Attention fields h (P, N, d) of spins x (P, N, d) on the device, chunked over samples;
    with ``energies`` also the site energies e (P, N) = -(1/lam) log sum_j exp(lam s_ij).

    Parameters
    ----------
    x : torch.Tensor, shape (P, N, d)
    by_key : torch.Tensor, shape (N, d, N d)
        The couplings as :func:`_couplings` lays them out.
    lam, clamp : float
        Inverse temperature; scores are clamped from above at ``clamp`` before ``lam``.
    key_mask : torch.Tensor of bool, shape (P, N), optional
        Tokens that no token attends to.
    energies : bool
        Also return the site energies (else None).
    with_fields : bool
        False: h is None and the weighted sum over j is skipped (a third of the work), for
        the energies alone.

    Returns
    -------
    h : torch.Tensor, shape (P, N, d), or None
    e : torch.Tensor, shape (P, N), or None
    """
    torch = import_torch()
    P, N, d = x.shape
    h = torch.empty_like(x) if with_fields else None
    e = torch.empty(x.shape[:2], dtype=x.dtype, device=x.device) if energies else None
    step = _chunk(x, x.device)
    for start in range(0, P, step):
        xb = x[start : start + step]
        B = xb.shape[0]
        y = torch.bmm(xb.transpose(0, 1), by_key)  # (N_j, B, N_i d): y[j, p, (i, a)]
        yv = y.view(N, B * N, d).permute(1, 2, 0)  # (B N_i, d, N_j), a view
        s = torch.bmm(xb.reshape(B * N, 1, d), yv).view(B, N, N)
        km = None if key_mask is None else key_mask[start : start + step]
        lse, alpha = _weights(s, lam, clamp, km)
        if h is not None:
            h[start : start + B] = torch.bmm(yv, alpha.view(B * N, N, 1)).view(B, N, d)
        if e is not None:
            e[start : start + B] = -lse / lam
    return h, e


def _normalise(u, norm: str):
    """Norm(u) over the last axis: "sphere" (a zero spin stays zero), "layernorm", "none"."""
    torch = import_torch()
    if norm == "sphere":
        n = torch.linalg.vector_norm(u, dim=-1, keepdim=True)
        return torch.where(n > 0, u / torch.where(n > 0, n, 1), 0)
    if norm == "layernorm":
        c = u - u.mean(dim=-1, keepdim=True)
        return c * torch.rsqrt((c * c).mean(dim=-1, keepdim=True) + LAYERNORM_EPS)
    return u


def _async_sweep(x, by_row, lam: float, gamma: float, norm: str, order: np.ndarray) -> None:
    """Sites in ``order`` one at a time, all samples at once, x (P, N, d) in place."""
    torch = import_torch()
    P, N, d = x.shape
    for i in order.tolist():
        u = x[:, i] @ by_row[i]  # (P, N d): u[p, (j, b)] = sum_a x_ia J_ij[a, b]
        s = (u.view(P, N, d) * x).sum(dim=2).view(P, 1, N)
        s[:, 0, i] = -torch.inf
        alpha = torch.softmax(lam * s, dim=2).view(P, N, 1)
        h = (alpha * x).view(P, N * d) @ by_row[i].T
        x[:, i] = _normalise(h + gamma * x[:, i], norm)


def _to_host(t) -> np.ndarray:
    """A numpy copy (on the CPU, ``numpy()`` shares memory with a tensor updated in place)."""
    return np.array(t.detach().cpu().numpy(), copy=True)


# ---------------------------------------------------------------------------- runs
def design_run(
    x0: np.ndarray,
    J: np.ndarray,
    lam: float,
    gamma: float,
    norm: str,
    update: str,
    steps: int,
    dev,
    *,
    seed=None,
    record_every: int | None = None,
    visible: np.ndarray | None = None,
    callback: Callable[[int, np.ndarray], None] | None = None,
    bar=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. 1 on the device: what :func:`spinsa.run` computes, from checked arrays.

    Parameters
    ----------
    x0 : ndarray, shape (P, N, d)
    J : ndarray, shape (N, N, d, d), the dtype of x0
    lam, gamma, norm, update, steps, seed
        As in :func:`spinsa.run`; the asynchronous site orders are
        ``numpy.random.default_rng(seed).permutation(N)``, one per sweep, as there.
    dev : torch.device
    record_every : int, optional
        Keep the state every ``record_every`` steps and at t = 0 and ``steps``; None: only
        the final state.
    visible : ndarray of bool, shape (P, N), optional
        Sites reset to their x0 after every step (the masked task's ``clamp_visible``).
    callback : callable, optional
        ``callback(t, x)`` after every step, x (P, N, d) a numpy array.
    bar : progress bar, optional

    Returns
    -------
    states : ndarray, shape (n_records, P, N, d)
    times : ndarray of int64, shape (n_records,)
    energies : ndarray of float64, shape (steps + 1, P)
        E(x(t)) at every t; with ``visible``, the energies of the states after the reset.
    """
    torch = import_torch()
    rng = np.random.default_rng(seed)
    by_key, by_row = _couplings(J, dev, by_row=update != "sync")
    x = torch.as_tensor(x0, device=dev).clone()
    keep = None if visible is None else torch.as_tensor(visible, device=dev)[..., None]
    x_first = x.clone() if keep is not None else None
    # on the device until the end: a copy to the host per step would wait for the GPU
    energies = torch.empty((steps + 1, x0.shape[0]), dtype=torch.float64, device=dev)
    times, states = [0], [np.array(x0, copy=True)]
    for t in range(1, steps + 1):
        # e of x(t - 1); an asynchronous step needs no field of x(t - 1)
        h, e = fields(x, by_key, lam, energies=True, with_fields=update == "sync")
        energies[t - 1] = e.double().sum(dim=1)
        if update == "sync":
            x = _normalise(h + gamma * x, norm)
        else:
            _async_sweep(x, by_row, lam, gamma, norm, rng.permutation(x0.shape[1]))
        if keep is not None:
            x = torch.where(keep, x_first, x)
        record = record_every is not None and (t % record_every == 0 or t == steps)
        if record or callback is not None:
            host = _to_host(x)
            if record:
                times.append(t)
                states.append(host)
            if callback is not None:
                callback(t, host)
        if bar is not None:
            bar.update()
    _, e = fields(x, by_key, lam, energies=True, with_fields=False)
    energies[steps] = e.double().sum(dim=1)
    if record_every is None:
        times, states = [steps], [_to_host(x)]
    return np.stack(states), np.asarray(times, dtype=np.int64), _to_host(energies)


def _standardize(x, mask, eps: float):
    """:func:`spinsa.damico.standardize_features` in torch: x (P, N, d), mask (P, N) or None."""
    torch = import_torch()
    if mask is None:
        mu = x.mean(dim=1, keepdim=True)
        if x.shape[1] > 1 and x.shape[0] > 0:  # torch warns on an empty reduction
            sd = x.std(dim=1, correction=1, keepdim=True)
        else:
            sd = torch.zeros_like(mu)
        return (x - mu) / (sd + eps)
    vis = (~mask)[..., None]
    n = vis.sum(dim=1, keepdim=True).to(x.dtype)
    safe = torch.where(n > 0, n, 1)  # an image without visible tokens: mean and var 0
    mu = torch.where(vis, x, 0).sum(dim=1, keepdim=True) / safe
    var = torch.where(vis, (x - mu) ** 2, 0).sum(dim=1, keepdim=True) / safe
    return torch.where(vis, (x - mu) / (var.sqrt() + eps), x)


def damico_run(
    x0: np.ndarray,
    J: np.ndarray,
    lam: float,
    steps: int,
    dev,
    *,
    mask: np.ndarray | None = None,
    clamp_visible: bool = False,
    clamp: float,
    eps: float,
    norm_eps: float,
    callback: Callable[[int, np.ndarray], None] | None = None,
    bar=None,
) -> np.ndarray:
    """The notebook's dynamics on the device: what :func:`spinsa.damico.damico_run` computes.

    Each step: standardise over the tokens (with ``mask`` on the first step: visible
    tokens' statistics, masked keys at -inf), fields of the standardised spins with scores
    clamped at ``clamp``, ``u = x + h / 2``, and every token divided by the image's mean
    token norm plus ``norm_eps``; with ``clamp_visible`` the visible tokens are reset.

    Returns
    -------
    ndarray, shape (P, N, d)
        x(steps).
    """
    torch = import_torch()
    by_key, _ = _couplings(J, dev, by_row=False)
    x = torch.as_tensor(x0, device=dev).clone()
    m = None if mask is None else torch.as_tensor(mask, device=dev)
    keep = None if m is None or not clamp_visible else ~m[..., None]
    x_first = x.clone() if keep is not None else None
    for t in range(1, steps + 1):
        first = m if t == 1 else None
        h, _ = fields(_standardize(x, first, eps), by_key, lam, clamp, key_mask=first)
        u = x + 0.5 * h
        scale = torch.linalg.vector_norm(u, dim=2).mean(dim=1) + norm_eps
        x = u / scale[:, None, None]
        if keep is not None:
            x = torch.where(keep, x_first, x)
        if callback is not None:
            callback(t, _to_host(x))
        if bar is not None:
            bar.update()
    return _to_host(x)
