"""Point kinds: what one point of a scan is, behind a table of names.

A :class:`PointKind` is a name (it enters every point's hash) and two functions:
``configure(base, overrides)`` gives a point's whole resolved config from the base as
written and the axes' ``dotted key -> value`` (``ValueError`` for an unknown key or a bad
value; the flattened keys of ``configure(base, {})`` are the valid axis names), and
``run(config, out_path)`` does the work and writes one spinsa file with
:func:`spinsa.io.write_file`. ``run`` travels to Dask workers: a module-level function.

A kind whose points share costly work (the ``"experiment"`` kind: the fit of J, the same
for every λ_eval, γ, norm and dynamics) names it with ``fit_config(config)``, the part of
a point's config that work depends on, and ``fit(fit_config, path)``, which does it; the
scan runs each distinct fit once, into its own content-addressed file, and the points call
``run(config, out_path, fit_path)``.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from spinsa._checks import check_choice, check_count, check_positive, check_real
from spinsa._config import config_from_dict, config_to_dict, flatten
from spinsa.io.schema import to_json
from spinsa.scan.equilibrium import EquilibriumConfig, run_equilibrium_point

__all__ = [
    "POINT_KINDS",
    "PointKind",
    "SyntheticConfig",
    "SyntheticFitConfig",
    "point_kind",
    "summarize_experiment",
]


@dataclass(frozen=True)
class PointKind:
    """How the points of a scan are configured and run (see the module docstring), and
    optionally ``summarize(path) -> dict`` of 0-d and 1-d arrays (curves over the times
    ``"t"``): what :func:`spinsa.scan.collect` takes from a file without ``/summary``;
    ``fit_config`` and ``fit``: the work that points share (both or neither); ``keys``:
    the valid axis names, where they are more than the stored config's keys."""

    name: str
    run: Callable[..., None]
    configure: Callable[[Mapping, Mapping], dict]
    summarize: Callable[[Path], dict] | None = None
    fit_config: Callable[[dict], dict] | None = None
    fit: Callable[[dict, Path], None] | None = None
    #: ``keys(base)``: every valid axis name, also the keys a stored config leaves out at
    #: their defaults; None: the flattened keys of ``configure(base, {})``.
    keys: Callable[[Mapping], Any] | None = None

    def __post_init__(self):
        if (self.fit_config is None) != (self.fit is None):
            raise ValueError(f"point kind {self.name!r}: give both fit_config and fit, or neither")

    def fit_key(self, config: dict) -> str | None:
        """The name of the file of a point's fit (the hash of its fit config), None without."""
        if self.fit_config is None:
            return None
        return point_key(f"{self.name}:fit", self.fit_config(config))


def point_key(kind: str, config: Mapping[str, Any]) -> str:
    """The name of a point's file: 16 hex digits of the sha256 of its kind and resolved config.

    Canonical JSON (keys sorted): two scans that share a point share its file, and any
    change of a parameter (or of a default) gives a new file.
    """
    return hashlib.sha256(to_json({"kind": kind, "config": config}).encode()).hexdigest()[:16]


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


def run_experiment_point(config: dict, out_path: os.PathLike, fit_path: os.PathLike) -> None:
    """The ``"experiment"`` point: the couplings of its fit file evaluated on both tasks
    (:func:`spinsa.experiments.pipeline.evaluate_fit`)."""
    from spinsa.experiments import ExperimentConfig
    from spinsa.experiments.pipeline import evaluate_fit

    evaluate_fit(ExperimentConfig.from_dict(config), fit_path, out_path)


def experiment_fit_config(config: dict) -> dict:
    """What an experiment point's fit depends on (:meth:`ExperimentConfig.training_config`)."""
    from spinsa.experiments import ExperimentConfig

    return ExperimentConfig.from_dict(config).training_config().to_dict()


def run_experiment_fit(fit_config: dict, out_path: os.PathLike) -> None:
    """Fit the couplings of an experiment point (:func:`spinsa.experiments.train`); a fit
    killed midway resumes from its checkpoint, ``KEY.ckpt.h5``, with the same result."""
    from spinsa.experiments import ExperimentConfig, train

    out_path = Path(out_path)
    checkpoint = out_path.with_name(out_path.stem + ".ckpt.h5")
    train(ExperimentConfig.from_dict(fit_config), out_path, checkpoint=checkpoint)


def configure_experiment(base: Mapping, overrides: Mapping[str, Any]) -> dict:
    """:meth:`ExperimentConfig.with_overrides`: a scanned ``fit.preset`` rebuilds the fit."""
    from spinsa.experiments import ExperimentConfig

    return ExperimentConfig.from_dict(dict(base)).with_overrides(overrides).to_dict()


