"""The two-body vector-spin model: is the Hebb rule the pseudo-likelihood optimum?

Same spins and couplings as the attention network, but no attention: the field on token i
is h_i = sum_{j != i} J_ij x_j, and the conditional density of x_i on the unit sphere
S^{d-1} is von Mises-Fisher,

    p(x_i | x_{-i}) = exp(beta x_i . h_i) / Z_d(beta |h_i|),
    Z_d(kappa) = (2 pi)^{d/2} I_{d/2-1}(kappa) / kappa^{d/2-1},

with I_nu the modified Bessel function of the first kind; Z_d(0) = 2 pi^{d/2} / Gamma(d/2)
is the area of the sphere, and d log Z_d / d kappa = A_d(kappa) = I_{d/2}(kappa) /
I_{d/2-1}(kappa) is the mean resultant length. Its negative log pseudo-likelihood over P
patterns,

    L(J) = -(1/P) sum_mu sum_i log p(xi^mu_i | xi^mu_{-i}),

is convex in J (log Z_d(beta |h|) is the log-partition function of an exponential family in
its natural parameter beta h, and h is linear in J), with the closed-form gradient

    dL/dJ_ij = (1/P) sum_mu g^mu_i (xi^mu_j)^T,   g_i = beta (A_d(kappa_i) h_i / |h_i| - xi_i).

At J = 0 the gradient is -beta (1/P) sum_mu xi_i xi_j^T: minus the Hebbian couplings. L is
unbounded below when the patterns can be fitted exactly (|J| -> infinity along a direction
that aligns every h_i with xi_i), so the fit adds an L2 penalty (l2/2) |J|^2 (then the optimum
is unique) or fixes |J|. For a single pattern the optimum is exactly along the Hebbian
couplings; :func:`twobody_vs_hebbian` follows how it departs from them as P grows.

Numerics: log Z_d and A_d come from :mod:`spinsa.vmf` (stable from kappa = 0 to 1e300).
The diagonal blocks J_ii are ignored (treated as zero), as everywhere in spinsa.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from spinsa import _draw
from spinsa._checks import (
    check_choice,
    check_count,
    check_couplings,
    check_positive,
    check_spins,
)
from spinsa.analysis._results import AnalysisResult
from spinsa.analysis.hebbian import coupling_cosine, coupling_matrix, pair_cosines
from spinsa.couplings import hebbian_couplings, zero_diagonal
from spinsa.vmf import _both as _vmf_both
from spinsa.vmf import log_partition, log_sphere_area, mean_resultant_length

__all__ = [
    "TwoBodyFit",
    "TwoBodyVsHebbian",
    "fit_twobody",
    "log_partition",
    "log_sphere_area",
    "mean_resultant_length",
    "twobody_fields",
    "twobody_log_density",
    "twobody_log_likelihoods",
    "twobody_nll",
    "twobody_nll_and_grad",
    "twobody_vs_hebbian",
]


def twobody_log_density(x, h, beta: float = 1.0) -> np.ndarray:
    """log p(x | h) = beta x . h - log Z_d(beta |h|), a normalised density on S^{d-1}.

    Parameters
    ----------
    x : array_like, shape (..., d)
        Points on the unit sphere (not checked: the density is meant for unit vectors).
    h : array_like, shape broadcastable with ``x``
        Local fields.
    beta : float

    Returns
    -------
    ndarray of float64, shape (...)
        Its exponential integrates to 1 over the sphere (surface measure; counting measure on
        {-1, +1} for d = 1).
    """
    beta = check_positive(beta, "beta")
    x = np.asarray(x, dtype=np.float64)
    h = np.asarray(h, dtype=np.float64)
    x, h = np.broadcast_arrays(x, h)
    if x.ndim < 1:
        raise ValueError("x and h must have a last axis of length d")
    kappa = beta * np.linalg.norm(h, axis=-1)
    return beta * np.einsum("...a,...a->...", x, h) - log_partition(kappa, x.shape[-1])


def _matrix(J: np.ndarray) -> np.ndarray:
    """(N d, N d) matrix of J with the diagonal blocks set to zero (a copy, float64)."""
    return coupling_matrix(zero_diagonal(J.astype(np.float64)))


def _blocks(M: np.ndarray, N: int, d: int) -> np.ndarray:
    """Inverse of :func:`_matrix` (shape (N, N, d, d))."""
    return np.ascontiguousarray(M.reshape(N, d, N, d).transpose(0, 2, 1, 3))


def twobody_fields(x, J) -> np.ndarray:
    """h_i = sum_{j != i} J_ij x_j, the two-body local fields: x (P, N, d), J (N, N, d, d)
    -> (P, N, d) float64."""
    x = check_spins(x, dtype=np.float64)
    J = check_couplings(J, x.shape[1], x.shape[2], dtype=np.float64)
    P, N, d = x.shape
    return (x.reshape(P, N * d) @ _matrix(J).T).reshape(P, N, d)


def twobody_log_likelihoods(xi, J, beta: float = 1.0) -> np.ndarray:
    """log p(xi^mu_i | xi^mu_{-i}) for every pattern and token: xi (P, N, d) of unit spins,
    J (N, N, d, d) -> (P, N) float64."""
    return twobody_log_density(xi, twobody_fields(xi, J), beta)


def _nll_and_grad_matrix(X: np.ndarray, M: np.ndarray, N: int, d: int, beta: float):
    """Loss and gradient on the (N d, N d) matrix; X: (P, N d). Gradient has zero blocks."""
    P = X.shape[0]
    H = X @ M.T
    h = H.reshape(P, N, d)
    kappa = beta * np.linalg.norm(h, axis=-1).reshape(-1)
    logZ, A = _vmf_both(kappa, d)  # one pass of the Bessel kernel for both
    logZ_sum = logZ.sum()
    R = np.divide(A, kappa, out=np.full_like(A, 1.0 / d), where=kappa > 0).reshape(P, N, 1)
    loss = (logZ_sum - beta * np.vdot(X, H)) / P
    g = beta * (beta * R * h - X.reshape(P, N, d))
    G = g.reshape(P, N * d).T @ X / P
    for i in range(N):
        G[i * d : (i + 1) * d, i * d : (i + 1) * d] = 0.0
    return float(loss), G


def twobody_nll_and_grad(xi, J, beta: float = 1.0) -> tuple[float, np.ndarray]:
    """The negative log pseudo-likelihood L(J) and its gradient (see the module docstring).

    Parameters
    ----------
    xi : ndarray, shape (P, N, d)
        Patterns of unit spins.
    J : ndarray, shape (N, N, d, d)
        Couplings (diagonal blocks ignored).
    beta : float

    Returns
    -------
    loss : float
    grad : ndarray of float64, shape (N, N, d, d)
        dL/dJ, with zero diagonal blocks.
    """
    xi = check_spins(xi, "xi", dtype=np.float64)
    J = check_couplings(J, xi.shape[1], xi.shape[2], dtype=np.float64)
    beta = check_positive(beta, "beta")
    P, N, d = xi.shape
    loss, G = _nll_and_grad_matrix(xi.reshape(P, N * d), _matrix(J), N, d, beta)
    return loss, _blocks(G, N, d)


def twobody_nll(xi, J, beta: float = 1.0) -> float:
    """L(J) of :func:`twobody_nll_and_grad`, without the gradient."""
    return float(-twobody_log_likelihoods(xi, J, beta).sum() / np.shape(xi)[0])


@dataclass(frozen=True)
class TwoBodyFit(AnalysisResult):
    """Pseudo-likelihood optimum of the two-body model (the arguments of :func:`fit_twobody`
    are kept as attributes: ``beta``, ``l2``, ``norm``, ``backend``).

    Attributes
    ----------
    J : ndarray of float64, shape (N, N, d, d)
        The optimum (zero diagonal blocks).
    loss : float
        L(J), the negative log pseudo-likelihood per pattern, without the penalty.
    objective : float
        What was minimised: L(J) + (l2/2) |J|^2, or L(J) at fixed |J|.
    grad_norm : float
        Norm of the gradient of the objective at the optimum (projected on the sphere
        |J| = norm when the norm is fixed).
    n_iter, converged, message
        The optimiser's iterations, success and message.
    n_patterns : int
    """

    J: np.ndarray
    loss: float = float("nan")
    objective: float = float("nan")
    grad_norm: float = float("nan")
    beta: float = 1.0
    l2: float | None = None
    norm: float | None = None
    n_iter: int = 0
    converged: bool = False
    message: str = ""
    n_patterns: int = 0
    backend: str = "lbfgs"

    def __post_init__(self):
        super().__post_init__()
        if self.J.ndim != 4:
            raise ValueError(f"J must have shape (N, N, d, d), got {self.J.shape}")

    def plot(self, ax=None):
        """The strength |J_ij|_F of every pair of sites, as a map."""
        ax = _draw.axes(ax, figsize=(4.4, 3.6))
        strength = np.sqrt((self.J.astype(np.float64) ** 2).sum(axis=(2, 3)))
        im = ax.imshow(strength, cmap="viridis", interpolation="nearest")
        ax.figure.colorbar(im, ax=ax, shrink=0.85, label=r"$|J_{ij}|_F$")
        ax.set(xlabel="j", ylabel="i", title=f"two-body fit (loss {self.loss:.4g})")
        return ax


def _fit_lbfgs(X, M0, N, d, beta, l2, norm, max_iter, tol) -> dict:
    """Full-batch L-BFGS on the (N d, N d) matrix M: on M itself with the penalty, or on a
    direction v with M = norm v / |v| when the norm is fixed."""

    def evaluate(v):
        """The loss, the objective, its gradient in v, and M."""
        r = 1.0 if norm is None else np.linalg.norm(v)
        M = v.reshape(M0.shape) if norm is None else norm * (v / r).reshape(M0.shape)
        loss, G = _nll_and_grad_matrix(X, M, N, d, beta)
        g = G.ravel()
        if norm is None:
            return loss, loss + 0.5 * l2 * np.vdot(v, v), g + l2 * v, M
        u = v / r  # the gradient in v is the tangent part of g, scaled by norm / |v|
        return loss, loss, (norm / r) * (g - np.vdot(g, u) * u), M

    options = {"maxiter": max_iter, "ftol": tol, "gtol": tol * 1e-2, "maxcor": 20}

    def fun(v):
        return evaluate(v)[1:3]

    res = minimize(fun, M0.ravel(), jac=True, method="L-BFGS-B", options=options)
    loss, objective, grad, M = evaluate(res.x)
    # the gradient on the sphere |J| = norm, in J's units
    scale = 1.0 if norm is None else np.linalg.norm(res.x) / norm
    return {
        "M": M,
        "loss": loss,
        "objective": float(objective),
        "grad_norm": float(np.linalg.norm(grad) * scale),
        "n_iter": int(res.nit),
        "converged": bool(res.success),
        "message": str(res.message),
    }


_FITTERS = {"lbfgs": _fit_lbfgs}


def fit_twobody(
    xi,
    beta: float = 1.0,
    *,
    l2: float | None = None,
    norm: float | None = None,
    J0=None,
    backend: str = "lbfgs",
    max_iter: int = 2000,
    tol: float = 1e-12,
    seed: int = 0,
) -> TwoBodyFit:
    """Minimise the two-body negative log pseudo-likelihood, with an L2 penalty or fixed norm.

    Parameters
    ----------
    xi : ndarray, shape (P, N, d)
        Training patterns of unit spins.
    beta : float
        Inverse temperature of the conditional densities.
    l2 : float, optional
        Penalty strength: minimise L(J) + (l2/2) |J|_F^2 (convex: unique optimum).
    norm : float, optional
        Fixed Frobenius norm |J|_F = norm (the parametrisation J = norm W / |W|).
        Exactly one of ``l2`` and ``norm`` must be given.
    J0 : ndarray, shape (N, N, d, d), optional
        Starting point. Default: 0 with ``l2``; with ``norm`` a random direction drawn with
        ``seed`` (not the Hebbian one, so that agreement with Hebb is not built in).
    backend : {"lbfgs"}
        Full-batch scipy L-BFGS on the closed-form gradient.
    max_iter, tol : int, float
        Iterations, and relative tolerance on the objective (``ftol`` of L-BFGS-B).
    seed : int
        Seed of the random starting direction (used only with ``norm`` and no ``J0``).

    Returns
    -------
    TwoBodyFit
        The optimum ``J``, shape (N, N, d, d), its loss and the optimiser's report.
    """
    xi = check_spins(xi, "xi", dtype=np.float64)
    beta = check_positive(beta, "beta")
    check_choice(backend, "backend", tuple(_FITTERS))
    if (l2 is None) == (norm is None):
        raise ValueError(
            "give exactly one of l2 (penalty strength) and norm (fixed |J|): without either "
            "the pseudo-likelihood is unbounded below as |J| grows"
        )
    l2 = None if l2 is None else check_positive(l2, "l2")
    norm = None if norm is None else check_positive(norm, "norm")
    max_iter = check_count(max_iter, "max_iter", 1)
    tol = check_positive(tol, "tol")
    P, N, d = xi.shape
    if J0 is None:
        shape = (N, N, d, d)
        J0 = np.zeros(shape) if norm is None else np.random.default_rng(seed).standard_normal(shape)
    M0 = _matrix(check_couplings(J0, N, d, dtype=np.float64, name="J0"))
    if norm is not None and not np.any(M0):
        raise ValueError("J0 must be non-zero when the norm is fixed")
    out = _FITTERS[backend](xi.reshape(P, N * d), M0, N, d, beta, l2, norm, max_iter, tol)
    J = _blocks(out.pop("M"), N, d)
    return TwoBodyFit(J=J, beta=beta, l2=l2, norm=norm, n_patterns=P, backend=backend, **out)


@dataclass(frozen=True)
class TwoBodyVsHebbian(AnalysisResult):
    """The two-body optimum against the Hebbian couplings, as the number of patterns grows.

    Attributes
    ----------
    n_patterns : ndarray of int64, shape (K,)
        P for each fit (the first P patterns).
    cosine, mean_pair_cosine : ndarray of float64, shape (K,)
        <J*, J^Hebb>_F / (|J*| |J^Hebb|), and the mean over pairs i != j of cos(J*_ij, J^Hebb_ij).
    loss_fit, loss_hebbian : ndarray of float64, shape (K,)
        L(J*), and L of the Hebbian couplings rescaled to |J*| (what Hebb loses at equal norm).
    norm_fit : ndarray of float64, shape (K,)
        |J*|_F.
    converged : ndarray of bool, shape (K,)
    beta, l2, norm
        As given to :func:`fit_twobody`.
    """

    _coords = {"K": "n_patterns"}

    _same_shape = ("n_patterns cosine mean_pair_cosine loss_fit loss_hebbian norm_fit converged",)
    n_patterns: np.ndarray
    cosine: np.ndarray
    mean_pair_cosine: np.ndarray
    loss_fit: np.ndarray
    loss_hebbian: np.ndarray
    norm_fit: np.ndarray
    converged: np.ndarray
    beta: float = 1.0
    l2: float | None = None
    norm: float | None = None

    def plot(self, ax=None):
        """Cosine of the two-body optimum with the Hebbian couplings (global and mean per
        pair) against the number of patterns.
        """
        ax = _draw.axes(ax)
        ax.semilogx(self.n_patterns, self.cosine, marker="o", color="C0", label="global")
        ax.semilogx(self.n_patterns, self.mean_pair_cosine, marker="s", color="C1", ls="--",
                    label="mean per pair")  # fmt: skip
        _draw.finish(ax, "two-body optimum vs Hebb", "P (patterns)", "cosine")
        return ax


def twobody_vs_hebbian(
    xi,
    n_patterns: Sequence[int],
    beta: float = 1.0,
    *,
    l2: float | None = None,
    norm: float | None = None,
    max_iter: int = 2000,
    tol: float = 1e-12,
) -> TwoBodyVsHebbian:
    """Fit the two-body model on the first P patterns, for each P, and compare with Hebb.

    Parameters
    ----------
    xi : ndarray, shape (P_max, N, d)
        Patterns of unit spins.
    n_patterns : sequence of int
        The values of P, each between 1 and P_max.
    beta, l2, norm, max_iter, tol
        As in :func:`fit_twobody`.

    Returns
    -------
    TwoBodyVsHebbian
        One row per value of P, arrays of shape (K,) with K = ``len(n_patterns)``: the
        cosines to Hebb, both losses, the norm of the fit and whether it converged.
    """
    xi = check_spins(xi, "xi", dtype=np.float64)
    Ps = [check_count(p, "n_patterns[k]", 1) for p in n_patterns]
    if not Ps or max(Ps) > xi.shape[0]:
        raise ValueError(
            f"n_patterns must be a non-empty list of values in [1, {xi.shape[0]}], got {Ps}"
        )
    rows = []
    for P in Ps:
        fit = fit_twobody(xi[:P], beta, l2=l2, norm=norm, max_iter=max_iter, tol=tol)
        K = np.asarray(hebbian_couplings(xi[:P]), dtype=np.float64)
        r, nK = float(np.linalg.norm(fit.J)), float(np.linalg.norm(K))
        loss_hebbian = twobody_nll(xi[:P], K * (r / nK) if nK > 0 else K, beta)
        cos = float(np.nanmean(pair_cosines(fit.J, K)))
        rows.append((P, coupling_cosine(fit.J, K), cos, fit.loss, loss_hebbian, r, fit.converged))
    columns = map(np.asarray, zip(*rows, strict=True))  # in the order of the array fields
    return TwoBodyVsHebbian(*columns, beta=beta, l2=l2, norm=norm)
