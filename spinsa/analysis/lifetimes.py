"""Transient memories: when a trajectory is closest to its target, and for how long.

A corrupted image relaxes first towards its clean version, then (in the bare self-attention
network of D'Amico & Negri 2024) away from it towards a global attractor. For every
trajectory this module measures, from a curve q(t) sampled at the recorded times,

- the **peak**: the largest overlap with the target (or the smallest reconstruction error)
  and the first time it is reached, ``t_peak``;
- the **lifetime**: the length of the stretch of time around the peak during which the
  trajectory stays close to its target: the overlap stays above a threshold, or the
  reconstruction error stays below that of the corrupted input (its value at t = 0).

Convention. A recorded time t_k stands for the interval [t_k, t_{k+1}). The stretch that
holds the peak runs over the records k0..k1 (the condition holds at all of them and fails at
k0 - 1 and k1 + 1); it is entered at ``t_enter = t_{k0}`` and left at ``t_leave = t_{k1+1}``,
the first recorded time at which the condition fails again, and ``lifetime = t_leave -
t_enter``. If the condition still holds at the last record, the trajectory never left:
``t_leave`` is the last time, ``censored`` is True and the lifetime is a lower bound (a
fixed point at its target has lifetime = the whole run, censored). If the condition never
holds, the lifetime is 0 and ``t_enter = t_leave = t_peak``. With ``record_every > 1`` the
times are known to the recording resolution.

The attractor. Trajectories end on a global attractor (often near the mean pattern), and
the attractor itself may pass the threshold: on MNIST, the attractor's overlap with a test
digit averaged 0.918 against a :func:`pattern_threshold` of 0.927, above it for 42.5 % of
the digits, whose lifetimes were then the whole run, censored: the attractor's persistence,
not a memory's. Given the attractor's value of the curve for each trajectory (``attractor=``:
its overlap with the target, or its error), a trajectory counts as at its target only while
it is also nearer its target than midway to the attractor: overlap above (1 + a) / 2 (a
target's overlap with itself is 1), error below a / 2 (a target's own error is 0). Midway,
not just beyond the attractor, because a trajectory that relaxes onto the attractor
approaches its value and would otherwise pass it at every finite time. The results say
where the attractor passes the threshold (:attr:`Lifetimes.attractor_passes`,
:attr:`LifetimeTable.fraction_attractor_passes`), and their figures say so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from spinsa import _draw
from spinsa._checks import check_choice, check_count, check_finite, check_real
from spinsa.analysis._results import AnalysisResult, bin_edges, check_states, check_times
from spinsa.analysis.overlaps import target_overlaps
from spinsa.model import run
from spinsa.tasks import as_generator, mean_sem

__all__ = [
    "Lifetimes",
    "LifetimeTable",
    "error_lifetimes",
    "lifetimes_vs_corruption",
    "overlap_lifetimes",
    "pattern_threshold",
    "summarize_lifetimes",
]

CRITERIA = ("overlap", "error")


@dataclass(frozen=True)
class Lifetimes(AnalysisResult):
    """Peak and lifetime of the transient of every trajectory (see the module docstring).

    Attributes
    ----------
    t_peak, peak : ndarray, shape (P,)
        First time of the maximal overlap (or minimal error), int64, and that value.
    lifetime, t_enter, t_leave : ndarray of int64, shape (P,)
        The stretch of time that holds the peak: ``lifetime = t_leave - t_enter``.
    censored : ndarray of bool, shape (P,)
        The condition still holds at the end of the run: the lifetime is a lower bound.
    time_above : ndarray of int64, shape (P,)
        Total time, over all stretches, during which the condition holds.
    threshold : ndarray of float64, shape (P,)
        The threshold of each curve (the error at t = 0, or the baseline, with ``"error"``).
    criterion : {"overlap", "error"}
        The condition: q(t) > threshold (``"overlap"``) or q(t) < threshold (``"error"``).
    duration : int
        Length of the run, ``times[-1] - times[0]``.
    attractor : ndarray of float64, shape (P,), or None
        The attractor's value of the curve for each trajectory (its overlap with the target,
        or its error), when given: the condition then also asks for the state to be nearer
        its target than midway to the attractor (:attr:`level`).
    """

    _same_shape = ("t_peak peak lifetime t_enter t_leave censored time_above threshold attractor",)
    t_peak: np.ndarray
    peak: np.ndarray
    lifetime: np.ndarray
    t_enter: np.ndarray
    t_leave: np.ndarray
    censored: np.ndarray
    time_above: np.ndarray
    threshold: np.ndarray
    criterion: str = "overlap"
    duration: int = 0
    attractor: np.ndarray | None = None

    def __post_init__(self):
        super().__post_init__()
        check_choice(self.criterion, "criterion", CRITERIA)

    @property
    def n_samples(self) -> int:
        return int(self.t_peak.shape[0])

    @property
    def level(self) -> np.ndarray:
        """The value each curve must pass, shape (P,): ``threshold``, and with an
        ``attractor`` a, midway between the target and the attractor where that is
        stricter: max(threshold, (1 + a) / 2) for overlaps, min(threshold, a / 2) for
        errors."""
        return _level(self.threshold, self.attractor, self.criterion)

    @property
    def attractor_passes(self) -> np.ndarray | None:
        """Where the attractor itself passes the threshold, bool of shape (P,) (None without
        an attractor): without :attr:`level`, the lifetime of those trajectories would
        count the time spent at the attractor."""
        if self.attractor is None:
            return None
        if self.criterion == "overlap":
            return self.attractor > self.threshold
        return self.attractor < self.threshold

    def plot(self, ax=None):
        """Histogram of the lifetimes; those still running at the end (censored, a lower
        bound) stacked apart, hatched.
        """
        ax = _draw.axes(ax)
        edges = bin_edges(min(30, max(self.duration, 1)), 0.0, max(self.duration, 1))
        parts = [self.lifetime[~self.censored], self.lifetime[self.censored]]
        ax.hist(parts, bins=edges, stacked=True, color=["C0", "white"], edgecolor="C0",
                hatch=[None, "//"], label=["ended", "censored (lower bound)"])  # fmt: skip
        what = "overlap above its threshold" if self.criterion == "overlap" else "error below"
        title = f"lifetimes ({what}): mean {self.lifetime.mean():.1f}"
        passes = self.attractor_passes
        if passes is not None and passes.any():
            title += (f"\nthe attractor passes the threshold for {passes.mean():.0%}: "
                      "counted only nearer the target than midway to it")  # fmt: skip
        _draw.finish(ax, title, "lifetime (iterations)", "trajectories")
        return ax


def _level(threshold, attractor, criterion: str) -> np.ndarray:
    """:attr:`Lifetimes.level` of a threshold and an attractor (or None)."""
    if attractor is None:
        return threshold
    if criterion == "overlap":
        return np.maximum(threshold, 0.5 * (1.0 + attractor))
    return np.minimum(threshold, 0.5 * attractor)


def _check_attractor(attractor, n_samples: int) -> np.ndarray | None:
    """The attractor's value of the curve for each of ``n_samples`` trajectories, or None."""
    if attractor is None:
        return None
    a = np.asarray(attractor, dtype=np.float64)
    if a.shape not in ((), (n_samples,)):
        raise ValueError(
            f"attractor must be a number or have shape ({n_samples},), the attractor's value "
            f"for each trajectory, got shape {a.shape}"
        )
    check_finite(a, "attractor")
    return np.broadcast_to(a, (n_samples,)).copy()


