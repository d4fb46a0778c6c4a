"""Point kinds: what one point of a scan is, behind a table of names.

A :class:`PointKind` is a name (it enters every point's hash) and two functions:
``configure(base, overrides)`` gives a point's whole resolved config from the base as
written and the axes' ``dotted key -> value`` (``ValueError`` for an unknown key or a bad
value; the flattened keys of ``configure(base, {})`` are the valid axis names), and
``run(config, out_path)`` does the work and writes one spinsa file with
:func:`spinsa.io.write_file`. ``run`` travels to Dask workers: a module-level function.
"""

from __future__ import annotations

import copy
import importlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from spinsa._checks import check_choice, check_count, check_positive, check_real
from spinsa._config import config_from_dict, config_to_dict

__all__ = ["POINT_KINDS", "PointKind", "SyntheticConfig", "point_kind", "summarize_experiment"]


@dataclass(frozen=True)
class PointKind:
    """How the points of a scan are configured and run (see the module docstring), and
    optionally ``summarize(path) -> dict`` of 0-d and 1-d arrays (curves over the times
    ``"t"``): what :func:`spinsa.scan.collect` takes from a file without ``/summary``."""

    name: str
    run: Callable[[dict, Path], None]
    configure: Callable[[Mapping, Mapping], dict]
    summarize: Callable[[Path], dict] | None = None


def set_dotted(base: Mapping, overrides: Mapping[str, Any]) -> dict:
    """A deep copy of ``base`` with ``overrides`` (``{"a.b": v}`` sets ``base["a"]["b"]``)."""
    config = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        *sections, leaf = key.split(".")
        node = config
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = value
    return config


# --------------------------------------------------------------------------- experiment


def run_experiment_point(config: dict, out_path: os.PathLike) -> None:
    """The ``"experiment"`` point: :func:`spinsa.experiments.run_experiment`."""
    from spinsa.experiments import ExperimentConfig, run_experiment

    run_experiment(ExperimentConfig.from_dict(config), out_path)


def configure_experiment(base: Mapping, overrides: Mapping[str, Any]) -> dict:
    """:meth:`ExperimentConfig.with_overrides`: a scanned ``fit.preset`` rebuilds the fit."""
    from spinsa.experiments import ExperimentConfig

    return ExperimentConfig.from_dict(dict(base)).with_overrides(overrides).to_dict()


def summarize_experiment(path: os.PathLike) -> dict[str, Any]:
    """The phase-diagram quantities of an experiment's run file.

    Per task (``masked``, ``denoise``), with e(t) the mean error over the test images
    (masked pixels for the masked task, all pixels for denoising), of shape (T,):
    ``<task>.error`` = e(t) over the times ``t``; ``<task>.best_error`` and
    ``<task>.best_t``, its minimum over t ≥ 1 and where; ``<task>.lifetime``, how long e(t)
    stays below e(0) around its minimum (:func:`spinsa.analysis.error_lifetimes`);
    ``<task>.mean_image_corr`` (T,), the correlation of the decoded states with the mean
    training image, and ``<task>.mean_overlap``, its final value;
    ``<task>.final_coherence``, the mean correlation of the final states with their mean.
    And the fit's final loss, ``fit_loss``.
    """
    from spinsa import io
    from spinsa.analysis import error_lifetimes
    from spinsa.analysis.summary import best_time

    out: dict[str, Any] = {}
    with io.open_file(path) as f:
        for task in ("masked", "denoise"):
            if f"evaluation/{task}" not in f:
                continue
            g = f[f"evaluation/{task}"]
            times = g["times"][()]
            curve = g["mean/masked" if task == "masked" else "mean/all"][()].astype(np.float64)
            best = best_time(curve, 1 if curve.size > 1 else 0)
            corr = g["mean_image_corr_mean"][()].astype(np.float64)
            out["t"] = times
            out[f"{task}.error"] = curve
            out[f"{task}.best_error"] = curve[best]
            out[f"{task}.best_t"] = times[best]
            if np.isfinite(curve).all():
                out[f"{task}.lifetime"] = error_lifetimes(curve[:, None], times).lifetime[0]
            out[f"{task}.mean_image_corr"] = corr
            out[f"{task}.mean_overlap"] = corr[-1]
            out[f"{task}.final_coherence"] = np.nanmean(g["final_coherence"][()])
        if "fit_loss" in f.attrs:
            out["fit_loss"] = np.float64(f.attrs["fit_loss"])
    return out


