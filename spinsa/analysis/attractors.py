"""Fixed points, cycles, convergence times and the attractors reached from many initial states.

Distances between configurations are measured token by token, as the dynamics acts:

    D(x, y) = max_i |x_i - y_i| ,

so "x(t) is a fixed point" means D(x(t+1), x(t)) < tol, and "x(t) is on a k-cycle" means
D(x(t+k), x(t)) < tol. A trajectory has **period** k (1 = fixed point) when k is the
smallest lag, up to ``max_period``, such that D(x(t), x(t-k)) < tol for the last k recorded
times (every phase of the cycle is checked once). Its **convergence time** is the first time
t from which D(x(t'), x(t'+k)) < tol for every later t': the time at which it lands on its
cycle (0 for a trajectory started on a fixed point).

Different trajectories reach the same attractor when their final states have mutual overlap

    q(a, b) = <x^a, x^b> / (|x^a| |x^b|)   (= (1/N) sum_i x^a_i . x^b_i for unit spins)

of at least ``q_min``; states of one cycle found at different phases are merged into one
attractor. :func:`find_attractors` runs the dynamics from many initial conditions and reports
the attractors, their basin fractions, and how they compare with the training patterns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from spinsa import _draw
from spinsa._checks import check_count, check_positive, check_real
from spinsa._progress import progress
from spinsa.analysis import _kernels
from spinsa.analysis._results import AnalysisResult, check_patterns, check_states, check_times
from spinsa.analysis.overlaps import (
    mean_pattern,
    nearest_patterns,
    pixel_correlations,
    target_overlaps,
)
from spinsa.model import run
from spinsa.tasks import as_generator

__all__ = [
    "AttractorReport",
    "CycleReport",
    "DecodedImages",
    "StateClusters",
    "cluster_states",
    "default_tol",
    "find_attractors",
    "find_cycles",
    "fixed_points",
    "lagged_distances",
    "random_spins",
    "step_sizes",
]


def step_sizes(states) -> np.ndarray:
    """D(x(t+1), x(t)) between consecutive records: states (T >= 2, P, N, d) -> (T - 1, P)."""
    return lagged_distances(states, 1)[0, 1:]


def lagged_distances(states, max_lag: int) -> np.ndarray:
    """D(x(t), x(t - k)) for every record t and lag k = 1..max_lag (counted in records).

    Parameters
    ----------
    states : ndarray, shape (T, P, N, d)
    max_lag : int
        Largest lag K, 1 <= K < T.

    Returns
    -------
    ndarray, shape (K, T, P)
        ``out[k - 1, t, p]``; NaN where t < k.
    """
    states = check_states(states, "states", ndims=(4,))
    max_lag = check_count(max_lag, "max_lag", 1)
    if max_lag >= states.shape[0]:
        raise ValueError(
            f"max_lag = {max_lag} needs more than {max_lag} records; states has {states.shape[0]}"
        )
    out = np.empty((max_lag, *states.shape[:2]), dtype=states.dtype)
    _kernels.lagged_distances(states, max_lag, out)
    return out


def fixed_points(states, tol: float = 1e-5) -> np.ndarray:
    """Whether each trajectory ended on a fixed point, D(x(T), x(T-1)) < tol: states
    (T >= 2, P, N, d) whose last two records are consecutive steps -> (P,) bool."""
    states, tol = check_states(states, "states", ndims=(4,)), check_positive(tol, "tol")
    if states.shape[0] < 2:
        raise ValueError("states must hold at least 2 records to test for a fixed point")
    return step_sizes(states[-2:])[-1] < tol  # the last step only


@dataclass(frozen=True)
class CycleReport(AnalysisResult):
    """Period and convergence time of every trajectory (see the module docstring).

    Attributes
    ----------
    period : ndarray of int64, shape (P,)
        1 for a fixed point, k for a k-cycle, 0 when none of period <= max_period was found.
    convergence_time : ndarray of int64, shape (P,)
        First time from which the trajectory stays on its cycle; -1 when period is 0.
    residual : ndarray of float64, shape (P,)
        Largest distance D(x(t), x(t - period)) over the checked window (NaN if period 0).
    final_step : ndarray of float64, shape (P,)
        D(x(T), x(T - 1)), the last step size.
    max_period : int
    tol : float
    """

    _same_shape = ("period convergence_time residual final_step",)
    period: np.ndarray
    convergence_time: np.ndarray
    residual: np.ndarray
    final_step: np.ndarray
    max_period: int = 1
    tol: float = 1e-5

    @property
    def is_fixed_point(self) -> np.ndarray:
        """(P,) bool: period == 1."""
        return self.period == 1

    @property
    def converged(self) -> np.ndarray:
        """(P,) bool: a fixed point or a cycle of period <= max_period was found."""
        return self.period > 0

    def plot(self, ax=None):
        """Bars: how many trajectories ended on a fixed point, a k-cycle, or nothing found."""
        ax = _draw.axes(ax)
        periods = np.arange(self.max_period + 1)
        counts = np.bincount(self.period, minlength=periods.size)[: periods.size]
        labels = ["none"] + ["fixed point"] + [f"{k}-cycle" for k in periods[2:]]
        ax.bar(labels, counts, color=["0.6"] + [f"C{k}" for k in periods[1:]])
        _draw.finish(ax, f"{self.period.size} trajectories (tol {self.tol:g})", "end", "count")
        return ax


def _classify(D: np.ndarray, times: np.ndarray, max_period: int, tol: float) -> CycleReport:
    """Periods and convergence times from lagged distances D (K, T, P)."""
    K, T, P = D.shape
    period = np.zeros(P, dtype=np.int64)
    conv = np.full(P, -1, dtype=np.int64)
    residual = np.full(P, np.nan)
    for k in range(1, min(K, max_period) + 1):
        if T < 2 * k:
            break
        res = D[k - 1, T - k :].max(axis=0)
        new = (period == 0) & (res < tol)
        if not new.any():
            continue
        # pair j compares x(j) with x(j + k); the trajectory is on its cycle from the first j
        # after the last pair that is not within tol
        bad = ~(D[k - 1, k:] < tol)
        idx = np.arange(T - k)[:, None]
        first_good = np.where(bad, idx, -1).max(axis=0) + 1
        period[new] = k
        residual[new] = res[new]
        conv[new] = times[first_good[new]]
    final_step = D[0, T - 1].astype(np.float64)
    return CycleReport(period, conv, residual, final_step, int(max_period), float(tol))


def find_cycles(states, times, max_period: int = 2, tol: float = 1e-5) -> CycleReport:
    """Fixed points and exact k-cycles (k <= max_period) at the end of trajectories.

    Parameters
    ----------
    states : ndarray, shape (T, P, N, d)
        States recorded at every step (``spinsa.run(..., record_every=1).states``).
    times : ndarray of int, shape (T,)
        Their times; consecutive integers.
    max_period : int
        Largest period K looked for; needs T >= 2K records to check every phase.
    tol : float
        Distance D below which two configurations are the same.

    Returns
    -------
    CycleReport
        Period, convergence time, residual and last step size of each of the P
        trajectories, arrays of shape (P,).
    """
    states = check_states(states, "states", ndims=(4,))
    times = check_times(times, states.shape[0])
    max_period = check_count(max_period, "max_period", 1)
    tol = check_positive(tol, "tol")
    if states.shape[0] > 1 and not np.all(np.diff(times) == 1):
        raise ValueError(
            "find_cycles needs a state at every step: times must be consecutive integers "
            "(record with record_every=1)"
        )
    if states.shape[0] < 2:
        raise ValueError("states must hold at least 2 records")
    D = lagged_distances(states, min(max_period, states.shape[0] - 1))
    return _classify(D, times, max_period, tol)


@dataclass(frozen=True)
class StateClusters(AnalysisResult):
    """Groups of configurations with mutual overlap >= q_min.

    Attributes
    ----------
    labels : ndarray of int64, shape (P,)
        Cluster of each configuration, 0 for the largest; -1 for excluded ones.
    representatives : ndarray of int64, shape (C,)
        Index of the first (lowest-index) member of each cluster.
    sizes : ndarray of int64, shape (C,)
        Members per cluster, in decreasing order.
    q_min : float
    absolute : bool
        Whether |q| was compared (x and -x in one cluster).
    """

    _same_shape = ("representatives sizes",)
    labels: np.ndarray
    representatives: np.ndarray
    sizes: np.ndarray
    q_min: float = 0.99
    absolute: bool = False

    @property
    def n_clusters(self) -> int:
        return int(self.sizes.shape[0])

    def plot(self, ax=None):
        """Bars: members of each cluster, largest first."""
        ax = _draw.axes(ax)
        ax.bar(np.arange(self.sizes.size), self.sizes, color="C0")
        title = f"{self.sizes.size} clusters at q >= {self.q_min:g}"
        _draw.finish(ax, title, "cluster (largest first)", "members")
        return ax


def _unit_rows(states: np.ndarray) -> np.ndarray:
    X = states.reshape(states.shape[0], int(np.prod(states.shape[1:]))).astype(np.float64)
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return np.divide(X, n, out=np.zeros_like(X), where=n > 0)


def _check_q_min(q_min) -> float:
    q_min = check_real(q_min, "q_min")
    if not -1.0 < q_min <= 1.0:
        raise ValueError(f"q_min must be in (-1, 1], got {q_min}")
    return q_min


def _relabel(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Number clusters by decreasing size (ties: first member first)."""
    valid = labels >= 0
    _, first, inverse, sizes = np.unique(
        labels[valid], return_index=True, return_inverse=True, return_counts=True
    )
    first = np.flatnonzero(valid)[first]
    order = np.lexsort((first, -sizes))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    out = np.full(labels.shape, -1, dtype=np.int64)
    out[valid] = rank[inverse]
    return out, first[order].astype(np.int64), sizes[order].astype(np.int64)