def _check_curves(q, times, name: str) -> tuple[np.ndarray, np.ndarray]:
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 2 or 0 in q.shape:
        raise ValueError(f"{name} must have shape (n_records, n_samples), got shape {q.shape}")
    check_finite(q, name)
    return q, check_times(times, q.shape[0], of=f" of {name}")


def _lifetimes(q, times, cond, peak_index, threshold, criterion, attractor=None) -> Lifetimes:
    """Stretches of ``cond`` (T, P) around ``peak_index`` (P,); vectorised over samples."""
    T, P = cond.shape
    cols = np.arange(P)
    idx = np.arange(T)[:, None]
    # last failure at or before k, first failure at or after k
    last_fail = np.maximum.accumulate(np.where(~cond, idx, -1), axis=0)
    first_fail = np.minimum.accumulate(np.where(~cond, idx, T)[::-1], axis=0)[::-1]
    holds = cond[peak_index, cols]
    k0 = last_fail[peak_index, cols] + 1
    k1 = first_fail[peak_index, cols] - 1  # last record of the stretch
    censored = holds & (k1 == T - 1)
    t_peak = times[peak_index]
    t_enter = np.where(holds, times[np.clip(k0, 0, T - 1)], t_peak)
    leave_k = np.clip(k1 + 1, 0, T - 1)
    t_leave = np.where(holds, times[leave_k], t_peak)
    # each record stands for [t_k, t_{k+1}); the last one for nothing
    widths = np.append(np.diff(times), 0)
    time_above = (cond * widths[:, None]).sum(axis=0).astype(np.int64)
    return Lifetimes(
        t_peak=t_peak,
        peak=q[peak_index, cols],
        lifetime=t_leave - t_enter,
        t_enter=t_enter,
        t_leave=t_leave,
        censored=censored,
        time_above=time_above,
        threshold=np.broadcast_to(np.asarray(threshold, dtype=np.float64), (P,)).copy(),
        criterion=criterion,
        duration=int(times[-1] - times[0]),
        attractor=attractor,
    )


