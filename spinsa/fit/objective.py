"""The pseudo-likelihood objective (docs/model.md, 'The objective'), its gradient, and the
checks on the data.

    L(J) = (1/P) Σ_μ Σ_i e_i(ξ^μ; J),   e_i = -(1/λ) log Σ_{j≠i} exp(λ ξ_i·J_ij ξ_j)
    ∂L/∂J_ij = -(1/P) Σ_μ α_ij(ξ^μ) ξ^μ_i (ξ^μ_j)^T,   ∂L/∂J_ii = 0

e_i depends on row i of J only, so every row is an independent problem. The arithmetic is
done by the fused numba kernels of :mod:`spinsa.kernels.objective` (parallel over rows, sums
over samples accumulated in float64); the functions here validate and allocate.
"""

from __future__ import annotations

import warnings

import numpy as np

from spinsa._checks import (
    check_choice,
    check_positive,
    check_spins,
    check_spins_couplings,
    compute_dtype,
)
from spinsa.kernels import normalised as _kn
from spinsa.kernels import objective as _k

__all__ = [
    "pl_loss_and_grad",
    "pl_row_loss_and_grad",
    "normalised_loss_and_grad",
    "check_patterns",
    "UNIT_TOLERANCE",
]

UNIT_TOLERANCE = 1e-3  # largest | |xi_i| - 1 | accepted as a unit spin


def _clamp(score_clamp) -> float:
    """The kernels' clamp: ``inf`` for none; a positive finite number otherwise."""
    return np.inf if score_clamp is None else check_positive(score_clamp, "score_clamp")


def full_objective(xi: np.ndarray, score_clamp: float | None = None, loss: str = "pl"):
    """``f(J, lam, grad_out) -> L`` bound to validated patterns (no validation per call).

    ``loss="pl"``: the paper's loss, the patterns streaming through the kernel in chunks (no
    copy of them is kept); ``"normalised"``: the normalised pseudo-likelihood.
    """
    if loss == "normalised":
        return lambda J, lam, out: _kn.loss_and_grad(xi, xi, J, lam, out)
    clamp = _clamp(score_clamp)
    return lambda J, lam, out: _k.loss_and_grad(xi, J, lam, out, clamp)


def row_objective(xi: np.ndarray, score_clamp: float | None = None, loss: str = "pl"):
    """``f(J_row, lam, i, grad_row_out) -> L_i`` bound to validated patterns.

    Keeps one chunked copy of the patterns, shared by the rows' threads (``loss="pl"``).
    """
    if loss == "normalised":
        return lambda J_row, lam, i, out: _kn.row_loss_and_grad(xi, xi, J_row, lam, i, out)
    clamp = _clamp(score_clamp)
    chunks = _k.chunks(xi)
    return lambda J_row, lam, i, out: _k.row_loss_and_grad(
        xi, J_row, lam, i, out, tiles=chunks, clamp=clamp
    )


def _site_states(x_site, xi: np.ndarray) -> np.ndarray:
    """``x_site`` checked against the patterns ``xi`` (same shape and dtype)."""
    x_site = check_spins(x_site, "x_site", xi.dtype)
    if x_site.shape != xi.shape:
        raise ValueError(
            f"x_site has shape {x_site.shape}; it must have the patterns' shape {xi.shape} "
            "(row i reads x_site[:, i] and xi[:, j] for j != i)"
        )
    return x_site


def pl_loss_and_grad(
    xi, J, lam: float, score_clamp: float | None = None, x_site=None
) -> tuple[float, np.ndarray]:
    """Pseudo-likelihood objective and its closed-form gradient.

    Parameters
    ----------
    xi : array_like, shape (P, N, d)
        Training patterns (any real spins; unit spins in the model).
    J : array_like, shape (N, N, d, d)
        Couplings; the diagonal blocks J_ii are ignored.
    lam : float
        Inverse temperature λ > 0 of the softmax.
    score_clamp : float, optional
        Scores are min(s_ij, score_clamp) before λ (the published notebook: 20); where the
        clamp acts the pair gets no gradient.
    x_site : array_like, shape (P, N, d), optional
        Row-matched states: e_i is evaluated with x_i = ``x_site[μ, i]`` and the other spins
        from ``xi[μ]`` (the model term of contrastive divergence with single-site
        resampling). Not with ``score_clamp``.

    Returns
    -------
    loss : float
        L(J) = (1/P) Σ_μ Σ_i e_i(ξ^μ; J).
    grad : ndarray, shape (N, N, d, d)
        ∂L/∂J_ij = -(1/P) Σ_μ α_ij(ξ^μ) ξ^μ_i (ξ^μ_j)^T, zero diagonal blocks; float32 unless
        ``xi`` or ``J`` is float64.
    """
    xi, J = check_spins_couplings(xi, J, x_name="xi")
    if xi.shape[0] == 0:
        raise ValueError("xi is empty (0 patterns); the objective is an average over patterns")
    lam = check_positive(lam, "lam")
    grad = np.empty_like(J)
    if x_site is not None:
        if score_clamp is not None:
            raise ValueError("x_site and score_clamp cannot be combined; leave one out")
        loss = _kn.loss_and_grad(_site_states(x_site, xi), xi, J, lam, grad, with_norm=False)
        grad /= lam  # the plain kernel computes lam e_i
        return float(loss) / lam, grad
    loss = _k.loss_and_grad(xi, J, lam, grad, _clamp(score_clamp))
    return float(loss), grad


