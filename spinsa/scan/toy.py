"""Two small point kinds that need no data set: for tutorials, tests and benchmarks.

``"synthetic"``: Hebbian recall of random patterns. P patterns ξ^μ of N unit spins in R^d
(correlated through a common parent when ``patterns.correlation > 0``) are stored in the
Hebbian couplings J_ij = (1/P) Σ_μ ξ^μ_i ξ^μ_j^T; every pattern is corrupted by Gaussian
noise of standard deviation ``corruption.noise`` per component (then put back on the sphere)
and iterated for ``dynamics.steps`` steps at λ = ``dynamics.lam``. The point's file holds,
under ``/summary``:

==================  ======  ========================================================
``t``               (T,)    recorded times 0..steps
``overlap``         (T,)    m(t) = ⟨(1/N) Σ_i x_i(t)·ξ_i⟩ over the patterns
``error``           (T,)    ⟨(1/2N) Σ_i |x_i(t) − ξ_i|²⟩ (= 1 − m(t) for unit spins)
``energy``          (T,)    ⟨E(x(t))⟩ over the patterns
``best_error``      ()      min over t ≥ 1 of the error (t = 0 when steps = 0)
``best_t``          ()      the first t where it is reached
``lifetime``        ()      mean time the overlap stays above ``analysis.threshold``
``n_attractors``    ()      distinct final states (mutual overlap ≥ ``analysis.q_min``)
``mean_overlap``    ()      mean overlap of the final states with the (projected) mean pattern
``final_overlap``   ()      m(steps)
==================  ======  ========================================================

``"trivial"``: writes two random numbers; the work is a file write and an optional sleep.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from spinsa._checks import check_choice, check_count
from spinsa.scan.kinds import PointCost

__all__ = [
    "SyntheticConfig",
    "TrivialConfig",
    "estimate_synthetic",
    "estimate_trivial",
    "run_synthetic_point",
    "run_trivial_point",
]

# ------------------------------------------------------------------ nested config helpers


def _check_real(value: Any, name: str, low: float, *, open_low: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < low or (open_low and value == low):
        raise ValueError(f"{name} must be {'>' if open_low else '>='} {low}, got {value!r}")
    return value


def _from_dict(cls, data: Mapping[str, Any], where: str):
    """A (nested) config dataclass from a mapping; unknown keys raise listing the known."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where or cls.__name__} must be a table, got {data!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(
            f"unknown key(s) {unknown} in {where or cls.__name__}; known: {', '.join(known)}"
        )
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = _from_dict(hint, value, f"{where}.{name}" if where else name)
        else:
            kwargs[name] = value
    return cls(**kwargs)