# --------------------------------------------------------------------------- synthetic


def _check_range(value, name: str, low: float, high: float) -> None:
    if not low <= check_real(value, name) <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")


@dataclass(frozen=True)
class PatternsConfig:
    """P random patterns of N unit spins in R^d, correlation c in [0, 1]."""

    n_patterns: int = 4
    n_tokens: int = 16
    d: int = 4
    correlation: float = 0.0

    def __post_init__(self):
        check_count(self.n_patterns, "patterns.n_patterns", 1)
        check_count(self.n_tokens, "patterns.n_tokens", 2)
        check_count(self.d, "patterns.d", 1)
        _check_range(self.correlation, "patterns.correlation", 0.0, 1.0)


@dataclass(frozen=True)
class CorruptionConfig:
    """Gaussian noise of std ``noise`` per spin component, then back on the sphere."""

    noise: float = 0.3

    def __post_init__(self):
        _check_range(self.noise, "corruption.noise", 0.0, np.inf)


@dataclass(frozen=True)
class DynamicsConfig:
    """Arguments of :func:`spinsa.run`."""

    lam: float = 1.0
    gamma: float = 1.0
    steps: int = 20
    norm: Literal["sphere", "layernorm", "none"] = "sphere"
    update: Literal["sync", "async"] = "sync"

    def __post_init__(self):
        check_positive(self.lam, "dynamics.lam")
        check_real(self.gamma, "dynamics.gamma")
        check_count(self.steps, "dynamics.steps", 0)
        check_choice(self.norm, "dynamics.norm", ("sphere", "layernorm", "none"))
        check_choice(self.update, "dynamics.update", ("sync", "async"))


@dataclass(frozen=True)
class AnalysisConfig:
    """The overlap above which a memory is alive, and the one that merges final states."""

    threshold: float = 0.9
    q_min: float = 0.99

    def __post_init__(self):
        _check_range(self.threshold, "analysis.threshold", -1.0, 1.0)
        _check_range(self.q_min, "analysis.q_min", -1.0, 1.0)