def cluster_states(states, q_min: float = 0.99, *, absolute: bool = False, include=None):
    """Group configurations whose mutual overlap is at least ``q_min`` (leader clustering).

    The first unassigned configuration opens a cluster and takes every unassigned one with
    q >= q_min; this repeats until all are assigned. For the final states of a deterministic
    dynamics, configurations on one attractor have q ~ 1 and those on different attractors
    are far apart, so the result does not depend on the order; the cost is O(P C N d) for C
    clusters.

    Parameters
    ----------
    states : ndarray, shape (P, N, d)
        Configurations (e.g. final states).
    q_min : float in (-1, 1]
        Overlap threshold; q is normalised so that a configuration has q = 1 with itself.
    absolute : bool
        Compare |q| (put x and -x in one cluster).
    include : ndarray of bool, shape (P,), optional
        Cluster only these; the others get label -1.

    Returns
    -------
    StateClusters
    """
    states = check_states(states, "states", ndims=(3,))
    q_min = _check_q_min(q_min)
    P = states.shape[0]
    include = np.ones(P, dtype=bool) if include is None else np.asarray(include)
    if include.shape != (P,) or include.dtype != np.bool_:
        raise ValueError(f"include must be a bool array of shape ({P},)")
    labels = _leader(_unit_rows(states), q_min, absolute, include)
    return StateClusters(*_relabel(labels), q_min=q_min, absolute=bool(absolute))