def pattern_threshold(xi) -> float:
    """The overlap threshold that tells a pattern from the others: midway between the
    overlap a pattern has with itself and the mean overlap of two distinct patterns,

        threshold = (q_self + q_mutual) / 2,
        q_self = mean_a q(xi_a, xi_a),   q_mutual = mean_{a != b} q(xi_a, xi_b),

    with q(x, y) = (1/N) sum_i x_i . y_i. A fixed number is meaningless where distinct
    patterns are alike: MNIST digits embedded as spins overlap 0.856 on average, so a
    state at *another* digit passes a threshold of 0.9 almost; this rule puts it at ~0.93.
    The mean over pairs is exact and costs O(P N d) (no P x P matrix):
    sum_{a,b} q_ab = (1/N) sum_i |sum_a xi_ai|^2.

    Parameters
    ----------
    xi : array_like, shape (P, N, d)
        The patterns (e.g. the embedded training or test images), P >= 2.

    Returns
    -------
    float
    """
    xi = check_states(xi, "xi", ndims=(3,)).astype(np.float64)
    P, N, _ = xi.shape
    if P < 2:
        raise ValueError(
            f"xi must hold at least 2 patterns to measure how alike distinct ones are, got {P}; "
            "pass an explicit threshold instead"
        )
    self_sum = float(np.einsum("pnd,pnd->", xi, xi)) / N
    total = float(np.einsum("nd,nd->", xi.sum(0), xi.sum(0))) / N
    return 0.5 * (self_sum / P + (total - self_sum) / (P * (P - 1)))


def _overlap_threshold(threshold, patterns) -> float:
    if threshold is not None:
        if patterns is not None:
            raise ValueError("give threshold or patterns (its rule), not both")
        return check_real(threshold, "threshold")
    if patterns is None:
        raise ValueError(
            "threshold is required: pass threshold=<float>, or patterns=xi to use "
            "pattern_threshold(xi), midway between a pattern's overlap with itself and the "
            "mean overlap of distinct patterns (a fixed 0.9 is meaningless on MNIST, whose "
            "distinct digits overlap 0.856)"
        )
    return pattern_threshold(patterns)