def _mean_or_nan(values) -> float:
    values = np.asarray(values, dtype=np.float64)
    return float(np.nanmean(values)) if np.isfinite(values).any() else np.nan


def _task_quantities(task: str, arrays: dict) -> dict[str, Any]:
    """The quantities of one task that decide whether a transient memory exists (see
    :func:`summarize_experiment`)."""
    from spinsa.analysis.summary import significant_gain_lifetime, summarize_arrays

    s = summarize_arrays(task, arrays)
    times, mean, sem = arrays["times"], arrays["mean"]["all"], arrays["sem"]["all"]
    period = arrays.get("final_period")  # older files have neither
    out = {
        "t": times,
        "error": mean,
        "error_sem": sem,
        "best_t": np.int64(s["best_t"]),
        "best_error": s["best_error"],
        "best_sem": s["best_sem"],
        "error_T": s["error_T"],
        "final_mean_overlap": s["corr_T"],
        "final_nearest_overlap": _mean_or_nan(arrays.get("final_nearest_corr", np.nan)),
        "fixed_point_fraction": np.nan if period is None else np.mean(period == 1),
        "cycle_fraction": np.nan if period is None else np.mean(period == 2),
        "final_step": s["step_change_T"],
    }
    if not s["best_reference"]:
        return out
    ref = s["references"][s["best_reference"]]
    memory = bool(s["transient_memory"])
    out.update(
        reference_error=ref["error"],
        reference_sem=ref["sem"],
        ref_gain_z=ref["z"],
        transient_memory=np.int64(memory),
        lifetime=np.int64(0),
        t_enter=np.nan,
        t_leave=np.nan,
        lifetime_censored=np.int64(0),
    )
    if memory:
        first = 1 if task == "masked" else 0  # t = 0 of the masked task is the masked input
        life = significant_gain_lifetime(mean, sem, ref["error"], ref["sem"], times, first)
        out.update(
            lifetime=life.lifetime[0],
            t_enter=life.t_enter[0],
            t_leave=life.t_leave[0],
            lifetime_censored=np.int64(life.censored[0]),
        )
    return out


def summarize_experiment(path: os.PathLike) -> dict[str, Any]:
    """The phase-diagram quantities of an experiment point's file (or of any run file): per
    task, ``<task>.<name>`` (from :func:`spinsa.analysis.summary.summarize_arrays`), and the
    fit's; every one is listed in docs/scans.md, 'An experiment scan'."""
    from spinsa import io
    from spinsa.io.results import read_evaluation

    out: dict[str, Any] = {}
    attrs = io.read(path).attrs
    for task in ("masked", "denoise"):
        try:
            arrays = read_evaluation(path, task)[0]
        except KeyError:
            continue
        out.update({f"{task}.{k}": v for k, v in _task_quantities(task, arrays).items()})
        out["t"] = out.pop(f"{task}.t")
    for name in ("fit_loss", "fit_norm", "hebbian_cosine"):
        if name in attrs:
            out[name] = np.float64(attrs[name])
    return out


# --------------------------------------------------------------------------- synthetic


def _check_range(value, name: str, low: float, high: float) -> None:
    if not low <= check_real(value, name) <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")


@dataclass(frozen=True)
class PatternsConfig:
    """P random patterns of N unit spins in R^d, correlation c in [0, 1].

    ``alpha``, the load P/N, sets P = max(1, round(alpha N)) when given (it replaces
    ``n_patterns``, which then holds the P used): scan ``patterns.alpha`` for a capacity
    curve at fixed N."""

    n_patterns: int = 4
    n_tokens: int = 16
    d: int = 4
    correlation: float = 0.0
    alpha: float | None = None

    def __post_init__(self):
        check_count(self.n_patterns, "patterns.n_patterns", 1)
        check_count(self.n_tokens, "patterns.n_tokens", 2)
        check_count(self.d, "patterns.d", 1)
        _check_range(self.correlation, "patterns.correlation", 0.0, 1.0)
        if self.alpha is not None:
            alpha = check_positive(self.alpha, "patterns.alpha")
            object.__setattr__(self, "alpha", alpha)
            object.__setattr__(self, "n_patterns", max(1, round(alpha * self.n_tokens)))

    def unused_options(self) -> tuple[str, ...]:
        """``alpha`` unset is left out of the stored config (older points keep their keys)."""
        return ("alpha",) if self.alpha is None else ()


