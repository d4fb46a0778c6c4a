"""When a fit counts as converged, and how the reports say it.

Two criteria, one per kind of optimiser:

- **L-BFGS** (``backend="lbfgs"``): scipy's own status. The fit converged when L-BFGS-B
  stopped on one of its tolerances (projected gradient <= ``gtol``, or relative decrease of
  the objective <= ``ftol``) before ``max_iter`` iterations; with ``constraint="row"``,
  when every row did. A cap reached or a failed line search is "not converged".
- **Divergence**, before either: a fit whose |J| can grow without bound (contrastive
  divergence; the normalised pseudo-likelihood with ``constraint="none"``, whose optimum is
  at infinity on degenerate data) stops once |J| exceeds :func:`divergence_norm`, and is
  "not converged", whatever its curve did (:func:`mark_diverged`).
- **Epochs** (``backend="torch"``: the minibatch pseudo-likelihood, CD, BPTT): a plateau of
  the monitored curve, :func:`plateau_index`: over the last ``patience`` evaluations its
  best value improved by less than ``min_improvement`` (relative) on the best value before
  them. This is spinsa's one stopping rule, :func:`spinsa._convergence.stopping_epoch`,
  with ``rel_tol = min_improvement``, on the evaluated points of the curve. The monitored
  curve is the validation loss when the fit holds out a validation split
  (``validation_fraction > 0``), else the method's own training loss: the full-batch L(J)
  for the pseudo-likelihood, the epoch's mean minibatch loss for CD and BPTT. With
  ``early_stopping=True`` the fit stops there; without it the fit runs its epochs and
  ``converged`` says whether the criterion was met on the way.

Reports draw a verdict from a fit only when it converged; otherwise they print
:func:`spinsa._convergence.not_converged_text` ("not converged after N iterations — no
verdict").
"""

from __future__ import annotations

import warnings

import numpy as np

from spinsa._convergence import not_converged_text, stopping_epoch

__all__ = [
    "plateau_index",
    "plateau_criterion",
    "lbfgs_criterion",
    "convergence_words",
    "divergence_norm",
    "point_mass_norm",
]


def plateau_index(curve, patience: int, min_improvement: float) -> int | None:
    """The first index at which a loss curve has stopped improving, or None.

    With b(e) = min(curve[0..e]), the first e >= ``patience`` such that

        (b(e - patience) - b(e)) / |b(e - patience)| < min_improvement,

    i.e. the last ``patience`` points together lowered the best value by less than the
    fraction ``min_improvement`` (0.005: 0.5 %), or did not lower it at all. This is
    :func:`spinsa._convergence.stopping_epoch` with ``rel_tol = min_improvement``, applied
    after the non-finite points (epochs that were not evaluated) are left out, so ``e``
    counts evaluations.

    Parameters
    ----------
    curve : array_like, shape (n,)
        Loss after every epoch (index 0: before the first).
    patience : int
        Points over which the improvement is measured, >= 1.
    min_improvement : float
        Relative improvement below which the curve has converged, in [0, 1).

    Returns
    -------
    int or None
        The index into the finite points of ``curve``; None while the criterion is unmet.
    """
    c = np.asarray(curve, dtype=np.float64).reshape(-1)
    return stopping_epoch(c[np.isfinite(c)], min_improvement, patience)


def plateau_criterion(patience: int, min_improvement: float, monitored: str) -> str:
    """The epoch criterion in words, with its numbers."""
    return (
        f"{monitored} improved by less than {100 * min_improvement:g} % over {patience} evaluations"
    )


def lbfgs_criterion(gtol: float, ftol: float, max_iter: int, rows: bool = False) -> str:
    """The L-BFGS criterion in words, with its numbers."""
    who = "every row's L-BFGS-B" if rows else "L-BFGS-B"
    return (
        f"{who} stopped on its own tolerance (projected gradient <= gtol = {gtol:g} or "
        f"relative decrease <= ftol = {ftol:g}) within max_iter = {max_iter} iterations"
    )


def convergence_words(record: dict, unit: str = "iterations") -> str:
    """How a fit ended, for a report: ``"converged after N <unit> (<criterion>)"``, or
    :func:`spinsa._convergence.not_converged_text` with the criterion, or that the file
    predates the record.

    ``record``: the keys ``converged``, ``criterion``, ``iterations`` and ``message`` (a fit
    file's root attributes; :meth:`spinsa.fit.FitResult.convergence`).
    """
    converged, n = record.get("converged"), record.get("iterations")
    criterion = record.get("criterion") or "criterion not recorded"
    if converged is None:
        return f"convergence not recorded ({record.get('message') or 'an older file'})"
    if converged:
        return f"converged after {n} {unit} ({criterion})"
    return f"{not_converged_text(n, unit)} (criterion: {criterion}; {record.get('message', '')})"


def divergence_norm(config, n_tokens: int) -> float:
    """The |J| beyond which a fit has diverged (inf for a fit whose |J| cannot run away).

    Contrastive divergence: ``max_norm``; by default, and for the normalised
    pseudo-likelihood with ``constraint="none"``, 100·√(N(N−1))/λ: blocks of mean norm
    100/λ, where every conditional is a point mass. The normalised loss has no finite
    minimum on degenerate data (one pattern, identical patterns, or patterns the couplings
    can reproduce exactly): its |J| then grows without end while the loss creeps down.
    """
    if config.method == "cd" and config.max_norm is not None:
        return float(config.max_norm)
    if config.method == "cd" or (config.loss == "normalised" and config.constraint == "none"):
        return point_mass_norm(n_tokens, config.lam)
    return float("inf")


def point_mass_norm(n_tokens: int, lam: float) -> float:
    """100·√(N(N−1))/λ: the |J| whose blocks, of mean norm 100/λ, make every conditional a
    point mass (a fit beyond it has diverged)."""
    return float(100.0 * np.sqrt(n_tokens * (n_tokens - 1)) / lam)


def mark_diverged(state, config, norm: float, limit: float, when: str, stacklevel: int) -> None:
    """Mark a fit whose |J| ran away (``norm`` > ``limit`` ``when``, "after epoch 3"): never
    converged, with a message that says what to do, and a ``RuntimeWarning`` at the caller's
    ``stacklevel`` (counted from here: the user's call of ``fit_pseudolikelihood``)."""
    if config.method == "cd":
        bound, why = f"max_norm = {limit:.4g}", ""
        todo = "use chain='site', a norm constraint, or a smaller lr"
    else:
        bound = f"{limit:.4g}"
        why = " (100 sqrt(N (N - 1)) / lam: every conditional is then a point mass)"
        todo = (
            "the normalised pseudo-likelihood of these patterns has no finite minimum: one "
            "pattern, identical patterns, or too few for the couplings; use constraint='l2' "
            "or more, distinct patterns"
        )
    state.converged = False
    state.message = (
        f"diverged: |J| = {norm:.4g} exceeded {bound} {when}{why}; the fit stopped ({todo})"
    )
    warnings.warn(state.message, RuntimeWarning, stacklevel=stacklevel)