def _leader(X: np.ndarray, q_min: float, absolute: bool, include: np.ndarray) -> np.ndarray:
    labels = np.full(X.shape[0], -1, dtype=np.int64)
    todo = np.flatnonzero(include)
    c = 0
    while todo.size:
        q = X[todo] @ X[todo[0]]
        take = (np.abs(q) if absolute else q) >= q_min
        take[0] = True  # a zero configuration still belongs to its own cluster
        labels[todo[take]] = c
        todo, c = todo[~take], c + 1
    return labels


@dataclass(frozen=True)
class AttractorReport(AnalysisResult):
    """The attractors reached from P initial conditions (the arguments of
    :func:`find_attractors` are kept as attributes: ``lam``, ``gamma``, ``norm``...).

    Attributes
    ----------
    labels : ndarray of int64, shape (P,)
        Attractor reached (0 = largest basin); -1 if not converged to a fixed point or a
        cycle of period <= max_period within the run.
    period, convergence_time, final_step : ndarray, shape (P,)
        As in :class:`CycleReport`.
    steps_run : ndarray of int64, shape (P,), or None
        Steps each trajectory ran: ``steps`` for all, or with ``until_converged`` the step
        at which it converged (``max_steps`` if it did not). None in files written before
        this field existed.
    states : ndarray, shape (C, N, d)
        The C attractors, by decreasing basin: the final state of each one's lowest-index
        trajectory (one phase of it for a cycle).
    attractor_period : ndarray of int64, shape (C,)
    basin_size : ndarray of int64, shape (C,)
    basin_fraction : ndarray of float64, shape (C,)
        basin_size / P; with ``fraction_unconverged`` they sum to 1.
    overlap_mean : ndarray, shape (C,), or None
        Overlap with the mean training pattern, projected token by token on the sphere
        (:func:`spinsa.analysis.mean_pattern`).
    nearest_index, nearest_overlap : ndarray, shape (C,), or None
        Nearest training pattern and its overlap.
    corr_mean, corr_nearest : ndarray, shape (C,), or None
        Pixel correlation of the decoded attractor with the mean training image (the
        "average digit") and with the nearest training image (given an embedding).
    group_fractions, group_unconverged : ndarray, shape (G, C) and (G,), or None
        Per group of initial conditions (when ``groups`` was given): the fraction of its
        members in each basin, and unconverged.
    group_names : tuple of str
    fraction_unconverged : float
    steps : int
        ``steps``, or ``max_steps`` with ``until_converged``.
    until_converged : bool
    """

    _same_shape = (
        "labels period convergence_time final_step steps_run",
        "attractor_period basin_size basin_fraction overlap_mean nearest_index nearest_overlap "
        "corr_mean corr_nearest",
    )
    labels: np.ndarray
    period: np.ndarray
    convergence_time: np.ndarray
    final_step: np.ndarray
    states: np.ndarray
    attractor_period: np.ndarray
    basin_size: np.ndarray
    basin_fraction: np.ndarray
    overlap_mean: np.ndarray | None = None
    nearest_index: np.ndarray | None = None
    nearest_overlap: np.ndarray | None = None
    corr_mean: np.ndarray | None = None
    corr_nearest: np.ndarray | None = None
    group_fractions: np.ndarray | None = None
    group_unconverged: np.ndarray | None = None
    group_names: tuple[str, ...] = ()
    steps_run: np.ndarray | None = None
    fraction_unconverged: float = 0.0
    lam: float = 1.0
    gamma: float = 1.0
    norm: str = "sphere"
    update: str = "sync"
    steps: int = 0
    until_converged: bool = False
    max_period: int = 1
    tol: float = 1e-5
    q_min: float = 0.99

    def __post_init__(self):
        super().__post_init__()
        if self.states.shape[:1] != self.basin_size.shape or self.basin_size.ndim != 1:
            raise ValueError(
                f"states must have shape (C, N, d) and basin_size (C,), got "
                f"{self.states.shape} and {self.basin_size.shape}"
            )

    @property
    def n_attractors(self) -> int:
        return int(self.basin_size.shape[0])

    def plot(self, ax=None, *, shown: int = 10):
        """Basins: the fraction of starts that reached each attractor (largest first) and
        that did not converge; one stacked bar per group of starts when ``groups`` was given.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure when None.
        shown : int
            Attractors drawn one by one; the others are summed in "other attractors".

        Returns
        -------
        matplotlib.axes.Axes
        """
        ax = _draw.axes(ax, figsize=(6.0, 3.0))
        if self.group_fractions is None:
            names = ["all starts"]
            fractions = self.basin_fraction[None, :]
            unconverged = np.array([self.fraction_unconverged])
        else:
            names = list(self.group_names)
            order = [names.index(g) for g in ("test", "masked", "noisy", "random") if g in names]
            order += [k for k in range(len(names)) if k not in order]
            names = [names[k] for k in order]
            fractions, unconverged = self.group_fractions[order], self.group_unconverged[order]
        left = np.zeros(len(names))
        shown = min(self.n_attractors, int(shown))
        for a in range(shown):
            ax.barh(names, fractions[:, a], left=left, color=f"C{a % 10}", label=f"#{a}")
            left += fractions[:, a]
        rest = fractions[:, shown:].sum(axis=1)
        if rest.any():
            ax.barh(names, rest, left=left, color="0.6", label="other attractors")
            left += rest
        hatched = dict(color="white", edgecolor="0.3", hatch="//", label="not converged")
        ax.barh(names, unconverged, left=left, **hatched)
        ax.invert_yaxis()  # groups top to bottom in the order above
        ax.set_xlim(0, 1)
        ax.set_xlabel("fraction of starts in each basin")
        ax.set_ylabel("starts")
        ax.legend(
            fontsize=7, ncols=min(6, shown + 2), loc="upper center", bbox_to_anchor=(0.5, -0.25)
        )
        return ax


