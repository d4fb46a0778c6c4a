"""The dynamics of the published notebook (D'Amico & Negri 2024), as a preset.

The notebook iterates a variant of the paper's eq. 1 (docs/model.md, 'The published recipe').
One step, for every image separately:

1. *Feature standardisation across tokens.* Every component k of the spins is centred and
   scaled over the N tokens of the image:
   ``xs[i, k] = (x[i, k] - mean_j x[j, k]) / (std_j x[j, k] + eps)``, with the unbiased
   standard deviation (``ddof = 1``) and ``eps = 1e-9``.
2. *Scores on the standardised spins, clamped.* ``s_ij = min(xs_i . J_ij xs_j, 20)``; the
   clamp acts before the inverse temperature.
3. *Attention and field.* ``alpha_ij = softmax_{j != i}(lam s_ij)`` and
   ``h_i = sum_{j != i} alpha_ij J_ij xs_j``.
4. *Residual update.* ``x_i <- x_i + h_i / 2`` (eq. 1 with gamma = 2, up to the scale).
5. *Renormalisation.* Every token is divided by the image's mean token norm plus 1e-9,
   ``(1/N) sum_k |x_k| + 1e-9``.

In the masked task the *first* step sees the mask: the statistics of step 1 are taken over
the visible tokens only, with the *biased* standard deviation (``ddof = 0``, as the
notebook's masked branch computes it); the masked tokens are not standardised (they stay
the zero spin, so their scores are 0 and they attend uniformly), and no token can attend to
a masked one (its scores are -inf). From the second step on there is no mask.

Choices where the notebook's description is ambiguous:

* The field's values use the standardised spins ``xs_j`` (as the queries and keys do), and
  the residual adds them to the raw spins ``x_i``: the pre-norm pattern
  ``x + Attn(Norm(x))`` of a transformer layer.
* The clamp is one-sided (``min(s, 20)``): it guards ``exp`` against overflow; a lower clamp
  would only change weights that are below ``exp(-20 lam)`` anyway.
* ``eps`` is added to the standard deviation, not to the variance.
* "Masked tokens are left un-normalised" is read as: the standardisation of step 1 leaves
  them as they are (zero); the renormalisation of step 5 applies to every token.
* An image whose tokens are all zero stays zero (the 1e-9 of step 5 keeps the division
  finite).

Speed. Without a mask a step is the attention field of the standardised spins with clamped
scores, which the package's fused kernel computes; the standardisation and the update run
in the same tiled layout (:mod:`spinsa.kernels.dynamics`), so the state stays in tiles
from the first step to the last. The masked first step (no token may attend to a masked
one) runs in plain numpy, chunked over images: it materialises ``y[p, i, j] = J_ij xs_j``
of shape (chunk, N, N, d) within a memory budget and costs about ten fused steps.
``fast=False`` runs every step in numpy (the reference the tests compare the fused path
with).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spinsa import _torch_dynamics
from spinsa._checks import check_count, check_lam, check_positive, check_spins_couplings
from spinsa._progress import progress as progress_bar
from spinsa.kernels import dynamics as _k

__all__ = [
    "SCORE_CLAMP",
    "STD_EPS",
    "standardize_features",
    "damico_fields",
    "damico_step",
    "damico_run",
]

SCORE_CLAMP = 20.0  # scores are clamped at this value before the inverse temperature
STD_EPS = 1e-9  # added to the standard deviation of the feature standardisation
NORM_EPS = 1e-9  # added to the mean token norm of the renormalisation
CHUNK_BYTES = 64 * 2**20  # working memory of one numpy chunk (the (chunk, N, N, d) array)


def _check_mask(mask, shape: tuple[int, int]) -> np.ndarray | None:
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise ValueError(f"mask must be a bool array (True = masked token), got dtype {mask.dtype}")
    if mask.shape != shape:
        raise ValueError(f"mask must have shape (P, N) = {shape}, got shape {mask.shape}")
    return mask


def standardize_features(x, mask=None, eps: float = STD_EPS) -> np.ndarray:
    """Standardise every spin component across the tokens of each image.

    Parameters
    ----------
    x : array_like, shape (P, N, d)
        Spins.
    mask : array_like of bool, shape (P, N), optional
        True at masked tokens: the mean and the *biased* standard deviation (``ddof = 0``, as
        in the notebook's masked branch) are taken over the visible tokens only, and the
        masked tokens are returned unchanged.
    eps : float
        Added to the standard deviation.

    Returns
    -------
    ndarray, shape (P, N, d)
        ``(x - mean) / (std + eps)`` per image and component. Without a mask the standard
        deviation is the unbiased one (0 for a single token); with a mask the biased one over
        the visible tokens (the mean of an image without visible tokens is 0).
    """
    x = np.asarray(x)
    if x.ndim != 3:
        raise ValueError(f"x must have shape (P, N, d), got shape {x.shape}")
    mask = _check_mask(mask, x.shape[:2])
    if mask is None:
        mu = x.mean(axis=1, keepdims=True)
        sd = x.std(axis=1, ddof=1, keepdims=True) if x.shape[1] > 1 else np.zeros_like(mu)
        return (x - mu) / (sd + x.dtype.type(eps))
    vis = (~mask)[..., None]
    n = vis.sum(axis=1, keepdims=True).astype(x.dtype)
    mu = np.divide(
        np.where(vis, x, 0).sum(axis=1, keepdims=True),
        n,
        where=n > 0,
        out=np.zeros((x.shape[0], 1, x.shape[2]), dtype=x.dtype),
    )
    dev2 = np.where(vis, (x - mu) ** 2, 0).sum(axis=1, keepdims=True)
    var = np.divide(dev2, n, where=n > 0, out=np.zeros_like(mu))
    xs = (x - mu) / (np.sqrt(var) + x.dtype.type(eps))
    return np.where(vis, xs, x)


def _fields_chunk(xs, Jt, lam, clamp, key_mask):
    """Numpy fields of one chunk. xs (B, N, d); Jt[j] = J[:, j] as (d_b, N*d_a)."""
    B, N, d = xs.shape
    # y[j, p, i, a] = sum_b J[i, j, a, b] xs[p, j, b]: one GEMM per key token j
    y = np.matmul(xs.transpose(1, 0, 2), Jt).reshape(N, B, N, d)
    s = np.einsum("pia,jpia->pij", xs, y)
    np.minimum(s, clamp, out=s)
    s *= lam
    s[:, np.arange(N), np.arange(N)] = -np.inf
    if key_mask is not None:
        s[np.broadcast_to(key_mask[:, None, :], s.shape)] = -np.inf
    s -= s.max(axis=2, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=2, keepdims=True)
    return np.einsum("pij,jpia->pia", s, y)


def _numpy_fields(xs, J, lam, clamp, key_mask) -> np.ndarray:
    """:func:`_fields_chunk` over every image, in chunks of CHUNK_BYTES; lam, clamp: floats."""
    P, N, d = xs.shape
    Jt = np.ascontiguousarray(J.transpose(1, 3, 0, 2).reshape(N, d, N * d))  # J[:, j] by j
    out = np.empty_like(xs)
    chunk = max(1, int(CHUNK_BYTES // (N * N * d * xs.itemsize)))
    lam, clamp = xs.dtype.type(lam), xs.dtype.type(clamp)
    for start in range(0, P, chunk):
        sl = slice(start, start + chunk)
        km = None if key_mask is None else key_mask[sl]
        out[sl] = _fields_chunk(xs[sl], Jt, lam, clamp, km)
    return out


def damico_fields(xs, J, lam, key_mask=None, clamp: float = SCORE_CLAMP) -> np.ndarray:
    """Attention fields with clamped scores, in plain numpy (chunked over images).

    Parameters
    ----------
    xs : array_like, shape (P, N, d)
        Spins (in the notebook's dynamics: the standardised spins).
    J : array_like, shape (N, N, d, d)
        Couplings (diagonal blocks ignored).
    lam : float
        Inverse temperature, > 0.
    key_mask : array_like of bool, shape (P, N), optional
        True at tokens that cannot be attended to (their scores are -inf).
    clamp : float
        Scores ``xs_i . J_ij xs_j`` are clamped at this value before multiplying by ``lam``.

    Returns
    -------
    ndarray, shape (P, N, d)
        ``h_i = sum_{j != i} alpha_ij J_ij xs_j`` with
        ``alpha_ij = softmax_j(lam min(s_ij, clamp))``.
    """
    xs, J = check_spins_couplings(xs, J, x_name="xs")
    lam = check_positive(lam, "lam")
    key_mask = _check_mask(key_mask, xs.shape[:2])
    return _numpy_fields(xs, J, lam, clamp, key_mask)


def _step(x, J, lam, mask, clamp, eps):
    """One step in numpy: x + h/2, every token divided by the image's mean token norm plus
    ``NORM_EPS``."""
    xs = standardize_features(x, mask, eps)
    h = _numpy_fields(xs, J, lam, clamp, mask)
    x = x + x.dtype.type(0.5) * h
    return x / (np.linalg.norm(x, axis=2).mean(axis=1) + x.dtype.type(NORM_EPS))[:, None, None]


def _run(x, J, lam, steps, mask, clamp, eps, fast, clamp_visible=False, callback=None, bar=None):
    """``steps`` steps from x; the mask acts on the first. Fused: the state stays in tiles."""
    visible = None if mask is None or not clamp_visible else ~mask
    x0 = x
    if not fast:
        for t in range(1, steps + 1):
            x = _step(x, J, lam, mask if t == 1 else None, clamp, eps)
            if visible is not None:
                x = np.where(visible[..., None], x0, x)
            if callback is not None:
                callback(t, x)
            if bar is not None:
                bar.update()
        return x
    _check_standardised_lam(lam, x, J)
    P, d = x.shape[0], x.shape[2]
    Xt = _k.to_tiles(x)
    X0t = Xt.copy() if visible is not None else None
    vis_t = None if visible is None else _k.to_tiles(np.repeat(visible[..., None], d, axis=2))
    Xs, H, new = _k.tiles_like(Xt), _k.tiles_like(Xt), _k.tiles_like(Xt)
    Et = np.empty(Xt.shape[:2] + Xt.shape[3:], dtype=x.dtype)
    Jb = _k.sweep_bounds(Xt, J)
    for t in range(1, steps + 1):
        if t == 1 and mask is not None:
            Xt = _k.to_tiles(_step(x, J, lam, mask, clamp, eps))
        else:
            _k.standardize_tiles(Xt, eps, Xs)
            _k.sweep(Xs, J, lam, clamp, 0.0, 0, False, H, Et, Jb)
            _k.residual_mean_norm_tiles(Xt, H, 0.5, NORM_EPS, new)
            Xt, new = new, Xt
        if vis_t is not None:
            np.copyto(Xt, X0t, where=vis_t)
        if callback is not None:
            callback(t, _k.from_tiles(Xt, P))
        if bar is not None:
            bar.update()
    return _k.from_tiles(Xt, P)


def damico_step(
    x, J, lam, mask=None, *, clamp: float = SCORE_CLAMP, eps: float = STD_EPS, fast: bool = True
) -> np.ndarray:
    """One step of the notebook's dynamics (see the module docstring).

    Parameters
    ----------
    x : array_like, shape (P, N, d)
        Spins.
    J : array_like, shape (N, N, d, d)
        Couplings (diagonal blocks ignored).
    lam : float
        Inverse temperature (lam_eval), > 0.
    mask : array_like of bool, shape (P, N), optional
        The masked task's mask, for the first step only: statistics over visible tokens,
        masked tokens not standardised and not attended to.
    clamp : float
        Clamp of the scores (20 in the notebook).
    eps : float
        Added to the standard deviation (1e-9 in the notebook).
    fast : bool
        Use the fused field kernel (with its score clamp) for the steps without a mask;
        False: plain numpy everywhere.

    Returns
    -------
    ndarray, shape (P, N, d)
        ``x + h/2``, every token divided by the image's mean token norm.
    """
    x, J = check_spins_couplings(x, J)
    lam = check_positive(lam, "lam")
    mask = _check_mask(mask, x.shape[:2])
    clamp = check_positive(clamp, "clamp")
    return _run(x, J, lam, 1, mask, clamp, eps, fast)


def damico_run(
    x0,
    J,
    lam,
    steps: int,
    mask=None,
    *,
    clamp_visible: bool = False,
    callback: Callable[[int, np.ndarray], None] | None = None,
    clamp: float = SCORE_CLAMP,
    eps: float = STD_EPS,
    fast: bool = True,
    progress: bool = False,
    device: str | None = None,
) -> np.ndarray:
    """Iterate the notebook's dynamics for ``steps`` steps; only the last state is kept.

    Parameters
    ----------
    x0 : array_like, shape (P, N, d)
        Initial spins (masked tokens set to zero in the masked task).
    J : array_like, shape (N, N, d, d)
    lam : float
        Inverse temperature (lam_eval).
    steps : int
        Number of steps, >= 0 (0 returns ``x0`` as it is).
    mask : array_like of bool, shape (P, N), optional
        The masked task's mask; it acts on the first step only (see :func:`damico_step`).
    clamp_visible : bool
        Reset the visible tokens (``~mask``) to their initial values after every step.
    callback : callable, optional
        ``callback(t, x)`` after every step with the state x(t), shape (P, N, d).
    clamp, eps, fast
        As in :func:`damico_step`.
    progress : bool
        Show a progress bar.
    device : str, optional
        As in :func:`spinsa.run`: None or ``"numba"`` (the default), ``"cpu"``, ``"cuda"``,
        ``"cuda:<k>"`` or ``"auto"``. On a torch device every step, the masked first one
        included, runs there (``fast`` does not apply).

    Returns
    -------
    ndarray, shape (P, N, d)
        x(steps).
    """
    x, J = check_spins_couplings(x0, J, x_name="x0")
    lam = check_positive(lam, "lam")
    steps = check_count(steps, "steps")
    mask = _check_mask(mask, x.shape[:2])
    clamp = check_positive(clamp, "clamp")
    if clamp_visible and mask is None:
        raise ValueError("clamp_visible=True needs the mask of the visible tokens")
    dev = _torch_dynamics.dynamics_device(device)
    if dev is not None:
        return _run_torch(
            x, J, lam, steps, mask, clamp_visible, clamp, eps, callback, progress, dev
        )
    with progress_bar(steps, "dynamics (damico2024)", "step", enabled=progress) as bar:
        return _run(x, J, lam, steps, mask, clamp, eps, fast, clamp_visible, callback, bar)


def _check_standardised_lam(lam, x, J) -> None:
    """lam must keep the scores of standardised spins finite: |xs_i| <= sqrt(d (N - 1))."""
    N, d = x.shape[1], x.shape[2]
    check_lam(lam, np.full((1, 1, d), np.sqrt(max(N - 1, 1)), x.dtype), J)


def _run_torch(x, J, lam, steps, mask, clamp_visible, clamp, eps, callback, progress, dev):
    """:func:`damico_run` on a torch device (:mod:`spinsa._torch_dynamics`), checked arguments."""
    _check_standardised_lam(lam, x, J)
    desc = f"dynamics (damico2024, {dev.type})"
    with progress_bar(steps, desc, "step", enabled=progress) as bar:
        return _torch_dynamics.damico_run(
            x, J, lam, steps, dev, mask=mask, clamp_visible=clamp_visible, clamp=clamp,
            eps=eps, norm_eps=NORM_EPS, callback=callback, bar=bar,
        )  # fmt: skip