def normalised_loss_and_grad(xi, J, lam: float, x_site=None) -> tuple[float, np.ndarray]:
    """The normalised pseudo-likelihood and its closed-form gradient (docs/model.md, 'The
    normalised pseudo-likelihood').

    L(J) = -(1/P) Σ_μ Σ_i log p(ξ_i | ξ_\\i), the conditional density on S^{d-1} at β = λ:

        L = -(1/P) Σ_μ Σ_i [log Σ_{j≠i} exp(λ ξ_i·J_ij ξ_j) - log Σ_{j≠i} Z_d(λ|J_ij ξ_j|)]
        ∂L/∂J_ij = -(λ/P) Σ_μ [α_ij ξ_i - w_ij A_d(κ_ij) h_ij/|h_ij|] ξ_jᵀ

    with h_ij = J_ij ξ_j, κ_ij = λ|h_ij|, w_ij = Z_d(κ_ij)/Σ_k Z_d(κ_ik) (a zero block h_ij = 0
    contributes |S^{d-1}| to the normaliser and nothing to the second term). Unlike the
    paper's loss it is bounded below and needs no norm constraint.

    Parameters
    ----------
    xi : array_like, shape (P, N, d)
        Unit spins.
    J : array_like, shape (N, N, d, d)
        Couplings; the diagonal blocks are ignored.
    lam : float
        λ > 0, the inverse temperature β = λ of the conditionals.
    x_site : array_like, shape (P, N, d), optional
        Row-matched data: row i is fitted on x_i = ``x_site[μ, i]`` given the other spins of
        ``xi[μ]`` (states in which site i was just drawn from its conditional).

    Returns
    -------
    loss : float
    grad : ndarray, shape (N, N, d, d)
        Zero diagonal blocks; float32 unless ``xi`` or ``J`` is float64.
    """
    xi, J = check_spins_couplings(xi, J, x_name="xi")
    if xi.shape[0] == 0:
        raise ValueError("xi is empty (0 patterns); the objective is an average over patterns")
    lam = check_positive(lam, "lam")
    xs = xi if x_site is None else _site_states(x_site, xi)
    grad = np.empty_like(J)
    loss = _kn.loss_and_grad(xs, xi, J, lam, grad)
    return float(loss), grad


def pl_row_loss_and_grad(
    xi, J_row, lam: float, i: int, score_clamp: float | None = None
) -> tuple[float, np.ndarray]:
    """The objective of one site, L_i = (1/P) Σ_μ e_i(ξ^μ), and its gradient in row i of J.

    Parameters
    ----------
    xi : array_like, shape (P, N, d)
    J_row : array_like, shape (N, d, d)
        Row i of the couplings, ``J[i]``; the block ``J_row[i]`` is ignored.
    lam : float
    i : int
        The site, 0 <= i < N.
    score_clamp : float, optional
        As in :func:`pl_loss_and_grad`.

    Returns
    -------
    loss : float
    grad : ndarray, shape (N, d, d)
        ∂L_i/∂J_ij, with ``grad[i] = 0``.
    """
    J_row = np.asarray(J_row)
    if J_row.ndim != 3:
        raise ValueError(f"J_row must have shape (N, d, d), got {J_row.shape}")
    xi = np.asarray(xi)
    dtype = compute_dtype(xi, J_row)
    xi = check_spins(xi, "xi", dtype)
    N, d = xi.shape[1], xi.shape[2]
    if J_row.shape != (N, d, d):
        raise ValueError(
            f"J_row has shape {J_row.shape}; with xi of shape {xi.shape} it must be ({N}, {d}, {d})"
        )
    if xi.shape[0] == 0:
        raise ValueError("xi is empty (0 patterns); the objective is an average over patterns")
    J_row = np.ascontiguousarray(J_row, dtype=dtype)
    if not np.isfinite(J_row).all():
        raise ValueError("J_row contains NaN or infinite values")
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < N:
        raise ValueError(f"i must be an integer site index in [0, {N}), got {i!r}")
    lam = check_positive(lam, "lam")
    grad = np.empty_like(J_row)
    loss = _k.row_loss_and_grad(xi, J_row, lam, int(i), grad, clamp=_clamp(score_clamp))
    return float(loss), grad


