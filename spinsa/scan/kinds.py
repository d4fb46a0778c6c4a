"""Point kinds: what one point of a scan is, behind a table of names.

A point kind couples a config schema with the function that runs one point:

- ``resolve(config) -> dict``: fills in the defaults and validates (``ValueError`` for an
  unknown key or a bad value); its flattened keys are the valid axis names;
- ``run(config, out_path)``: does the work and writes *one* spinsa HDF5 file at
  ``out_path`` through :func:`spinsa.io.write_file` (atomic: a temporary name, then a rename);
- ``estimate(config) -> PointCost`` (optional): memory and time, for ``spinsa scan plan``.

Kinds:

``"experiment"`` (default)
    :func:`spinsa.experiments.run_experiment`: fit → evaluate (masked and denoising tasks),
    config :class:`spinsa.experiments.ExperimentConfig`; the axes are applied with its
    ``with_overrides``, and :func:`summarize_experiment` turns a run file into the
    phase-diagram quantities.
``"synthetic"``
    Hebbian recall of random patterns (:mod:`spinsa.scan.toy`): seconds per point, no data set.
``"trivial"``
    Writes a tiny file: measures the scan machinery's own overhead.
``"package.module:function"``
    Any function ``function(config: dict, out_path: Path) -> None``, or a :class:`PointKind`
    object. A plain function's config is free-form: the axes must name keys of the base.
"""

from __future__ import annotations

import copy
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "POINT_KINDS",
    "PointCost",
    "PointKind",
    "estimate_experiment",
    "point_kind",
    "run_experiment_point",
    "summarize_experiment",
]