def overlap_lifetimes(
    m, times, threshold: float | None = None, *, patterns=None, attractor=None
) -> Lifetimes:
    """Peak overlap with the target and how long the overlap stays above a threshold (and
    nearer the target than the attractor, given one).

    Parameters
    ----------
    m : ndarray, shape (T, P)
        Overlap of every trajectory with its target at the recorded times (e.g.
        :func:`spinsa.analysis.target_overlaps` of ``Trajectory.states``), or any similarity
        curve such as the correlation of decoded and clean images.
    times : ndarray of int, shape (T,)
        Recorded times, strictly increasing.
    threshold : float, optional
        The trajectory counts as "at its target" while m(t) > threshold. Required unless
        ``patterns`` is given: there is no default, because a useful value depends on how
        alike the patterns are.
    patterns : array_like, shape (M, N, d), optional
        Instead of ``threshold``: the stored patterns, and the threshold is
        :func:`pattern_threshold` of them.
    attractor : float or array_like of shape (P,), optional
        The overlap of the attractor the trajectories end on (the global one, of largest
        basin) with each trajectory's target, e.g. ``target_overlaps(np.broadcast_to(x_a,
        targets.shape), targets)`` for an attractor state ``x_a`` (N, d). The overlap must
        then also stay above (1 + a) / 2, midway between the target's overlap with itself
        (1 for unit spins) and the attractor's: a state at the attractor never counts as
        at its target, whatever the threshold (module docstring). Without it, where the
        attractor passes the threshold, the lifetime counts the time spent on it.

    Returns
    -------
    Lifetimes
        With ``criterion = "overlap"``; the threshold given is its ``threshold`` field, the
        one used its ``level``, and ``attractor_passes`` says where the attractor passes
        the threshold.
    """
    m, times = _check_curves(m, times, "m")
    threshold = _overlap_threshold(threshold, patterns)
    a = _check_attractor(attractor, m.shape[1])
    cond = m > _level(threshold, a, "overlap")
    return _lifetimes(m, times, cond, np.argmax(m, axis=0), threshold, "overlap", a)


def error_lifetimes(errors, times, baseline=None, *, attractor=None) -> Lifetimes:
    """Smallest reconstruction error and how long the error stays below the input's (and
    nearer the target than the attractor, given one).

    Parameters
    ----------
    errors : ndarray, shape (T, P)
        Reconstruction error of every trajectory at the recorded times (e.g. the
        mean squared pixel error of :func:`spinsa.tasks.reconstruction_errors`).
    times : ndarray of int, shape (T,)
        As in :func:`overlap_lifetimes`; ``times[0]`` is normally 0.
    baseline : float or ndarray of shape (P,), optional
        The trajectory counts as "better than its input" while error(t) < baseline; by
        default the error of the corrupted input itself, ``errors[0]``.
    attractor : float or array_like of shape (P,), optional
        The error of the attractor the trajectories end on (decoded) against each clean
        image. The error must then also stay below a / 2, midway between the clean image
        (error 0) and the attractor: a state at the attractor never counts, even where the
        attractor is closer to the clean image than the corrupted input was.

    Returns
    -------
    Lifetimes
        With ``criterion = "error"``: ``peak`` is the minimal error, ``threshold`` the
        baseline, ``level`` the value used.
    """
    errors, times = _check_curves(errors, times, "errors")
    base = errors[0].copy() if baseline is None else np.asarray(baseline, dtype=np.float64)
    if base.shape not in ((), (errors.shape[1],)):
        raise ValueError(
            f"baseline must be a number or have shape ({errors.shape[1]},), got shape {base.shape}"
        )
    check_finite(base, "baseline")
    a = _check_attractor(attractor, errors.shape[1])
    cond = errors < _level(base, a, "error")
    return _lifetimes(errors, times, cond, np.argmin(errors, axis=0), base, "error", a)