@dataclass(frozen=True)
class CorruptionConfig:
    """The starts: a fraction ``flip`` of the sites reversed, then Gaussian noise of std
    ``noise`` per spin component, then back on the sphere (:func:`spinsa.tasks.noisy_starts`)."""

    noise: float = 0.3
    flip: float = 0.0

    def __post_init__(self):
        _check_range(self.noise, "corruption.noise", 0.0, np.inf)
        _check_range(self.flip, "corruption.flip", 0.0, 1.0)

    def unused_options(self) -> tuple[str, ...]:
        return ("flip",) if self.flip == 0 else ()


@dataclass(frozen=True)
class SyntheticFitConfig:
    """The pseudo-likelihood fit of a synthetic point with ``couplings = "pl"``: full-batch
    L-BFGS (:func:`spinsa.fit_pseudolikelihood`) from the Hebbian couplings, at λ_train =
    ``lam`` and a fixed global norm |J| = ``norm`` (None: the Hebbian couplings' own, so
    that the two kinds of couplings differ in direction only)."""

    lam: float = 1.0
    norm: float | None = None
    max_iter: int = 100

    def __post_init__(self):
        check_positive(self.lam, "fit.lam")
        if self.norm is not None:
            check_positive(self.norm, "fit.norm")
        check_count(self.max_iter, "fit.max_iter", 1)