def random_spins(n_samples: int, n_tokens: int, d: int, rng=0, dtype=np.float32) -> np.ndarray:
    """Independent uniformly random unit spins, shape (n_samples, n_tokens, d).

    ``rng`` is a ``np.random.Generator``, an int seed or ``None``.
    """
    n_samples = check_count(n_samples, "n_samples", 1)
    n_tokens = check_count(n_tokens, "n_tokens", 2)
    d = check_count(d, "d", 1)
    x = as_generator(rng).standard_normal((n_samples, n_tokens, d))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    return x.astype(dtype)


def _merge_cycle_phases(labels, phases, period, reps_unit, q_min, absolute):
    """Join clusters that hold different phases of one cycle (connected components of the
    graph whose edges join a trajectory's cluster to the clusters of its other phases)."""
    edges = [np.empty((0, 2), dtype=np.int64)]
    for j in range(1, phases.shape[0]):
        who = np.flatnonzero((period > j) & (labels >= 0))
        if who.size == 0:
            continue
        q = _unit_rows(phases[j][who]) @ reps_unit.T
        s, c = np.nonzero((np.abs(q) if absolute else q) >= q_min)
        edges.append(np.stack([labels[who[s]], c], axis=1))
    a, b = np.concatenate(edges).T
    C = reps_unit.shape[0]
    root = connected_components(coo_matrix((np.ones(a.size), (a, b)), shape=(C, C)))[1]
    return np.where(labels >= 0, root[np.maximum(labels, 0)], -1)


def _run_and_classify(J, lam, x0s, steps: int, max_period: int, tol: float, dynamics):
    """Run the dynamics, keeping only the last max_period + 1 states and the lagged distances:
    the cycles, the final states (P, N, d), the last max_period phases (K, P, N, d) and the
    steps each trajectory ran (P,), all ``steps``."""
    K, P = max_period, x0s.shape[0]
    ring = np.empty((K + 1, *x0s.shape), dtype=x0s.dtype)
    ring[0] = x0s
    D = np.full((K, steps + 1, P), np.nan, dtype=np.float64)
    buf = np.empty(P, dtype=x0s.dtype)

    def track(t, x):
        x = np.ascontiguousarray(x, dtype=ring.dtype)
        ring[t % (K + 1)] = x
        for k in range(1, min(K, t) + 1):
            _kernels.token_max_distance(x, ring[(t - k) % (K + 1)], buf)
            D[k - 1, t] = buf

    run(x0s, J, lam, steps, record_every=steps, callback=track, **dynamics)
    cycles = _classify(D, np.arange(steps + 1), max_period, tol)
    final = ring[steps % (K + 1)]
    phases = np.stack([ring[(steps - j) % (K + 1)] for j in range(K)])
    return cycles, final, phases, np.full(P, steps, dtype=np.int64)