@dataclass(frozen=True)
class SyntheticConfig:
    """Config of the ``"synthetic"`` point: Hebbian recall of random patterns.

    P patterns ξ^μ of N unit spins in R^d are stored in the Hebbian couplings
    J_ij = (1/P) Σ_μ ξ^μ_i ξ^μ_j^T; every pattern, corrupted by Gaussian noise of std
    ``corruption.noise`` per component and put back on the sphere, is iterated for
    ``dynamics.steps`` steps. Its file holds under ``/summary``: ``t`` (T,); the mean over
    the patterns of the overlap m(t) = (1/N) Σ_i x_i(t)·ξ_i, ``overlap`` (T,), of the error
    (1/2N) Σ_i |x_i(t) − ξ_i|², ``error`` (T,), and of the energy, ``energy`` (T,);
    ``best_error`` and ``best_t``, the error's minimum over t ≥ 1 and where; ``lifetime``,
    the mean time the overlap stays above ``analysis.threshold``; ``n_attractors``, the
    distinct final states (mutual overlap ≥ ``analysis.q_min``); ``mean_overlap``, the
    overlap of the final states with the mean pattern; ``final_overlap`` = m(steps).

    Attributes
    ----------
    patterns, corruption, dynamics, analysis : sections
        Their dotted keys are the valid axis names (``dynamics.lam``...).
    seed : int
        Seed of the patterns, the noise and the asynchronous site order.
    sleep : float
        Seconds of idle time added to the point (to test the scheduling).
    """

    patterns: PatternsConfig = field(default_factory=PatternsConfig)
    corruption: CorruptionConfig = field(default_factory=CorruptionConfig)
    dynamics: DynamicsConfig = field(default_factory=DynamicsConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    seed: int = 0
    sleep: float = 0.0

    def __post_init__(self):
        check_count(self.seed, "seed", 0)
        _check_range(self.sleep, "sleep", 0.0, np.inf)


def synthetic_summary(config: SyntheticConfig) -> dict[str, np.ndarray]:
    """Run one synthetic point in memory: the arrays of its ``/summary`` (see
    :class:`SyntheticConfig`)."""
    from spinsa.analysis import cluster_states, mean_pattern, overlap_lifetimes, target_overlaps
    from spinsa.analysis.summary import best_time
    from spinsa.couplings import hebbian_couplings
    from spinsa.datasets import correlated_patterns
    from spinsa.model import run

    p, dyn = config.patterns, config.dynamics
    rng = np.random.default_rng(config.seed)
    xi = correlated_patterns(p.n_patterns, p.n_tokens, p.d, p.correlation, seed=rng)
    x0 = xi + config.corruption.noise * rng.standard_normal(xi.shape).astype(xi.dtype)
    norms = np.linalg.norm(x0, axis=-1, keepdims=True)
    x0 = np.where(norms > 0, x0 / np.where(norms > 0, norms, 1), xi).astype(xi.dtype)
    J = hebbian_couplings(xi)
    kwargs = dict(gamma=dyn.gamma, norm=dyn.norm, update=dyn.update, seed=config.seed)
    traj = run(x0, J, dyn.lam, dyn.steps, **kwargs)
    states, xi64 = traj.states.astype(np.float64), xi.astype(np.float64)
    m = target_overlaps(states, xi64)  # (T, P)
    error = (0.5 * ((states - xi64) ** 2).sum(-1).mean(-1)).mean(axis=1)  # (T,)
    best = best_time(error, min(1, dyn.steps))
    lifetimes = overlap_lifetimes(m, traj.times, config.analysis.threshold).lifetime
    final_mean = np.einsum("pna,na->p", states[-1], mean_pattern(xi64)) / p.n_tokens
    return {
        "t": np.asarray(traj.times, dtype=np.int64),
        "overlap": m.mean(axis=1),
        "error": error,
        "energy": traj.energies.mean(axis=1),
        "best_error": np.float64(error[best]),
        "best_t": np.int64(traj.times[best]),
        "lifetime": np.float64(lifetimes.mean()),
        "n_attractors": np.int64(cluster_states(states[-1], config.analysis.q_min).n_clusters),
        "mean_overlap": np.float64(final_mean.mean()),
        "final_overlap": np.float64(m[-1].mean()),
    }


def run_synthetic_point(config: Mapping[str, Any], out_path: os.PathLike) -> None:
    """The ``"synthetic"`` point: its summary written to ``out_path``."""
    from spinsa import io

    cfg = config_from_dict(SyntheticConfig, config)
    summary = synthetic_summary(cfg)
    time.sleep(cfg.sleep)
    io.write_file(
        out_path, {"summary": summary}, kind="scan-point", config=cfg, seeds={"seed": cfg.seed}
    )


def configure_synthetic(base: Mapping, overrides: Mapping[str, Any]) -> dict:
    """The overrides set on the base, the defaults filled in, checked."""
    return config_to_dict(config_from_dict(SyntheticConfig, set_dotted(base, overrides)))


# --------------------------------------------------------------------------- the table

POINT_KINDS: dict[str, PointKind] = {
    "experiment": PointKind(
        "experiment", run_experiment_point, configure_experiment, summarize_experiment
    ),
    "synthetic": PointKind("synthetic", run_synthetic_point, configure_synthetic),
}


def point_kind(name: str | PointKind) -> PointKind:
    """The point kind called ``name``.

    Parameters
    ----------
    name : str or PointKind
        A name of :data:`POINT_KINDS`; ``"package.module:function"``, a function
        ``function(config: dict, out_path)`` whose config is the base as written (the axes
        must name keys of the base); or a kind, returned as it is.

    Raises
    ------
    ValueError
        An unknown name (the message lists the known ones), or a ``module:function`` that
        cannot be imported.
    """
    if isinstance(name, PointKind):
        return name
    if name in POINT_KINDS:
        return POINT_KINDS[name]
    module_name, sep, attr = str(name).partition(":")
    if not sep:
        raise ValueError(
            f"unknown point kind {name!r}; known: {', '.join(POINT_KINDS)}, or "
            "'package.module:function' for a function of your own"
        )
    try:
        function = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"point kind {name!r} cannot be imported: {err}") from None
    return PointKind(name, function, set_dotted)