@dataclass(frozen=True)
class SyntheticDynamicsConfig:
    """The ``[dynamics]`` section of a synthetic point: the arguments of :func:`spinsa.run`
    and its number of steps (the asynchronous order's seed is the point's ``seed``)."""

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
    """Config of the ``"synthetic"`` point: recall of random patterns.

    P patterns ξ^μ of N unit spins in R^d (P = round(α N) with ``patterns.alpha``) are
    stored in couplings J: ``couplings = "hebbian"``, J_ij = (1/P) Σ_μ ξ^μ_i ξ^μ_j^T, or
    ``"pl"``, the pseudo-likelihood fit of the patterns (section ``fit``,
    :class:`SyntheticFitConfig`); every pattern, with a fraction ``corruption.flip`` of its
    sites reversed and Gaussian noise of std ``corruption.noise`` per component, back on the
    sphere (:func:`spinsa.tasks.noisy_starts`), is iterated for ``dynamics.steps`` steps.
    Its file holds under ``/summary``: ``t`` (T,); the mean over
    the patterns of the overlap m(t) = (1/N) Σ_i x_i(t)·ξ_i, ``overlap`` (T,), of the error
    (1/2N) Σ_i |x_i(t) − ξ_i|², ``error`` (T,), and of the energy, ``energy`` (T,);
    ``best_error`` and ``best_t``, the error's minimum over t ≥ 1 and where; ``lifetime``,
    the mean time the overlap stays above ``analysis.threshold``; ``n_attractors``, the
    distinct final states (mutual overlap ≥ ``analysis.q_min``); ``mean_overlap``, the
    overlap of the final states with the mean pattern; ``final_overlap`` = m(steps);
    ``initial_overlap`` = m(0); ``retrieved_fraction``, the fraction of the patterns whose
    final overlap is at least ``analysis.threshold`` (what a capacity curve shows:
    :func:`spinsa.analysis.critical_load`); with ``couplings = "pl"``, ``hebbian_cosine``,
    the cosine between the fitted and the Hebbian couplings.

    Attributes
    ----------
    patterns, corruption, dynamics, analysis, fit : sections
        Their dotted keys are the valid axis names (``dynamics.lam``, ``patterns.alpha``...).
    couplings : {"hebbian", "pl"}
        How the patterns are stored (a categorical axis: ``spinsa scan collect`` keeps
        it as a dimension). Hebbian points ignore the ``fit`` section, so one base serves
        both (a ``fit.*`` axis over Hebbian points only changes nothing and is refused).
    seed : int
        Seed of the patterns, the noise and the asynchronous site order.
    sleep : float
        Seconds of idle time added to the point (to test the scheduling).
    """

    patterns: PatternsConfig = field(default_factory=PatternsConfig)
    corruption: CorruptionConfig = field(default_factory=CorruptionConfig)
    dynamics: SyntheticDynamicsConfig = field(default_factory=SyntheticDynamicsConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    couplings: Literal["hebbian", "pl"] = "hebbian"
    fit: SyntheticFitConfig = field(default_factory=SyntheticFitConfig)
    seed: int = 0
    sleep: float = 0.0

    def __post_init__(self):
        check_choice(self.couplings, "couplings", ("hebbian", "pl"))
        check_count(self.seed, "seed", 0)
        _check_range(self.sleep, "sleep", 0.0, np.inf)
        if self.couplings == "hebbian":  # not fitted: [fit] is for the PL points of a scan
            object.__setattr__(self, "fit", SyntheticFitConfig())

    def unused_options(self) -> tuple[str, ...]:
        """Hebbian points leave ``couplings`` and ``fit`` out of their stored config, so
        that the points written before PL couplings existed keep their keys and files."""
        return ("couplings", "fit") if self.couplings == "hebbian" else ()


def synthetic_couplings(config: SyntheticConfig, xi: np.ndarray) -> tuple[np.ndarray, dict]:
    """The couplings of a synthetic point (``config.couplings``) and the summary entries of
    their fit (``hebbian_cosine`` for a PL fit, none for Hebbian couplings)."""
    from spinsa.analysis.hebbian import coupling_cosine
    from spinsa.couplings import hebbian_couplings
    from spinsa.fit import fit_pseudolikelihood

    J = hebbian_couplings(xi)
    if config.couplings == "hebbian":
        return J, {}
    f = config.fit
    res = fit_pseudolikelihood(
        xi, J0=J, backend="lbfgs", lam=f.lam, constraint="global", norm=f.norm,
        max_iter=f.max_iter, dtype=str(xi.dtype), check_memory=False,
    )  # fmt: skip
    Jf = res.J.astype(xi.dtype)
    return Jf, {"hebbian_cosine": np.float64(coupling_cosine(J, Jf))}


def synthetic_summary(config: SyntheticConfig) -> dict[str, np.ndarray]:
    """Run one synthetic point in memory: the arrays of its ``/summary`` (see
    :class:`SyntheticConfig`)."""
    from spinsa.analysis import cluster_states, mean_pattern, overlap_lifetimes, target_overlaps
    from spinsa.analysis.summary import best_time
    from spinsa.datasets import correlated_patterns
    from spinsa.model import run
    from spinsa.tasks import noisy_starts

    p, dyn = config.patterns, config.dynamics
    rng = np.random.default_rng(config.seed)
    xi = correlated_patterns(p.n_patterns, p.n_tokens, p.d, p.correlation, seed=rng)
    x0 = noisy_starts(xi, config.corruption.noise, config.corruption.flip, rng=rng)
    J, fitted = synthetic_couplings(config, xi)
    kwargs = dict(gamma=dyn.gamma, norm=dyn.norm, update=dyn.update, seed=config.seed)
    traj = run(x0, J, dyn.lam, dyn.steps, **kwargs)
    states, xi64 = traj.states.astype(np.float64), xi.astype(np.float64)
    m = target_overlaps(states, xi64)  # (T, P)
    error = (0.5 * ((states - xi64) ** 2).sum(-1).mean(-1)).mean(axis=1)  # (T,)
    best = best_time(error, min(1, dyn.steps))
    threshold = config.analysis.threshold
    lifetimes = overlap_lifetimes(m, traj.times, threshold).lifetime
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
        "initial_overlap": np.float64(m[0].mean()),
        "retrieved_fraction": np.float64(np.mean(m[-1] >= threshold)),
        **fitted,
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


def synthetic_keys(base: Mapping) -> list[str]:
    """Every axis name of a synthetic scan: the keys of :class:`SyntheticConfig` with all its
    sections, those left out of a stored config at their defaults included (``couplings``,
    ``fit.*``, ``patterns.alpha``, ``corruption.flip``)."""
    config = config_from_dict(SyntheticConfig, dict(base))
    return list(flatten(dataclasses.asdict(config)))


def configure_equilibrium(base: Mapping, overrides: Mapping[str, Any]) -> dict:
    """The overrides set on the base, the defaults filled in, checked
    (:class:`spinsa.scan.equilibrium.EquilibriumConfig`)."""
    return config_to_dict(config_from_dict(EquilibriumConfig, set_dotted(base, overrides)))


# --------------------------------------------------------------------------- the table

POINT_KINDS: dict[str, PointKind] = {
    "experiment": PointKind(
        "experiment",
        run_experiment_point,
        configure_experiment,
        summarize_experiment,
        fit_config=experiment_fit_config,
        fit=run_experiment_fit,
    ),
    "synthetic": PointKind(
        "synthetic", run_synthetic_point, configure_synthetic, keys=synthetic_keys
    ),
    "equilibrium": PointKind("equilibrium", run_equilibrium_point, configure_equilibrium),
}


def point_kind(name: str | PointKind) -> PointKind:
    """The point kind called ``name``.

    Parameters
    ----------
    name : str or PointKind
        A name of :data:`POINT_KINDS`; ``"package.module:function"``, a function
        ``function(config: dict, out_path)`` whose config is the base as written (the axes
        must name keys of the base); or a kind, returned as it is.

    Returns
    -------
    PointKind
        The registered kind, one built around the imported function (its config keys set
        by dotted name), or ``name`` itself.

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