class _Watch:
    """Lagged distances of running trajectories, one step at a time, and the first step at
    which each one is on a fixed point or a cycle: as :func:`_classify` would find from the
    records up to that step, without keeping them.

    For every lag k <= K and trajectory: the run of consecutive steps with
    D(x(t), x(t - k)) < tol, the last step at which it was not, and the last K distances.
    Period k is reached at step t when the run is at least k long (the smallest such k
    wins); the convergence time is then the step after the last one not within tol, minus
    k - 1 (the first pair from which every pair holds), as in :func:`_classify`.
    """

    def __init__(self, x0s: np.ndarray, max_period: int, tol: float):
        K, P = max_period, x0s.shape[0]
        self.K, self.tol = K, tol
        self.ring = np.empty((K + 1, *x0s.shape), dtype=x0s.dtype)  # x(t) at t % (K + 1)
        self.ring[0] = x0s
        self.run_len = np.zeros((K, P), dtype=np.int64)
        self.last_bad = np.full((K, P), -1, dtype=np.int64)  # -1: never out of tol
        self.recent = np.full((K, K, P), np.nan)  # D(x(t), x(t - k)) at [k - 1, t % K]
        self.buf = np.empty(P, dtype=x0s.dtype)

    def keep(self, which: np.ndarray) -> None:
        """Go on with the trajectories ``which`` only (indices into the current ones)."""
        self.ring = np.ascontiguousarray(self.ring[:, which])
        self.run_len, self.last_bad = self.run_len[:, which], self.last_bad[:, which]
        self.recent, self.buf = self.recent[:, :, which], self.buf[: which.size]

    def step(self, t: int, x: np.ndarray) -> np.ndarray:
        """Take x(t) (P, N, d); the period reached at step t by each trajectory (0: none)."""
        x = np.ascontiguousarray(x, dtype=self.ring.dtype)
        self.ring[t % (self.K + 1)] = x
        period = np.zeros(x.shape[0], dtype=np.int64)
        for k in range(1, min(self.K, t) + 1):
            _kernels.token_max_distance(x, self.ring[(t - k) % (self.K + 1)], self.buf)
            dist = self.buf.astype(np.float64)
            good = dist < self.tol
            self.run_len[k - 1] = np.where(good, self.run_len[k - 1] + 1, 0)
            self.last_bad[k - 1, ~good] = t
            self.recent[k - 1, t % self.K] = dist
            period[(period == 0) & (self.run_len[k - 1] >= k)] = k
        return period

    def report(self, t: int, who: np.ndarray, period: np.ndarray) -> dict:
        """Convergence time, residual and last step of the trajectories ``who`` that reached
        ``period`` (> 0) at step t, and their states x(t - j), j < K."""
        k = period[who]
        first_good = np.maximum(self.last_bad[k - 1, who] - k + 1, 0)
        lags = (t - np.arange(self.K)[:, None]) % self.K  # slots of the last K distances
        last = self.recent[k - 1, lags, who]  # (K, len(who)): D at t, t - 1, ...
        residual = np.where(np.arange(self.K)[:, None] < k, last, -np.inf).max(axis=0)
        phases = np.stack([self.ring[(t - j) % (self.K + 1), who] for j in range(self.K)])
        return dict(
            convergence_time=first_good,
            residual=residual,
            final_step=self.recent[0, t % self.K, who],
            phases=phases,
        )


CHUNK = 128  # steps between two removals of the converged trajectories from the batch


