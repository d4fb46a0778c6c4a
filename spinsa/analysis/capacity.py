"""The critical load of a capacity curve, with a bootstrap error bar (docs/capacity.md).

A capacity curve is a retrieval measure r(α) against the load α = P/N (the fraction of
patterns retrieved, ``retrieved_fraction`` of a synthetic scan point): r ≈ 1 at low load,
and it falls as the patterns' crosstalk grows. The critical load α_c is read off where the
mean curve over independent seeds first falls below a level (1/2 by default), linearly
interpolated between the two loads around the crossing. Its error bar comes from the
seeds: the seeds are resampled with replacement, the crossing found again on each
resampled mean curve, and the spread of those crossings is the standard error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spinsa._checks import check_count, check_real

__all__ = ["HOPFIELD_ALPHA_C", "CriticalLoad", "critical_load", "crossing"]

#: The critical load of the Hopfield model (d = 1 Ising spins, Hebbian couplings, zero
#: temperature, N → ∞): Amit, Gutfreund & Sompolinsky, Phys. Rev. Lett. 55, 1530 (1985).
HOPFIELD_ALPHA_C = 0.138


@dataclass(frozen=True)
class CriticalLoad:
    """Where a capacity curve crosses ``level`` (see :func:`critical_load`).

    Attributes
    ----------
    alpha_c : float
        The crossing of the mean curve; NaN when it does not cross inside the loads given.
    sem : float
        Standard deviation of the bootstrap crossings (NaN with one seed).
    low, high : float
        Their 16th and 84th percentiles (a 68 % interval, not necessarily symmetric).
    where : {"inside", "above", "below"}
        ``"above"``: the mean curve never falls below ``level`` (α_c > the largest load);
        ``"below"``: it starts below (α_c < the smallest load).
    level : float
    n_seeds : int
    n_boot : int
    censored_fraction : float
        Fraction of the bootstrap curves that do not cross inside the loads (left out of
        ``sem``; a large value means the range of loads is too short).
    """

    alpha_c: float
    sem: float
    low: float
    high: float
    where: str
    level: float
    n_seeds: int
    n_boot: int
    censored_fraction: float


def crossing(alpha, values, level: float = 0.5) -> tuple[float, str]:
    """The first load where ``values`` fall from ≥ ``level`` to < ``level``, linearly
    interpolated: (α_c, ``"inside"``), or (NaN, ``"above"`` / ``"below"``).

    Parameters
    ----------
    alpha : array_like, shape (A,)
        Increasing loads.
    values : array_like, shape (A,)
        The curve; NaN points are skipped.
    level : float
        The level whose crossing defines α_c.

    Returns
    -------
    alpha_c : float
        The interpolated crossing, NaN when the curve never crosses.
    where : {"inside", "above", "below"}
        ``"above"``: the curve stays at or above ``level``; ``"below"``: it starts below.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(values)
    alpha, values = alpha[ok], values[ok]
    if values.size == 0 or values[0] < level:
        return np.nan, "below"
    below = np.flatnonzero(values < level)
    if below.size == 0:
        return np.nan, "above"
    k = below[0]  # values[k - 1] >= level > values[k]
    a0, a1, v0, v1 = alpha[k - 1], alpha[k], values[k - 1], values[k]
    return float(a0 + (v0 - level) / (v0 - v1) * (a1 - a0)), "inside"


def critical_load(alpha, values, level: float = 0.5, n_boot: int = 1000, seed: int = 0):
    """The critical load of a capacity curve measured over several seeds, with its error.

    Parameters
    ----------
    alpha : array_like, shape (A,)
        Strictly increasing loads α = P/N.
    values : array_like, shape (A, S)
        The retrieval measure at each load for S independent seeds (patterns and starts);
        NaN for a missing point. One column (S = 1) gives α_c without an error bar.
    level : float
        The level whose crossing defines α_c (1/2: half the patterns retrieved).
    n_boot : int
        Bootstrap resamplings of the seeds.
    seed : int
        Seed of the resampling.

    Returns
    -------
    CriticalLoad

    Examples
    --------
    >>> ds = spinsa.scan.open_collected("runs/capacity")
    >>> r = ds["retrieved_fraction"].sel({"couplings": "hebbian", "patterns.n_tokens": 400})
    >>> r = r.transpose("patterns.alpha", "seed")  # every other dimension selected first
    >>> critical_load(r["patterns.alpha"].values, r.values).alpha_c
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if alpha.ndim != 1 or alpha.size < 2 or not np.all(np.diff(alpha) > 0):
        raise ValueError(
            f"alpha must be a strictly increasing 1-d array of >= 2 loads, got {alpha}"
        )
    if values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2 or values.shape[0] != alpha.size:
        raise ValueError(
            f"values must have shape (n_loads, n_seeds) = ({alpha.size}, S), got {values.shape}"
        )
    level = check_real(level, "level")
    n_boot = check_count(n_boot, "n_boot", 1)
    with np.errstate(all="ignore"):  # a load no seed reached is NaN, and skipped
        mean = np.nanmean(values, axis=1)
    alpha_c, where = crossing(alpha, mean, level)
    n_seeds = values.shape[1]
    if n_seeds < 2:
        return CriticalLoad(alpha_c, np.nan, np.nan, np.nan, where, level, n_seeds, 0, np.nan)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n_seeds, size=(n_boot, n_seeds))
    with np.errstate(all="ignore"):
        curves = np.nanmean(values[:, picks], axis=2).T  # (n_boot, A)
    boot = np.array([crossing(alpha, c, level)[0] for c in curves])
    found = boot[np.isfinite(boot)]
    if found.size < 2:
        sem = low = high = np.nan
    else:
        sem = float(found.std(ddof=1))
        low, high = (float(q) for q in np.percentile(found, [16, 84]))
    censored = float(1 - found.size / n_boot)
    return CriticalLoad(alpha_c, sem, low, high, where, level, n_seeds, n_boot, censored)