@dataclass(frozen=True)
class LifetimeTable(AnalysisResult):
    """Lifetime statistics over a test set, one row per corruption level.

    Attributes
    ----------
    levels : ndarray of float64, shape (L,)
        Corruption level of each row (fraction masked, noise variance...).
    n_samples : ndarray of int64, shape (L,)
    lifetime_mean, lifetime_sem, lifetime_median : ndarray of float64, shape (L,)
        Mean, standard error (:func:`spinsa.tasks.mean_sem`) and median of the lifetimes.
    peak_mean, peak_sem, t_peak_mean, t_peak_sem : ndarray of float64, shape (L,)
        The same for the peak overlap (or minimal error) and its time.
    fraction_transient : ndarray of float64, shape (L,)
        Fraction with a finite stretch: lifetime > 0 and not censored.
    fraction_censored : ndarray of float64, shape (L,)
        Fraction still at the target at the end of the run.
    bin_edges : ndarray of float64, shape (B + 1,)
        Edges of the lifetime histogram, common to all levels.
    counts : ndarray of int64, shape (L, B)
        Histogram of lifetimes per level.
    criterion : str
    fraction_attractor_passes : ndarray of float64, shape (L,), or None
        Fraction of the trajectories whose attractor itself passes the threshold
        (:attr:`Lifetimes.attractor_passes`; their lifetimes count only the time nearer the
        target than midway to the attractor); NaN for a level measured without an
        attractor, None when none was.
    """

    _coords = {"L": "levels"}

    _same_shape = (
        "levels n_samples lifetime_mean lifetime_sem lifetime_median peak_mean peak_sem "
        "t_peak_mean t_peak_sem fraction_transient fraction_censored fraction_attractor_passes",
    )
    levels: np.ndarray
    n_samples: np.ndarray
    lifetime_mean: np.ndarray
    lifetime_sem: np.ndarray
    lifetime_median: np.ndarray
    peak_mean: np.ndarray
    peak_sem: np.ndarray
    t_peak_mean: np.ndarray
    t_peak_sem: np.ndarray
    fraction_transient: np.ndarray
    fraction_censored: np.ndarray
    bin_edges: np.ndarray
    counts: np.ndarray
    criterion: str = "overlap"
    fraction_attractor_passes: np.ndarray | None = None

    def __post_init__(self):
        super().__post_init__()
        expected = (*self.levels.shape, self.bin_edges.shape[0] - 1)
        if self.counts.shape != expected:
            raise ValueError(f"counts must have shape (L, B) = {expected}, got {self.counts.shape}")

    def __repr__(self) -> str:
        """One line: the levels and the main statistics, not the histograms."""

        def row(values) -> str:
            return "[" + ", ".join(f"{v:.4g}" for v in np.asarray(values, dtype=float)) + "]"

        parts = [
            f"criterion={self.criterion!r}",
            f"levels={row(self.levels)}",
            f"n_samples={self.n_samples.tolist()}",
            f"lifetime_mean={row(self.lifetime_mean)}",
            f"lifetime_sem={row(self.lifetime_sem)}",
            f"fraction_censored={row(self.fraction_censored)}",
        ]
        if self.fraction_attractor_passes is not None:
            parts.append(f"fraction_attractor_passes={row(self.fraction_attractor_passes)}")
        parts.append(f"counts=<{self.counts.shape[0]} x {self.counts.shape[1]} histogram>")
        return f"LifetimeTable({', '.join(parts)})"

    def plot(self, ax=None, *, names=None):
        """One histogram of the lifetimes per level (as a fraction of its trajectories), the
        mean ± s.e. and the censored fraction in the legend.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure when None.
        names : sequence of str, optional
            A name per level (e.g. the tasks); by default "level <value>".

        Returns
        -------
        matplotlib.axes.Axes
        """
        ax = _draw.axes(ax)
        for row in range(self.levels.shape[0]):
            name = names[row] if names is not None and row < len(names) else None
            name = name or f"level {self.levels[row]:g}"
            label = (
                f"{name}: {self.lifetime_mean[row]:.1f} ± "
                f"{np.nan_to_num(self.lifetime_sem[row]):.1f}, "
                f"{self.fraction_censored[row]:.0%} censored"
            )
            passes = self.attractor_passes_at(row)
            if passes:
                label += f"; the attractor passes the threshold for {passes:.0%}"
            density = self.counts[row] / max(int(self.n_samples[row]), 1)
            ax.stairs(density, self.bin_edges, color=f"C{row}", lw=1.6, label=label)
        _draw.finish(ax, "lifetimes", "lifetime (iterations)", "fraction of trajectories",
                     legend=None)  # fmt: skip
        ax.legend(fontsize=8, title="mean ± s.e.", title_fontsize=8)
        return ax

    def attractor_passes_at(self, row: int) -> float:
        """The fraction of level ``row`` whose attractor passes the threshold; 0 where
        unknown (no attractor given)."""
        if self.fraction_attractor_passes is None:
            return 0.0
        return float(np.nan_to_num(self.fraction_attractor_passes[row]))