@dataclass(frozen=True)
class PointCost:
    """Estimated resources of one point.

    Attributes
    ----------
    memory : float or None
        Peak bytes of memory (None: unknown).
    seconds : float or None
        Wall time on one core (None: unknown); a point with k threads takes about
        ``seconds / k`` where its work is parallel.
    """

    memory: float | None = None
    seconds: float | None = None

    def __post_init__(self):
        for name in ("memory", "seconds"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be >= 0 or None, got {value!r}")


@dataclass(frozen=True)
class PointKind:
    """How the points of a scan are configured and run (see the module docstring).

    Attributes
    ----------
    name : str
        Enters every point's hash, so two kinds never share a file.
    run : callable
        ``run(config: dict, out_path: Path) -> None``; must be picklable (a module-level
        function) to travel to Dask workers.
    resolve : callable
        ``resolve(config: Mapping) -> dict``, the whole config with defaults, validated.
    estimate : callable or None
        ``estimate(config: Mapping) -> PointCost``.
    apply : callable or None
        ``apply(base: Mapping, overrides: dict) -> dict``: the resolved config of a point,
        from the base as written and the axes' ``dotted key -> value``. Default: the values
        are written into the base, which is then resolved.
    summarize : callable or None
        ``summarize(path) -> dict``: the scalars (0-d) and curves (1-d, over the times in
        ``"t"``) that :func:`spinsa.scan.collect` gathers from a point file without a
        ``/summary`` group.
    """

    name: str
    run: Callable[[dict, Path], None]
    resolve: Callable[[Mapping], dict]
    estimate: Callable[[Mapping], PointCost] | None = None
    apply: Callable[[Mapping, dict], dict] | None = None
    summarize: Callable[[Path], dict] | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        for field in ("run", "resolve"):
            if not callable(getattr(self, field)):
                raise ValueError(f"{field} must be callable, got {getattr(self, field)!r}")
        for field in ("estimate", "apply", "summarize"):
            value = getattr(self, field)
            if value is not None and not callable(value):
                raise ValueError(f"{field} must be callable or None, got {value!r}")

    def point_config(self, base: Mapping, overrides: Mapping[str, Any]) -> dict:
        """The resolved config of the point that sets ``overrides`` on ``base``."""
        if self.apply is not None:
            return self.apply(base, dict(overrides))
        config = copy.deepcopy(dict(base))
        for key, value in overrides.items():
            _set_dotted(config, key, value)
        return self.resolve(config)

    def cost(self, config: Mapping) -> PointCost:
        """:attr:`estimate` of a resolved config; unknown (``PointCost()``) without one."""
        if self.estimate is None:
            return PointCost()
        cost = self.estimate(config)
        if not isinstance(cost, PointCost):
            memory, seconds = cost
            cost = PointCost(memory, seconds)
        return cost


# --------------------------------------------------------------------------- experiment


def run_experiment_point(config: dict, out_path: os.PathLike) -> None:
    """The ``"experiment"`` kind's point: :func:`spinsa.experiments.run_experiment`."""
    from spinsa.experiments import ExperimentConfig, run_experiment

    run_experiment(ExperimentConfig.from_dict(config), out_path)


def _resolve_experiment(config: Mapping) -> dict:
    from spinsa.experiments import ExperimentConfig

    return ExperimentConfig.from_dict(dict(config)).to_dict()


def _apply_experiment(base: Mapping, overrides: dict) -> dict:
    """:meth:`ExperimentConfig.with_overrides`: a scanned ``fit.preset`` rebuilds the fit."""
    from spinsa.experiments import ExperimentConfig

    return ExperimentConfig.from_dict(dict(base)).with_overrides(overrides).to_dict()


def _attractor_summary(name: str, group) -> dict[str, Any]:
    import numpy as np

    prefix = "" if name == "attractors" else f"{name}."
    out: dict[str, Any] = {}
    if "basin_size" in group:
        out[f"{prefix}n_attractors"] = np.int64(group["basin_size"].shape[0])
    if "overlap_mean" in group and "basin_fraction" in group:
        weights = group["basin_fraction"][()]
        out[f"{prefix}attractor_mean_overlap"] = np.float64(
            np.sum(weights * group["overlap_mean"][()]) / max(np.sum(weights), 1e-300)
        )
    return out


def summarize_experiment(path: os.PathLike) -> dict[str, Any]:
    """The phase-diagram quantities of an experiment's run file.

    Per task (``masked``, ``denoise``) under ``/evaluation/<task>``, with ``e(t)`` the mean
    error over the test images (masked pixels for the masked task, all pixels for
    denoising):

    - ``<task>.error``: the curve e(t), and ``t``: its times;
    - ``<task>.best_error``, ``<task>.best_t``: its minimum over t ≥ 1 and where;
    - ``<task>.lifetime``: how long e(t) stays below e(0) around its minimum
      (:func:`spinsa.analysis.error_lifetimes`);
    - ``<task>.mean_overlap``: correlation of the final decoded states with the mean
      training image (the "average digit"), and ``<task>.mean_image_corr`` over time;
    - ``<task>.final_coherence``: mean correlation of the final states with their mean.

    From saved analyses (``/analysis/<name>``, :func:`spinsa.analysis.save_analysis`): the
    attractor count ``n_attractors`` and the basin-weighted ``attractor_mean_overlap`` of an
    :class:`~spinsa.analysis.AttractorReport`, and the mean ``<name>.lifetime`` of a
    :class:`~spinsa.analysis.Lifetimes`. And the fit's final loss, ``fit_loss``.
    """
    import h5py
    import numpy as np

    from spinsa import io
    from spinsa.analysis import error_lifetimes

    out: dict[str, Any] = {}
    with io.open_file(path) as f:
        evaluation = f.get("evaluation")
        for task in evaluation if isinstance(evaluation, h5py.Group) else ():
            g = evaluation[task]
            if "times" not in g or "mean" not in g:
                continue
            times = g["times"][()]
            which = "masked" if task == "masked" and "masked" in g["mean"] else "all"
            curve = np.asarray(g["mean"][which][()], dtype=np.float64)
            out["t"] = times
            out[f"{task}.error"] = curve
            first = 1 if curve.size > 1 else 0
            if np.isfinite(curve[first:]).any():
                best = first + int(np.nanargmin(curve[first:]))
                out[f"{task}.best_error"] = np.float64(curve[best])
                out[f"{task}.best_t"] = np.int64(times[best])
                if np.isfinite(curve).all():
                    life = error_lifetimes(curve[:, None], times)
                    out[f"{task}.lifetime"] = np.float64(life.lifetime[0])
            if "mean_image_corr_mean" in g:
                corr = np.asarray(g["mean_image_corr_mean"][()], dtype=np.float64)
                out[f"{task}.mean_image_corr"] = corr
                out[f"{task}.mean_overlap"] = np.float64(corr[-1])
            if "final_coherence" in g:
                out[f"{task}.final_coherence"] = np.float64(np.nanmean(g["final_coherence"][()]))
        analyses = f.get("analysis")
        if isinstance(analyses, h5py.Group):
            found: list[tuple[str, h5py.Group]] = []
            analyses.visititems(
                lambda n, o: (
                    found.append((n, o))
                    if isinstance(o, h5py.Group) and "result_type" in o.attrs
                    else None
                )
            )
            for name, group in found:
                kind = io.schema.decode_attr(group.attrs["result_type"])
                if kind == "AttractorReport":
                    out.update(_attractor_summary(name.replace("/", "."), group))
                elif kind == "Lifetimes" and "lifetime" in group:
                    key = f"{name.replace('/', '.')}.lifetime"
                    out[key] = np.float64(np.mean(group["lifetime"][()]))
        if "fit_loss" in f.attrs:
            loss = io.schema.decode_attr(f.attrs["fit_loss"])
            if isinstance(loss, (int, float)):
                out["fit_loss"] = np.float64(loss)
    return out


def _experiment_kind() -> PointKind:
    try:
        experiments = importlib.import_module("spinsa.experiments")
        experiments.ExperimentConfig  # noqa: B018 - fail here if it is missing
        experiments.run_experiment  # noqa: B018
    except (ImportError, AttributeError) as err:
        raise ValueError(
            "point kind 'experiment' needs spinsa.experiments (ExperimentConfig, "
            f"run_experiment), which cannot be imported here ({err}). Use point = "
            '"synthetic" or "package.module:function" in [scan]'
        ) from None
    estimate = getattr(experiments, "estimate_cost", None)
    return PointKind(
        name="experiment",
        run=run_experiment_point,
        resolve=_resolve_experiment,
        estimate=_wrap_estimate(estimate) if estimate is not None else estimate_experiment,
        apply=_apply_experiment,
        summarize=summarize_experiment,
    )


# Seconds of one core per unit of P·N²·d² work, measured with the fused numba kernels on a
# 2-core AVX-512 machine (objective and gradient: 1.2 s at P = 10,000, N = 196, d = 8 on two
# cores; one dynamics step: 65 ms at P = 1,000), rounded up.
OBJECTIVE_SECONDS_PER_UNIT = 1.0e-10
STEP_SECONDS_PER_UNIT = 6.0e-11
TORCH_SLOWDOWN = 3.0  # the torch objective on a CPU against the numba one


def estimate_experiment(config: Mapping) -> PointCost:
    """Rough memory and single-core time of an experiment (fit, two tasks, analyses).

    Memory: :func:`spinsa.fit.estimate_memory` of the fit, plus a few copies of the test
    spins and 128 MiB for the interpreter. Time: the L-BFGS iterations (or the torch
    epochs, about three times slower on a CPU) at one objective evaluation each, plus the
    two tasks' dynamics on the test images, plus Python's share (1 ms per optimiser step,
    0.2 ms per dynamics step, 1 s for data, analyses and files). Unknown (``PointCost()``)
    when the config cannot be read. Within a factor of a few: ``spinsa scan plan --out``
    shows the measured times once some points have run.
    """
    try:
        from spinsa.experiments import ExperimentConfig
        from spinsa.fit import estimate_memory

        cfg = ExperimentConfig.from_dict(dict(config))
        emb = cfg.make_embedding()
        n_tokens, d = int(emb.n_tokens), int(emb.d)
        n_train = cfg.data.n_train_images or 60_000
        n_test, steps = cfg.data.n_test, cfg.dynamics.steps
        fit = cfg.fit
        memory = estimate_memory(n_train, n_tokens, d, config=fit).total
        memory += 3 * n_test * n_tokens * d * 4 * 2 + 2**27  # spins, errors, the interpreter
        unit = n_tokens * n_tokens * d * d
        if fit.backend == "lbfgs":
            iterations = fit.max_iter
            fit_seconds = iterations * n_train * unit * OBJECTIVE_SECONDS_PER_UNIT
        else:
            iterations = fit.epochs * -(-n_train // fit.batch_size)
            fit_seconds = fit.epochs * n_train * unit * OBJECTIVE_SECONDS_PER_UNIT * TORCH_SLOWDOWN
        dyn_seconds = 2 * steps * n_test * unit * STEP_SECONDS_PER_UNIT
        # Python's share: a millisecond per optimiser step, 0.1 ms per dynamics step, and
        # a second for the data, the analyses and the files
        fixed = 1e-3 * iterations + 2e-4 * steps + 1.0
        return PointCost(memory=float(memory), seconds=float(fit_seconds + dyn_seconds + fixed))
    except Exception:  # an estimate must never stop a plan
        return PointCost()


def _wrap_estimate(fn: Callable) -> Callable[[Mapping], PointCost]:
    def estimate(config: Mapping) -> PointCost:
        from spinsa.experiments import ExperimentConfig

        cost = fn(ExperimentConfig.from_dict(dict(config)))
        if isinstance(cost, PointCost):
            return cost
        if isinstance(cost, Mapping):
            return PointCost(cost.get("memory"), cost.get("seconds"))
        memory, seconds = cost
        return PointCost(memory, seconds)

    return estimate


# --------------------------------------------------------------------------- toy kinds


def _synthetic_kind() -> PointKind:
    from spinsa.scan import toy

    return PointKind(
        name="synthetic",
        run=toy.run_synthetic_point,
        resolve=toy.SyntheticConfig.resolve,
        estimate=toy.estimate_synthetic,
    )


def _trivial_kind() -> PointKind:
    from spinsa.scan import toy

    return PointKind(
        name="trivial",
        run=toy.run_trivial_point,
        resolve=toy.TrivialConfig.resolve,
        estimate=toy.estimate_trivial,
    )


POINT_KINDS: dict[str, Callable[[], PointKind]] = {
    "experiment": _experiment_kind,
    "synthetic": _synthetic_kind,
    "trivial": _trivial_kind,
}


# --------------------------------------------------------------------------- user functions


def _copy_config(config: Mapping) -> dict:
    return copy.deepcopy(dict(config))


def _set_dotted(config: dict, key: str, value: Any) -> None:
    """``config["a"]["b"] = value`` for ``key = "a.b"`` (missing tables are created)."""
    parts = key.split(".")
    node = config
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def point_kind(name: str | PointKind) -> PointKind:
    """The point kind called ``name`` (see the module docstring).

    Parameters
    ----------
    name : str or PointKind
        A name of :data:`POINT_KINDS`, ``"package.module:function"``, or a kind (returned
        as it is).

    Raises
    ------
    ValueError
        An unknown name (the message lists the known ones), or a ``module:function`` that
        cannot be imported.
    """
    if isinstance(name, PointKind):
        return name
    if not isinstance(name, str) or not name:
        raise ValueError(f"point kind must be a non-empty string, got {name!r}")
    if name in POINT_KINDS:
        return POINT_KINDS[name]()
    if ":" not in name:
        raise ValueError(
            f"unknown point kind {name!r}; known: {', '.join(POINT_KINDS)}, or "
            "'package.module:function' for a function of your own"
        )
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"point kind {name!r}: cannot import {module_name!r} ({err})") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"point kind {name!r}: {module_name!r} has no {attr!r}") from None
    if isinstance(obj, PointKind):
        return obj
    if not callable(obj):
        raise ValueError(f"point kind {name!r} is not callable")
    return PointKind(name=name, run=obj, resolve=_copy_config)
