"""Planted inverse problems (docs/inverse-problems.md): sample configurations of the attention
model from planted couplings J*, fit them back, and measure how the error falls with the
number of samples M.

- :func:`planted_couplings`: J* of three kinds, ``"hebbian"`` (two random patterns),
  ``"random"`` (asymmetric Gaussian blocks) and ``"lattice"`` (nearest neighbours on a ring,
  symmetric);
- :func:`sample_planted`: M configurations at β = λ, ``"full_sweep"`` (states of
  independent heat-bath Gibbs chains after a burn-in) or ``"row_matched"`` (those states,
  and for every row i the same state with x_i redrawn from its conditional: row i is fitted
  on states in which x_i was just drawn given the others);
- :func:`fit_planted`: the normalised pseudo-likelihood (no constraint), the paper's loss
  (at the planted norm |J*|) or contrastive divergence;
- :func:`recovery_curve`: error |J − J*|/|J*| and cosine against M, with the fitted
  log–log slope of the error.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from spinsa import _draw
from spinsa._checks import (
    check_choice,
    check_count,
    check_couplings,
    check_optimiser_value,
    check_positive,
    check_spins,
)
from spinsa.analysis._results import AnalysisResult
from spinsa.couplings import hebbian_couplings, lattice_couplings
from spinsa.fit import fit_pseudolikelihood, normalised_loss_and_grad, pl_loss_and_grad
from spinsa.fit.convergence import point_mass_norm
from spinsa.sampling import heat_bath_sweeps, row_matched_states

__all__ = [
    "PLANTED_KINDS",
    "SAMPLINGS",
    "FIT_METHODS",
    "planted_couplings",
    "sample_planted",
    "fit_planted",
    "loglog_slope",
    "RecoveryCurve",
    "recovery_curve",
]

PLANTED_KINDS = ("hebbian", "random", "lattice")
SAMPLINGS = ("row_matched", "full_sweep")
FIT_METHODS = ("normalised", "pl", "cd")


def planted_couplings(kind: str, n_tokens: int = 8, d: int = 3, scale: float = 1.0, seed=0):
    """Planted couplings J*, shape (N, N, d, d), zero diagonal blocks.

    ``"hebbian"``: 2 · scale · J^Hebb of two random unit patterns (|J_ij x| about scale for
    a unit x); ``"random"``: every entry N(0, scale²/d), so E|J_ij x|² = scale² for a unit x
    (Frobenius norm about scale · sqrt(d)), J_ij and J_ji independent; ``"lattice"``:
    scale · I_d between neighbours on a ring, else zero.
    """
    check_choice(kind, "kind", PLANTED_KINDS)
    N, d = check_count(n_tokens, "n_tokens", 3), check_count(d, "d", 1)
    scale = check_positive(scale, "scale")
    rng = np.random.default_rng(seed)
    if kind == "hebbian":
        xi = rng.standard_normal((2, N, d))
        xi /= np.linalg.norm(xi, axis=2, keepdims=True)
        J = 2.0 * scale * hebbian_couplings(xi).astype(np.float64)
    elif kind == "random":
        J = rng.standard_normal((N, N, d, d)) * scale / np.sqrt(d)
    else:
        J = lattice_couplings(N, d, coupling=scale)
    J[np.arange(N), np.arange(N)] = 0.0
    return np.ascontiguousarray(J)


def sample_planted(J, lam: float, n_samples: int, sampling: str = "row_matched",
                   burn_in: int = 50, rng=None):  # fmt: skip
    """M configurations of the attention model with couplings J at β = λ.

    Parameters
    ----------
    J : array_like, shape (N, N, d, d)
    lam : float
    n_samples : int
        M, one independent chain per sample, started uniformly on the spheres.
    sampling : {"row_matched", "full_sweep"}
    burn_in : int
        Systematic heat-bath sweeps before a chain's state is kept.
    rng : None, int or numpy Generator

    Returns
    -------
    x : ndarray, shape (M, N, d)
        The chains' states.
    x_site : ndarray, shape (M, N, d), or None
        ``"row_matched"``: ``x_site[m, i]`` is x_i redrawn from its conditional given the
        other spins of ``x[m]``; ``"full_sweep"``: None.
    """
    check_choice(sampling, "sampling", SAMPLINGS)
    J = check_couplings(J, dtype=np.float64)
    N, d = J.shape[0], J.shape[2]
    lam = check_positive(lam, "lam")
    M = check_count(n_samples, "n_samples", 1)
    rng = np.random.default_rng(rng)
    x = rng.standard_normal((M, N, d))
    if d == 1:
        x = np.sign(x) + (x == 0)
    x /= np.linalg.norm(x, axis=2, keepdims=True)
    x = heat_bath_sweeps(x, J, lam, check_count(burn_in, "burn_in", 1), rng)
    return x, (row_matched_states(x, J, lam, rng) if sampling == "row_matched" else None)


def _lbfgs(fun, v0, max_iter: int):
    from scipy.optimize import minimize

    return minimize(fun, v0, jac=True, method="L-BFGS-B",
                    options=dict(maxiter=max_iter, gtol=1e-8, ftol=1e-12)).x  # fmt: skip


def fit_planted(x, lam: float, method: str = "normalised", x_site=None, norm=None,
                l2: float = 0.0, max_iter: int = 500, cd_options=None):  # fmt: skip
    """Fit couplings to samples of the attention model.

    Parameters
    ----------
    x : array_like, shape (M, N, d)
    lam : float
        The λ the samples were drawn at.
    method : {"normalised", "pl", "cd"}
        ``"normalised"``: the normalised pseudo-likelihood with L-BFGS, no constraint (plus
        (l2/2)|J|²); ``"pl"``: the paper's loss with L-BFGS at the fixed Frobenius norm
        ``norm`` (J = norm · W/|W|); ``"cd"``: :func:`spinsa.fit_pseudolikelihood` with
        ``method="cd"`` (single-site chain, ``constraint="none"``, ``cd_options`` passed on;
        it fits ``x`` and ignores ``x_site``).
    x_site : array_like, shape (M, N, d), optional
        Row-matched states (:func:`sample_planted`); both losses then read x_i from it.
    norm : float
        The fixed norm of ``"pl"`` (the planted |J*| in the studies).
    l2 : float
        ``"normalised"``: the penalty's strength, in [0, 1e30] (0: none; the bound of
        :class:`spinsa.fit.FitConfig`'s ``l2``).
    max_iter : int
        L-BFGS iterations, >= 1.

    Returns
    -------
    ndarray, shape (N, N, d, d), float64
        Without a penalty, on samples that the couplings can reproduce exactly (too few, or
        identical), the normalised loss has no finite minimum: a ``RuntimeWarning`` says so
        when |J| passes 100·√(N(N−1))/λ (:func:`spinsa.fit.convergence.point_mass_norm`).
    """
    check_choice(method, "method", FIT_METHODS)
    x = check_spins(x, "x", np.float64)
    if x.shape[0] == 0:
        raise ValueError("x is empty (0 samples); a fit needs at least one sample")
    if x_site is not None:
        x_site = check_spins(x_site, "x_site", np.float64)
        if x_site.shape != x.shape:
            raise ValueError(f"x_site has shape {x_site.shape}; it must have x's, {x.shape}")
    lam = check_positive(lam, "lam")
    l2 = check_optimiser_value(l2, "l2", zero=True, hint="0 (the default) for no penalty")
    max_iter = check_count(max_iter, "max_iter", 1)
    M, N, d = x.shape
    off = ~np.eye(N, dtype=bool)
    J = np.zeros((N, N, d, d))
    if method == "cd":
        opts = dict(constraint="none", epochs=50, batch_size=256, lr=0.02, device="cpu",
                    dtype="float64", init="normal", unit_spins="ignore", seed=0)  # fmt: skip
        opts.update(cd_options or {})
        return fit_pseudolikelihood(x, method="cd", lam=lam, **opts).J
    if method == "normalised":

        def fun(v):
            J[off] = v.reshape(-1, d, d)
            loss, G = normalised_loss_and_grad(x, J, lam, x_site=x_site)
            return loss + 0.5 * l2 * (v @ v), G[off].ravel() + l2 * v

        J[off] = _lbfgs(fun, np.zeros(off.sum() * d * d), max_iter).reshape(-1, d, d)
        limit, size = point_mass_norm(N, lam), np.linalg.norm(J)
        if l2 == 0 and size > limit:
            warnings.warn(
                f"the normalised pseudo-likelihood diverged on these M = {M} samples: |J| = "
                f"{size:.4g} > {limit:.4g} = 100 sqrt(N (N - 1)) / lam; it has "
                "no finite minimum on samples the couplings reproduce exactly (too few, or "
                "identical); give more samples or l2 > 0",
                RuntimeWarning,
                stacklevel=2,
            )
        return J
    norm = check_positive(norm, "norm")

    def fun_pl(v):
        nv = np.linalg.norm(v)
        J[off] = (v * (norm / nv)).reshape(-1, d, d)
        loss, G = pl_loss_and_grad(x, J, lam, x_site=x_site)
        g = G[off].ravel()
        return loss, (g - (v @ g) / nv**2 * v) * (norm / nv)

    v0 = np.random.default_rng(0).standard_normal(off.sum() * d * d)
    v = _lbfgs(fun_pl, v0, max_iter)
    J[off] = (v * (norm / np.linalg.norm(v))).reshape(-1, d, d)
    return J


def _sample_sizes(n_samples) -> np.ndarray:
    """The sizes M of a recovery curve, increasing: at least two, distinct, each >= 1."""
    if np.ndim(n_samples) != 1:
        raise ValueError(
            f"n_samples must be a list of sample sizes M (at least two), got {n_samples!r}"
        )
    Ms = [check_count(m, "n_samples[...]", 1) for m in np.asarray(n_samples).tolist()]
    repeated = sorted({m for m in Ms if Ms.count(m) > 1})
    if repeated:
        raise ValueError(f"n_samples repeats {repeated}; give each sample size M once")
    if len(Ms) < 2:
        raise ValueError(
            f"n_samples must hold at least two distinct sample sizes M, got {Ms}: the slope "
            "is fitted through log(error) against log(M)"
        )
    return np.asarray(sorted(Ms), dtype=np.int64)


def loglog_slope(n_samples, errors) -> float:
    """The least-squares slope of log(error) against log(M).

    ``n_samples`` (K,) at least two distinct M >= 1, ``errors`` (K,) finite and > 0.
    """
    M = np.asarray(n_samples, dtype=np.float64)
    errors = np.asarray(errors, dtype=np.float64)
    if M.ndim != 1 or errors.shape != M.shape:
        raise ValueError(
            f"n_samples and errors must be 1-d of one length, got shapes {M.shape} and "
            f"{errors.shape}"
        )
    if not (np.isfinite(M).all() and (M >= 1).all()) or np.unique(M).size < 2:
        raise ValueError(
            f"n_samples must hold at least two distinct sample sizes M >= 1, got {M.tolist()}"
        )
    if not (np.isfinite(errors).all() and (errors > 0).all()):
        raise ValueError(f"errors must be finite and > 0 to take their log, got {errors.tolist()}")
    return float(np.polyfit(np.log(M), np.log(errors), 1)[0])


@dataclass(frozen=True)
class RecoveryCurve(AnalysisResult):
    """Reconstruction of planted couplings against the number of samples.

    Attributes
    ----------
    n_samples : ndarray, shape (K,)
        The values of M.
    error : ndarray, shape (K,)
        |J − J*| / |J*| of the fit on M samples.
    cosine : ndarray, shape (K,)
        ⟨J, J*⟩ / (|J| |J*|).
    slope : float
        Fitted log–log slope of the error against M.
    kind, sampling, method : str
        The planted couplings, the sampling and the fitting method.
    """

    _coords = {"K": "n_samples"}

    n_samples: np.ndarray
    error: np.ndarray
    cosine: np.ndarray
    slope: float
    kind: str = ""
    sampling: str = ""
    method: str = ""

    def plot(self, ax=None, *, label=None, **style):
        """The error |J − J*| / |J*| against the number of samples, log–log, with the
        fitted slope in the legend.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure when None.
        label : str, optional
            Of the curve; by default "kind, method, sampling".
        **style
            Passed to ax.loglog (color, ls, marker...).

        Returns
        -------
        matplotlib.axes.Axes
        """
        ax = _draw.axes(ax)
        name = label or ", ".join(s for s in (self.kind, self.method, self.sampling) if s)
        slope = "" if not np.isfinite(self.slope) else f" (slope {self.slope:.2f})"
        ax.loglog(self.n_samples, self.error, label=name + slope, **{"marker": "o", **style})
        _draw.finish(ax, "error against samples", "M (samples)", "|J − J*| / |J*|", legend=6)
        return ax


def recovery_curve(J_star, lam: float, n_samples, sampling: str = "row_matched",
                   method: str = "normalised", kind: str = "", seed=0,
                   **fit_options) -> RecoveryCurve:  # fmt: skip
    """Sample M configurations from ``J_star`` for every M, fit, and measure the error.

    The samples of the largest M are drawn once and the smaller sets are their first M
    (nested sets, so the curve is smooth in M). ``fit_options`` go to :func:`fit_planted`
    (``"pl"`` is fitted at the planted norm |J*|).

    Parameters
    ----------
    J_star : array_like, shape (N, N, d, d)
        The planted couplings, not all zero (the error is relative to |J*|).
    lam : float
    n_samples : sequence of int, length K >= 2
        The sample sizes M, distinct, each >= 1 (the slope needs two).
    sampling, method, kind, seed
        As in :func:`sample_planted` and :func:`fit_planted`; ``kind`` labels the result.

    Returns
    -------
    RecoveryCurve
    """
    check_choice(sampling, "sampling", SAMPLINGS)
    check_choice(method, "method", FIT_METHODS)
    J_star = check_couplings(J_star, dtype=np.float64, name="J_star")
    ref = float(np.linalg.norm(J_star))
    if not ref > 0:
        raise ValueError(
            "J_star is all zeros: the error |J - J*| / |J*| and the cosine are relative to "
            "|J*|; plant non-zero couplings (planted_couplings)"
        )
    Ms = _sample_sizes(n_samples)
    x, x_site = sample_planted(J_star, lam, int(Ms[-1]), sampling, rng=seed)
    if method == "pl":
        fit_options.setdefault("norm", ref)
    errors, cosines = [], []
    for M in Ms:
        xs = None if x_site is None else x_site[:M]
        J = fit_planted(x[:M], lam, method, x_site=xs, **fit_options)
        norm = float(np.linalg.norm(J))
        if not norm > 0:
            raise ValueError(
                f"the {method} fit on M = {M} samples returned zero couplings (its gradient "
                "vanished at J = 0), whose cosine with J* is undefined; use more samples or "
                "another method"
            )
        errors.append(float(np.linalg.norm(J - J_star)) / ref)
        cosines.append(float(np.vdot(J, J_star)) / (norm * ref))
    errors_arr = np.asarray(errors)
    return RecoveryCurve(
        n_samples=Ms, error=errors_arr, cosine=np.asarray(cosines),
        slope=loglog_slope(Ms, errors_arr), kind=kind, sampling=sampling, method=method,
    )  # fmt: skip