def _row(r: Lifetimes, edges: np.ndarray) -> dict:
    """One row of a :class:`LifetimeTable` (one corruption level)."""
    row = {
        "n_samples": np.int64(r.n_samples),
        "lifetime_median": float(np.median(r.lifetime)),
        "fraction_transient": float(np.mean((r.lifetime > 0) & ~r.censored)),
        "fraction_censored": float(np.mean(r.censored)),
        "counts": np.histogram(r.lifetime, bins=edges)[0].astype(np.int64),
        "fraction_attractor_passes": np.nan
        if r.attractor is None
        else float(np.mean(r.attractor_passes)),
    }
    for name in ("lifetime", "peak", "t_peak"):
        mean, sem, _ = mean_sem(getattr(r, name))
        row[f"{name}_mean"], row[f"{name}_sem"] = float(mean), float(sem)
    return row


def summarize_lifetimes(lifetimes: Sequence[Lifetimes], levels, bins=None) -> LifetimeTable:
    """Distributions of lifetimes over a test set, as a function of the corruption.

    Parameters
    ----------
    lifetimes, levels : sequence of Lifetimes and array_like, length L
        One result per corruption level (all with the same criterion), and the levels.
    bins : int or array_like, optional
        Histogram bins: a number of bins (from 0 to the longest lifetime, at least 1) or
        explicit edges. By default one bin per integer lifetime from 0 to the longest run
        (``np.arange(duration + 2) - 0.5``).

    Returns
    -------
    LifetimeTable
        One row per level: statistics of shape (L,), and histogram counts of shape (L, B)
        on edges of shape (B + 1,).
    """
    lifetimes = list(lifetimes)
    if not lifetimes or not all(isinstance(r, Lifetimes) for r in lifetimes):
        raise ValueError("lifetimes must be a non-empty sequence of Lifetimes")
    levels = np.asarray(levels, dtype=np.float64)
    if levels.shape != (len(lifetimes),):
        raise ValueError(
            f"levels must have shape ({len(lifetimes)},), one per result, got {levels.shape}"
        )
    check_finite(levels, "levels")
    criteria = {r.criterion for r in lifetimes}
    if len(criteria) > 1:
        raise ValueError(f"all results must have the same criterion, got {sorted(criteria)}")
    if bins is None:
        edges = np.arange(max(r.duration for r in lifetimes) + 2, dtype=np.float64) - 0.5
    else:
        top = max(1.0, *(float(r.lifetime.max(initial=0)) for r in lifetimes))
        edges = bin_edges(bins, 0.0, top)
    rows = [_row(r, edges) for r in lifetimes]
    columns = {k: np.asarray([row[k] for row in rows]) for k in rows[0]}
    if all(r.attractor is None for r in lifetimes):
        columns["fraction_attractor_passes"] = None
    return LifetimeTable(levels, bin_edges=edges, criterion=lifetimes[0].criterion, **columns)