def check_patterns(xi, unit_spins: str = "warn", dtype=None, name: str = "xi") -> np.ndarray:
    """Validate training patterns and decide what to do with spins that are not unit vectors.

    Parameters
    ----------
    xi : array_like, shape (P, N, d)
        Patterns; finite, at least one pattern and two tokens.
    unit_spins : {"warn", "normalize", "ignore"}
        When some token norm differs from 1 by more than ``UNIT_TOLERANCE`` (1e-3): warn
        (``UserWarning``) and return the patterns as given; project every token on the unit
        sphere (zero tokens stay zero, with a warning); or accept them silently.
    dtype : numpy dtype, optional
        Dtype of the returned array (default: float32 unless ``xi`` is float64).

    Returns
    -------
    ndarray, shape (P, N, d)
        C-contiguous patterns in ``dtype``.
    """
    check_choice(unit_spins, "unit_spins", ("warn", "normalize", "ignore"))
    xi = check_spins(xi, name, dtype)
    if xi.shape[0] == 0:
        raise ValueError(f"{name} is empty (0 patterns); a fit needs at least one pattern")
    if unit_spins == "ignore":
        return xi
    norms = np.sqrt(np.einsum("pia,pia->pi", xi, xi, dtype=np.float64))
    off = np.abs(norms - 1.0) > UNIT_TOLERANCE
    if not off.any():
        return xi
    n_off, worst = int(off.sum()), float(np.abs(norms - 1.0).max())
    if unit_spins == "warn":
        warnings.warn(
            f"{name}: {n_off} of {norms.size} tokens are not unit spins (largest | |xi_i| - 1 | "
            f"= {worst:.3g}); they are fitted as given. Pass unit_spins='normalize' to project "
            "them on the sphere, or unit_spins='ignore' to silence this warning.",
            UserWarning,
            stacklevel=3,
        )
        return xi
    zero = norms == 0
    if zero.any():
        warnings.warn(
            f"{name}: {int(zero.sum())} tokens are zero spins and stay zero after normalisation",
            UserWarning,
            stacklevel=3,
        )
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=~zero)
    return np.ascontiguousarray(xi * scale[..., None].astype(xi.dtype))


# ----------------------------------------------------------------- constraint geometry
def constrained_grad(J: np.ndarray, G: np.ndarray, constraint: str, l2: float) -> np.ndarray:
    """The gradient that vanishes at a constrained optimum (float64, shape of J).

    ``"global"``: G minus its component along J (the gradient on the sphere |J| = const);
    ``"row"``: the same row by row; ``"l2"``: G + l2 J; ``"none"``: G.
    """
    J64, G64 = J.astype(np.float64, copy=False), G.astype(np.float64)
    if constraint == "global":
        nn = float(np.vdot(J64, J64))
        return G64 if nn == 0.0 else G - (np.vdot(J64, G64) / nn) * J64
    if constraint == "row":
        N = J.shape[0]
        jr, gr = J64.reshape(N, -1), G64.reshape(N, -1)
        nn = np.einsum("ik,ik->i", jr, jr)
        coef = np.divide(np.einsum("ik,ik->i", jr, gr), nn, out=np.zeros(N), where=nn > 0)
        return (gr - coef[:, None] * jr).reshape(G.shape)
    if constraint == "none":
        return G64
    return G64 + l2 * J64


def row_norms(J: np.ndarray) -> np.ndarray:
    """|J_i·| for every row, shape (N,), float64."""
    N = J.shape[0]
    return np.sqrt(np.einsum("ik,ik->i", J.reshape(N, -1), J.reshape(N, -1), dtype=np.float64))


def frobenius(J) -> float:
    """|J| in float64."""
    J = np.asarray(J).ravel()
    sq = np.dot(J, J) if J.dtype == np.float64 else np.einsum("k,k->", J, J, dtype=np.float64)
    return float(np.sqrt(sq))