def _run_until_converged(J, lam, x0s, max_steps: int, max_period: int, tol: float, dynamics):
    """Run each trajectory until it is on a fixed point or a cycle of period <= max_period
    (within tol), or for max_steps: the cycles, the final states (P, N, d), the last
    max_period phases (K, P, N, d) and the steps each one ran (P,).

    The dynamics runs in chunks of :data:`CHUNK` steps; after each, the trajectories that
    converged leave the batch (each one's results are those of the step at which it did).
    """
    K, P = max_period, x0s.shape[0]
    period = np.zeros(P, dtype=np.int64)
    conv = np.full(P, -1, dtype=np.int64)
    residual = np.full(P, np.nan)
    final_step = np.full(P, np.nan)
    final, phases = x0s.copy(), np.repeat(x0s[None], K, axis=0)
    steps_run = np.full(P, max_steps, dtype=np.int64)
    watch, active, x, t0 = _Watch(x0s, K, tol), np.arange(P), x0s, 0
    seeds = np.random.default_rng(dynamics.pop("seed"))  # async site orders, chunk by chunk
    show = dynamics.pop("progress")

    def track(t_chunk, x_now):
        t = t0 + t_chunk
        reached = watch.step(t, x_now)
        reached[period[active] > 0] = 0  # converged earlier in this chunk: keep its results
        who = np.flatnonzero(reached)
        if t == max_steps:  # the last step: what the others have at the end
            rest = np.flatnonzero((period[active] == 0) & (reached == 0))
            final[active[rest]] = x_now[rest]
            final_step[active[rest]] = watch.recent[0, t % K, rest]
            phases[:, active[rest]] = np.stack(
                [watch.ring[(t - j) % (K + 1), rest] for j in range(K)]
            )
        if who.size == 0:
            return
        got, p = watch.report(t, who, reached), active[who]
        period[p], conv[p], residual[p] = reached[who], got["convergence_time"], got["residual"]
        final[p], final_step[p], phases[:, p] = x_now[who], got["final_step"], got["phases"]
        steps_run[p] = t

    with progress(max_steps, "attractors", "step", enabled=show) as bar:
        while active.size and t0 < max_steps:
            n = min(CHUNK, max_steps - t0)
            seed = int(seeds.integers(2**32))
            x = run(x, J, lam, n, record_every=n, callback=track, seed=seed, **dynamics).final
            t0 += n
            left = np.flatnonzero(period[active] == 0)
            watch.keep(left)
            active, x = active[left], np.ascontiguousarray(x[left])
            bar.update(n)
    cycles = CycleReport(period, conv, residual, final_step, int(max_period), float(tol))
    return cycles, final, phases, steps_run


def _cluster_attractors(final, phases, period, q_min: float, absolute: bool):
    """Cluster the final states of the converged trajectories, merging phases of one cycle:
    labels (P,), representatives (C,) and sizes (C,) as in :func:`_relabel`."""
    labels = _leader(_unit_rows(final), q_min, absolute, period > 0)
    if labels.max(initial=-1) >= 0:
        labels, reps, _ = _relabel(labels)
        labels = _merge_cycle_phases(
            labels, phases, period, _unit_rows(final[reps]), q_min, absolute
        )
    return _relabel(labels)


def _compare_with_training(states, patterns, embedding, images, absolute: bool) -> dict:
    """The fields of :class:`AttractorReport` that compare the attractors ``states`` (C, N, d)
    with the training patterns and images."""
    fields: dict = {}
    if patterns is not None and len(states):
        mean = np.broadcast_to(mean_pattern(patterns), states.shape)
        fields["overlap_mean"] = target_overlaps(states, mean).astype(np.float64)
        near = nearest_patterns(states, patterns, absolute=absolute)
        fields["nearest_index"] = near.index
        fields["nearest_overlap"] = near.overlap.astype(np.float64)
    if embedding is not None and len(states):
        train = np.asarray(images) if images is not None else embedding.decode(patterns)
        decoded = embedding.decode(states)
        mean_img = np.broadcast_to(train.mean(axis=0), decoded.shape)
        fields["corr_mean"] = pixel_correlations(decoded, mean_img)
        if patterns is not None:
            fields["corr_nearest"] = pixel_correlations(decoded, train[fields["nearest_index"]])
    return fields


def _group_fractions(groups, labels: np.ndarray, n_attractors: int) -> dict:
    """Per group of initial conditions, the fraction of its members in each basin."""
    names, inverse = np.unique(groups, return_inverse=True)
    share = np.zeros((names.size, n_attractors + 1))  # column 0: unconverged
    np.add.at(share, (inverse, labels + 1), 1)
    share /= share.sum(axis=1, keepdims=True)
    return dict(
        group_fractions=share[:, 1:],
        group_unconverged=share[:, 0],
        group_names=tuple(map(str, names)),
    )


TOL_EPS = 100  # with until_converged, tol = TOL_EPS * eps of the spins' dtype
MAX_STEPS = 10_000


def default_tol(dtype) -> float:
    """The tolerance of ``find_attractors(..., until_converged=True)``: 100 epsilons of the
    spins' dtype (1.2e-5 in float32, 2.2e-14 in float64).

    A converged float32 trajectory keeps moving by rounding, 1 to 2 epsilons per step
    (max over tokens); 100 epsilons stay clear of that floor, and below the steps of the
    slow transients that a looser tolerance (such as the square root of epsilon) mistakes
    for fixed points.
    """
    return float(TOL_EPS * np.finfo(np.dtype(dtype)).eps)


# find_attractors estimates its run time before it starts, and refuses more than
# ATTRACTOR_TIME_LIMIT seconds: a step costs about _STEP_SECONDS of calls whatever the size,
# plus its 4 P N² d² floating-point operations at about _FLOPS_PER_SECOND. Measured on 2
# cores: 1.8e-5 s a step at N = 2, and 1.6e9 of these operations a second at N = 196,
# d = 8, P = 250; the rate assumed is that of a larger machine, so that no run it could
# finish in a day is refused.
ATTRACTOR_TIME_LIMIT = 86_400.0  # a day
_STEP_SECONDS = 2e-5
_FLOPS_PER_SECOND = 1e10