def lifetimes_vs_corruption(
    J,
    lam: float,
    targets,
    corrupt: Callable[[np.ndarray, float, np.random.Generator], np.ndarray],
    levels,
    steps: int,
    *,
    threshold: float | None = None,
    attractor=None,
    rng=0,
    bins=None,
    **run_kwargs,
) -> tuple[LifetimeTable, list[Lifetimes]]:
    """Run the dynamics from corrupted targets at several levels and measure the transients.

    The overlap with the target is computed on the fly at every step (through the
    ``callback`` of :func:`spinsa.run`), so no trajectory is ever held in memory.

    Parameters
    ----------
    J, lam
        Couplings, shape (N, N, d, d), and the inverse temperature of the dynamics.
    targets : ndarray, shape (P, N, d)
        Clean configurations (e.g. embedded test images).
    corrupt : callable
        ``corrupt(targets, level, rng) -> x0`` of shape (P, N, d): the corrupted initial
        conditions at one level (e.g. ``lambda x, f, g: spinsa.tasks.mask_tokens(x, f, g)[0]``).
    levels : array_like, shape (L,)
    steps : int
        Steps of every run.
    threshold : float, optional
        As in :func:`overlap_lifetimes`; None: :func:`pattern_threshold` of the targets.
    attractor : ndarray, shape (N, d), optional
        The state of the attractor the trajectories end on (the global one,
        :func:`spinsa.analysis.find_attractors`): its overlap with each target is the
        ``attractor`` of :func:`overlap_lifetimes`.
    bins
        As in :func:`summarize_lifetimes`.
    rng : np.random.Generator, int or None
        Source of the corruptions (and of the async update order if not given a ``seed``).
    **run_kwargs
        Passed to :func:`spinsa.run` (``gamma``, ``norm``, ``update``, ``seed``, ``progress``).

    Returns
    -------
    table : LifetimeTable
    per_level : list of Lifetimes, length L
    """
    targets = check_states(targets, "targets", ndims=(3,))
    steps = check_count(steps, "steps", 1)
    levels = np.asarray(levels, dtype=np.float64).reshape(-1)
    for key in ("record_every", "callback"):
        if key in run_kwargs:
            raise ValueError(f"{key} is set by lifetimes_vs_corruption; do not pass it")
    threshold = (
        pattern_threshold(targets) if threshold is None else check_real(threshold, "threshold")
    )
    if attractor is not None:
        if np.shape(attractor) != targets.shape[1:]:
            raise ValueError(
                f"attractor must be one state of the targets' shape (N, d) = "
                f"{targets.shape[1:]}, got shape {np.shape(attractor)}"
            )
        state = check_states(np.asarray(attractor)[None], "attractor", targets.dtype, ndims=(3,))
        attractor = target_overlaps(np.broadcast_to(state, targets.shape), targets)
    gen = as_generator(rng)
    per_level = []
    for level in levels:
        x0 = np.asarray(corrupt(targets, float(level), gen))
        if x0.shape != targets.shape:
            raise ValueError(
                f"corrupt returned shape {x0.shape}; it must return the targets' {targets.shape}"
            )
        m = np.empty((steps + 1, targets.shape[0]))
        m[0] = target_overlaps(x0, targets)

        def record(t, x, m=m):
            m[t] = target_overlaps(x, targets)

        run(x0, J, lam, steps, record_every=steps, callback=record, **run_kwargs)
        times = np.arange(steps + 1)
        per_level.append(overlap_lifetimes(m, times, threshold, attractor=attractor))
    return summarize_lifetimes(per_level, levels, bins=bins), per_level