class _Config:
    """from_dict / to_dict / resolve for the nested config dataclasses of this module."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        return _from_dict(cls, data, "")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def resolve(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """The whole config (defaults filled in), validated, as a nested dict."""
        return cls.from_dict(data).to_dict()


# ------------------------------------------------------------------------- synthetic


@dataclass(frozen=True)
class PatternsConfig(_Config):
    """P random patterns of N unit spins in R^d; ``correlation`` c in [0, 1] (see
    :func:`spinsa.datasets.correlated_patterns`)."""

    n_patterns: int = 4
    n_tokens: int = 16
    d: int = 4
    correlation: float = 0.0

    def __post_init__(self):
        check_count(self.n_patterns, "patterns.n_patterns", 1)
        check_count(self.n_tokens, "patterns.n_tokens", 2)
        check_count(self.d, "patterns.d", 1)
        c = _check_real(self.correlation, "patterns.correlation", 0.0)
        if c > 1:
            raise ValueError(f"patterns.correlation must be in [0, 1], got {c}")


@dataclass(frozen=True)
class CorruptionConfig(_Config):
    """Gaussian noise of std ``noise`` per spin component, then back on the sphere."""

    noise: float = 0.3

    def __post_init__(self):
        _check_real(self.noise, "corruption.noise", 0.0)


@dataclass(frozen=True)
class SyntheticDynamicsConfig(_Config):
    """Arguments of :func:`spinsa.run`."""

    lam: float = 1.0
    gamma: float = 1.0
    steps: int = 20
    norm: Literal["sphere", "layernorm", "none"] = "sphere"
    update: Literal["sync", "async"] = "sync"

    def __post_init__(self):
        _check_real(self.lam, "dynamics.lam", 0.0, open_low=True)
        _check_real(self.gamma, "dynamics.gamma", -math.inf)
        check_count(self.steps, "dynamics.steps", 0)
        check_choice(self.norm, "dynamics.norm", ("sphere", "layernorm", "none"))
        check_choice(self.update, "dynamics.update", ("sync", "async"))


@dataclass(frozen=True)
class SyntheticAnalysisConfig(_Config):
    """Lifetime threshold on the overlap, and the overlap that merges two final states."""

    threshold: float = 0.9
    q_min: float = 0.99

    def __post_init__(self):
        _check_real(self.threshold, "analysis.threshold", -1.0)
        q = _check_real(self.q_min, "analysis.q_min", -1.0, open_low=True)
        if q > 1:
            raise ValueError(f"analysis.q_min must be in (-1, 1], got {q}")


@dataclass(frozen=True)
class SyntheticConfig(_Config):
    """Config of the ``"synthetic"`` point kind (see the module docstring).

    Attributes
    ----------
    patterns, corruption, dynamics, analysis : sections
        Valid axis names are their dotted keys: ``patterns.n_patterns``, ``dynamics.lam``...
    seed : int
        Seed of the patterns, the noise and the asynchronous site order.
    sleep : float
        Seconds of idle time added to the point (to test or benchmark the scheduling).
    """

    patterns: PatternsConfig = field(default_factory=PatternsConfig)
    corruption: CorruptionConfig = field(default_factory=CorruptionConfig)
    dynamics: SyntheticDynamicsConfig = field(default_factory=SyntheticDynamicsConfig)
    analysis: SyntheticAnalysisConfig = field(default_factory=SyntheticAnalysisConfig)
    seed: int = 0
    sleep: float = 0.0

    def __post_init__(self):
        check_count(self.seed, "seed", 0)
        _check_real(self.sleep, "sleep", 0.0)


def synthetic_summary(config: SyntheticConfig) -> dict[str, np.ndarray]:
    """Run one synthetic point in memory; the arrays its file holds under ``/summary``."""
    import spinsa
    from spinsa.analysis import cluster_states, mean_pattern, overlap_lifetimes, target_overlaps
    from spinsa.datasets import correlated_patterns

    p, dyn, ana = config.patterns, config.dynamics, config.analysis
    rng = np.random.default_rng(config.seed)
    xi = correlated_patterns(p.n_patterns, p.n_tokens, p.d, p.correlation, seed=rng)
    J = spinsa.hebbian_couplings(xi)
    x0 = xi + config.corruption.noise * rng.standard_normal(xi.shape).astype(xi.dtype)
    norms = np.linalg.norm(x0, axis=-1, keepdims=True)
    x0 = np.where(norms > 0, x0 / np.where(norms > 0, norms, 1), xi).astype(xi.dtype)
    traj = spinsa.run(
        x0,
        J,
        dyn.lam,
        dyn.steps,
        gamma=dyn.gamma,
        norm=dyn.norm,
        update=dyn.update,
        seed=config.seed,
    )
    states = traj.states.astype(np.float64)
    m = target_overlaps(states, xi.astype(np.float64))  # (T, P)
    error = 0.5 * ((states - xi[None]) ** 2).sum(-1).mean(-1)  # (T, P)
    curve = error.mean(axis=1)
    first = 1 if dyn.steps >= 1 else 0
    best = first + int(np.argmin(curve[first:]))
    lifetimes = overlap_lifetimes(m, traj.times, ana.threshold)
    final = traj.final.astype(np.float64)
    clusters = cluster_states(final, ana.q_min)
    mp = mean_pattern(xi.astype(np.float64))
    mean_overlap = np.einsum("pna,na->p", final, mp) / p.n_tokens
    return {
        "t": np.asarray(traj.times, dtype=np.int64),
        "overlap": m.mean(axis=1),
        "error": curve,
        "energy": traj.energies.mean(axis=1),
        "best_error": np.float64(curve[best]),
        "best_t": np.int64(traj.times[best]),
        "lifetime": np.float64(lifetimes.lifetime.mean()),
        "n_attractors": np.int64(clusters.n_clusters),
        "mean_overlap": np.float64(mean_overlap.mean()),
        "final_overlap": np.float64(m[-1].mean()),
    }


def run_synthetic_point(config: Mapping[str, Any], out_path: os.PathLike) -> None:
    """The ``"synthetic"`` point: Hebbian recall, summary written to ``out_path``."""
    from spinsa import io

    cfg = SyntheticConfig.from_dict(config)
    summary = synthetic_summary(cfg)
    if cfg.sleep:
        time.sleep(cfg.sleep)
    io.write_file(
        out_path, {"summary": summary}, kind="scan-point", config=cfg, seeds={"seed": cfg.seed}
    )


def estimate_synthetic(config: Mapping[str, Any]) -> PointCost:
    """Rough memory and single-core time of a synthetic point.

    Memory: the recorded states (steps + 1)·P·N·d in float32 plus a float64 copy for the
    analysis, and J (N²d²). Time: 4·P·N²·d² flops per step at about 2 GFLOP/s, plus
    about 50 µs of Python per step and 20 ms for the analysis and the file.
    """
    cfg = SyntheticConfig.from_dict(config)
    P, N, d = cfg.patterns.n_patterns, cfg.patterns.n_tokens, cfg.patterns.d
    T = cfg.dynamics.steps + 1
    memory = T * P * N * d * (4 + 8 + 8) + N * N * d * d * 4 + 2**20
    flops = 4.0 * P * N * N * d * d * cfg.dynamics.steps
    seconds = flops / 2e9 + 5e-5 * cfg.dynamics.steps + 0.02 + cfg.sleep
    return PointCost(memory=float(memory), seconds=float(seconds))


# ------------------------------------------------------------------------- trivial


@dataclass(frozen=True)
class TrivialConfig(_Config):
    """Config of the ``"trivial"`` point kind: a seed, a size and an optional sleep.

    The point writes ``/summary/value`` (one normal number) and ``/summary/curve`` (``size``
    of them), drawn with ``seed``.
    """

    seed: int = 0
    size: int = 4
    sleep: float = 0.0

    def __post_init__(self):
        check_count(self.seed, "seed", 0)
        check_count(self.size, "size", 1)
        _check_real(self.sleep, "sleep", 0.0)


def run_trivial_point(config: Mapping[str, Any], out_path: os.PathLike) -> None:
    """The ``"trivial"`` point: two random draws (and a sleep), written to ``out_path``.

    The file's attributes also record the thread settings the point ran with
    (``numba_threads``, ``omp_num_threads``), to check the scan's thread limits.
    """
    import numba

    from spinsa import io

    cfg = TrivialConfig.from_dict(config)
    rng = np.random.default_rng(cfg.seed)
    summary = {"value": np.float64(rng.standard_normal()), "curve": rng.standard_normal(cfg.size)}
    if cfg.sleep:
        time.sleep(cfg.sleep)
    threads = {
        "numba_threads": numba.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", ""),
    }
    io.write_file(
        out_path,
        {"summary": summary},
        threads,
        kind="scan-point",
        config=cfg,
        seeds={"seed": cfg.seed},
    )


def estimate_trivial(config: Mapping[str, Any]) -> PointCost:
    """A trivial point: a few kB, a few ms plus its sleep."""
    cfg = TrivialConfig.from_dict(config)
    return PointCost(memory=float(2**16 + 8 * cfg.size), seconds=0.005 + cfg.sleep)