def _estimated_seconds(n_starts: int, n_tokens: int, d: int, n_steps: int) -> float:
    """The most seconds :func:`find_attractors` may take for ``n_steps`` steps of
    ``n_starts`` trajectories of N tokens of dimension d (every one running to the end)."""
    flops = 4.0 * n_starts * n_tokens * n_tokens * d * d
    return float(n_steps) * (_STEP_SECONDS + flops / _FLOPS_PER_SECOND)


def _check_cost(n_steps: int, x0s: np.ndarray, name: str) -> None:
    """Refuse a run of :func:`find_attractors` estimated to take more than a day."""
    P, N, d = x0s.shape
    seconds = _estimated_seconds(P, N, d, n_steps)
    if seconds > ATTRACTOR_TIME_LIMIT:
        default = f" (the default is {MAX_STEPS:,})" if name == "max_steps" else ""
        raise ValueError(
            f"{name} = {n_steps} would run the dynamics of {P} trajectories (N = {N}, d = {d}) "
            f"for up to about {seconds:.2g} s ({seconds / 86_400:.2g} days), more than the "
            f"limit of a day; lower {name}{default} or run fewer starts at a time"
        )


def _check_steps(steps, until_converged: bool, max_steps, max_period: int) -> tuple[int, int]:
    """(steps, max_steps) of :func:`find_attractors`, checked."""
    if until_converged:
        if steps is not None:
            raise ValueError(
                "give steps (a fixed number of steps) or until_converged=True with "
                "max_steps (the most steps a trajectory may run), not both"
            )
        steps = check_count(MAX_STEPS if max_steps is None else max_steps, "max_steps", 1)
        return steps, steps
    if max_steps is not None:
        raise ValueError("max_steps applies with until_converged=True; otherwise give steps")
    if steps is None:
        raise ValueError(
            "steps is missing: give the number of steps, or until_converged=True to run each "
            "trajectory until it converges"
        )
    steps = check_count(steps, "steps", 1)
    if steps < 2 * max_period - 1:
        raise ValueError(
            f"steps = {steps} is too short to recognise cycles of period {max_period}: "
            f"it needs steps >= 2 * max_period - 1 = {2 * max_period - 1}"
        )
    return steps, steps


def _check_comparisons(x0s, patterns, embedding, images, groups):
    """The patterns of :func:`find_attractors` checked against the starts (or None), after
    checking ``groups`` and that an embedding has something to compare with."""
    P = x0s.shape[0]
    if groups is not None and np.shape(groups) != (P,):
        raise ValueError(f"groups must have shape ({P},), one label per initial condition")
    if patterns is not None:
        patterns = check_patterns(x0s, patterns, "patterns")
    if embedding is not None and patterns is None and images is None:
        raise ValueError("embedding needs patterns or images to compare the attractors with")
    return patterns


def find_attractors(
    J,
    lam: float,
    x0s,
    steps: int | None = None,
    *,
    until_converged: bool = False,
    max_steps: int | None = None,
    gamma: float = 1.0,
    norm: str = "sphere",
    update: str = "sync",
    seed: int | None = None,
    max_period: int = 2,
    tol: float | None = None,
    q_min: float = 0.99,
    absolute: bool = False,
    patterns=None,
    embedding=None,
    images=None,
    groups=None,
    progress: bool = False,
) -> AttractorReport:
    """Run the dynamics from many initial conditions and identify the attractors reached.

    Every trajectory runs ``steps`` steps of :func:`spinsa.run`, or with
    ``until_converged=True`` until it is on a fixed point or a cycle of period <=
    ``max_period`` (or for ``max_steps``). The distances D(x(t), x(t - k)), k <= max_period,
    are computed on the fly from the last ``max_period + 1`` states, which gives each
    trajectory's period and convergence time as in :func:`find_cycles`. The final states of
    the converged ones are clustered by mutual overlap (:func:`cluster_states`, phases of
    one cycle merged), and each attractor is compared with the training patterns.

    Parameters
    ----------
    J, lam
        Couplings, shape (N, N, d, d), and the inverse temperature of the dynamics.
    x0s : ndarray, shape (P, N, d)
        Initial conditions (test images, corrupted images, :func:`random_spins`...).
    steps : int, optional
        Steps per trajectory, at least 2 * max_period - 1. Required unless
        ``until_converged``.
    until_converged : bool
        Run each trajectory until it has converged: it stops at the first step at which its
        last k distances D(x(t), x(t - k)) are all below ``tol`` for some k <= max_period
        (the smallest such k is its period), and leaves the batch, so the others run
        faster. A fixed number of steps is a guess: trained couplings often have slow
        transients (with the tutorial's fit, every trajectory from 250 random starts still
        moved by about 1e-3 per step at t = 200; they converged after a median of 1,362
        steps, at most 2,066).
    max_steps : int, optional
        With ``until_converged``: the most steps a trajectory runs (default 10,000); those
        still moving then count as unconverged (label -1, period 0: a cycle longer than
        ``max_period``, such as a rotation's, ends so). A run estimated to take more than a
        day is refused, with ``steps`` too (every trajectory running to the end, at 20 µs a
        step plus 4 P N² d² flops at 1e10 a second).
    gamma, norm, update, seed, progress
        Passed to :func:`spinsa.run` (``until_converged`` with ``update="async"``: the site
        orders of each chunk of steps are drawn from ``seed``).
    max_period : int
        As in :func:`find_cycles`.
    tol : float, optional
        As in :func:`find_cycles`. Default: 1e-5 with ``steps``; with ``until_converged``,
        :func:`default_tol` of the spins' dtype (100 epsilons: 1.2e-5 in float32, 2.2e-14
        in float64).
    q_min, absolute
        As in :func:`cluster_states`; ``absolute`` also ranks training patterns by |overlap|.
    patterns : ndarray, shape (M, N, d), optional
        Training patterns: gives ``overlap_mean``, ``nearest_index``, ``nearest_overlap``.
    embedding : PatchEmbedding, optional
        Decodes attractors into images: gives ``corr_mean`` and ``corr_nearest``.
    images : ndarray, shape (M, H, W[, C]), optional
        The training images in pixels (default: ``embedding.decode(patterns)``).
    groups : array_like, shape (P,), optional
        A label per initial condition ("test", "masked", "random"...): gives basin fractions
        per group.

    Returns
    -------
    AttractorReport
    """
    x0s = check_states(x0s, "x0s", ndims=(3,))
    lam = check_positive(lam, "lam")
    gamma = check_real(gamma, "gamma")
    max_period = check_count(max_period, "max_period", 1)
    until_converged = bool(until_converged)
    steps, max_steps = _check_steps(steps, until_converged, max_steps, max_period)
    _check_cost(steps, x0s, "max_steps" if until_converged else "steps")
    if tol is None:
        tol = default_tol(x0s.dtype) if until_converged else 1e-5
    tol = check_positive(tol, "tol")
    q_min = _check_q_min(q_min)
    P = x0s.shape[0]
    patterns = _check_comparisons(x0s, patterns, embedding, images, groups)

    dynamics = dict(gamma=gamma, norm=norm, update=update, seed=seed, progress=progress)
    run_ = _run_until_converged if until_converged else _run_and_classify
    cycles, final, phases, steps_run = run_(J, lam, x0s, steps, max_period, tol, dynamics)
    labels, reps, sizes = _cluster_attractors(final, phases, cycles.period, q_min, absolute)
    reps_states = final[reps]
    fields = _compare_with_training(reps_states, patterns, embedding, images, absolute)
    if groups is not None:
        fields.update(_group_fractions(groups, labels, reps.size))
    return AttractorReport(
        labels=labels,
        period=cycles.period,
        convergence_time=cycles.convergence_time,
        final_step=cycles.final_step,
        states=reps_states,
        attractor_period=cycles.period[reps],
        basin_size=sizes,
        basin_fraction=sizes / P,
        steps_run=steps_run,
        fraction_unconverged=float(np.mean(labels < 0)) if P else 0.0,  # none of none
        lam=lam,
        gamma=gamma,
        norm=str(norm),
        update=str(update),
        steps=steps,
        until_converged=until_converged,
        max_period=max_period,
        tol=tol,
        q_min=q_min,
        **fields,
    )


@dataclass(frozen=True)
class DecodedImages(AnalysisResult):
    """Configurations decoded into images (e.g. the attractors), for figures.

    Attributes
    ----------
    images : ndarray of float32, shape (C, H, W), in the embedding's pixel space
    """

    images: np.ndarray

    def __post_init__(self):
        super().__post_init__()
        if self.images.ndim not in (3, 4):
            raise ValueError(f"images must have shape (C, H, W[, ch]), got {self.images.shape}")

    def plot(self, ax=None, *, n_show: int = 8):
        """The first ``n_show`` images side by side, in grey levels.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure when None.
        n_show : int
            Images shown at most.

        Returns
        -------
        matplotlib.axes.Axes
        """
        images = np.asarray(self.images[: int(n_show)], dtype=np.float64)
        if images.ndim == 4:  # colour channels: their mean
            images = images.mean(axis=-1)
        gap = np.ones((images.shape[1], 1))  # a white column between images
        row = [part for im in images for part in (im, gap)][:-1] or [gap]
        ax = _draw.axes(ax, figsize=(1.2 * max(len(images), 1), 1.6))
        _draw.gray(ax, np.concatenate(row, axis=1), f"{len(images)} of {len(self.images)}")
        return ax
