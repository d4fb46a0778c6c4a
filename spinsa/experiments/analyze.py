"""Every analysis of a run file, stored in the file: what ``spinsa analyze RUN.h5`` does.

:func:`analyze_run` opens a run file (written by :func:`spinsa.experiments.train` or
:func:`spinsa.experiments.run_experiment`), reads its couplings J and its config, rebuilds
the images the config names (MNIST, Fashion-MNIST or synthetic digits, through
:func:`spinsa.experiments.load_images` and the config's :class:`spinsa.PatchEmbedding`), runs
the analyses of :mod:`spinsa.analysis` with the config's dynamics, and writes each result
under ``/analysis/<name>/...`` of the same file::

    from spinsa.experiments import analyze_run
    analyze_run("run.h5")                          # every analysis, default sizes
    analyze_run("run.h5", only=["hebbian"], n_test=1000, steps=100, overwrite=True)

The analyses (the table :data:`ANALYSES`; ``spinsa analyze --only NAME``):

``overlaps``
    Trajectories from clean test images and from training images. ``test``, ``train``
    (:class:`~spinsa.analysis.OverlapTrace`): overlap with the start image and with the
    nearest training pattern at every t; ``mean``: overlap of the test trajectories with the
    mean training pattern (projected on the sphere token by token).
``lifetimes``
    Masked (``tasks.mask_fraction`` of the tokens) and noisy (``tasks.noise_variance``)
    test images. ``masked_error``, ``denoise_error`` (:class:`~spinsa.analysis.Lifetimes`):
    how long the pixel error stays below that of the corrupted input; ``masked_overlap``,
    ``denoise_overlap``: how long the overlap with the clean image stays above
    ``threshold``; ``table_error``, ``table_overlap``
    (:class:`~spinsa.analysis.LifetimeTable`): one row per task (attribute ``tasks``).
``attractors``
    ``report`` (:class:`~spinsa.analysis.AttractorReport`): attractors reached from clean
    test images, masked ones, noisy ones and uniformly random spins (the groups ``test``,
    ``masked``, ``noisy``, ``random``), with their basin fractions; ``images``
    (:class:`DecodedImages`): the attractors decoded into pixels.
``hebbian``
    The couplings against the norm-matched Hebbian couplings of the training set.
    ``comparison`` (:class:`~spinsa.analysis.HebbianComparison`), ``distance`` and
    ``distance_hebbian`` (:class:`~spinsa.analysis.StrengthDistance`, |J_ij| against the
    distance between patch centres in pixels), ``maps`` (:class:`StrengthMaps`, |J_ij| over
    the patch grid), ``spectrum`` and ``spectrum_hebbian``
    (:class:`~spinsa.analysis.CouplingSpectrum`), and ``errors_masked``,
    ``errors_denoise`` (:class:`ErrorCurves`): the task errors of the fitted and of the
    Hebbian couplings from the same corrupted images.
``patches``
    Variance of the pixels of each masked patch (D'Amico & Negri 2024, Fig. 2) in the
    clean images (``clean``) and in the predictions at t = 1 (``first``), at the t of the
    smallest mean error over t >= 1 (``best``) and at t = T (``last``)
    (:class:`~spinsa.analysis.PatchVariances`); ``histograms``
    (:class:`~spinsa.analysis.PatchVarianceHistograms`) of the four.

The group ``/analysis/<name>`` holds the settings of the run that wrote it as attributes
(:class:`AnalysisSettings`, plus ``lam``, ``dynamics``...), and every result has the
parameters that concern it as attributes of its own group.

Random numbers. The masked and noisy test images are the run's task inputs
(:meth:`spinsa.experiments.config.TasksSection.inputs`, the run's ``tasks.seed``): test image
k gets the same mask and the same noise here as in ``spinsa evaluate``, and the same in
``lifetimes``, ``hebbian``, ``patches`` and ``attractors``. The training starts and the
random starts come from ``np.random.default_rng([seed, k])`` with ``k`` from
:data:`STREAMS`. The test images are the config's seeded test subset of size ``n_test``
(``data.n_test = n_test``).

Dynamics. Trajectories follow the run's dynamics (``dynamics.preset``: eq. 1 of the design
or the published notebook's), with ``tasks.clamp_visible`` in the masked task, except for
``attractors``, whose search (:func:`spinsa.analysis.find_attractors`) runs eq. 1 with the
config's ``lam_eval``, ``gamma``, ``norm`` and ``update`` whatever the preset (the attribute
``dynamics`` of its group says so).

Pixel space. Errors and patch variances are measured in the embedding's pixel space, as
the evaluation of :mod:`spinsa.experiments.pipeline` does: the decoded state against the
clean image passed through the same embedding (the image itself for ``scale = "paper"``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from spinsa import io
from spinsa._checks import check_count, check_positive, check_real
from spinsa._progress import progress as progress_bar
from spinsa.analysis._results import AnalysisResult
from spinsa.experiments.config import ExperimentConfig
from spinsa.experiments.pipeline import RUN_KIND, load_images, mean_image, run_dynamics
from spinsa.tasks import TASKS

__all__ = [
    "ANALYSES",
    "STREAMS",
    "AnalysisSettings",
    "DecodedImages",
    "ErrorCurves",
    "RunInputs",
    "StrengthMaps",
    "analyze_run",
    "load_run_inputs",
    "strength_maps",
]

#: Random streams of the starts: ``np.random.default_rng([seed, STREAMS[name]])``.
STREAMS = {"train_starts": 0, "random": 3}
ROOT = "analysis"


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class AnalysisSettings:
    """Sizes and thresholds of :func:`analyze_run` (stored as attributes of every group).

    Parameters
    ----------
    n_test : int
        Test images: starts of the trajectories of ``overlaps``, ``lifetimes``,
        ``hebbian`` (error curves) and ``patches``.
    steps : int
        Steps T of those trajectories.
    seed : int
        Seed of the training and random starts (see :data:`STREAMS`); the corruptions are
        the run's own (its ``tasks.seed``).
    n_train_starts : int or None
        Training images started from in ``overlaps`` (default: ``n_test // 2``, at most
        the training set); a seeded random subset.
    n_attractor_starts : int
        Starts of each group (test, masked, noisy, random) of ``attractors``.
    attractor_steps : int
        Steps of the attractor search.
    tol : float
        Step size max_i |x_i(t+1) - x_i(t)| under which a state is a fixed point.
    q_min : float
        Overlap above which two final states are one attractor.
    max_period : int
        Longest cycle looked for.
    threshold : float
        Overlap threshold of the overlap lifetimes.
    bins : int
        Bins of the patch-variance histograms.
    """

    n_test: int = 200
    steps: int = 60
    seed: int = 0
    n_train_starts: int | None = None
    n_attractor_starts: int = 25
    attractor_steps: int = 150
    tol: float = 5e-4
    q_min: float = 0.99
    max_period: int = 2
    threshold: float = 0.9
    bins: int = 50

    def __post_init__(self):
        check_count(self.n_test, "n_test", 2)
        check_count(self.steps, "steps", 1)
        check_count(self.seed, "seed", 0)
        if self.n_train_starts is not None:
            check_count(self.n_train_starts, "n_train_starts", 1)
        check_count(self.n_attractor_starts, "n_attractor_starts", 1)
        check_count(self.max_period, "max_period", 1)
        check_count(self.attractor_steps, "attractor_steps", 2 * self.max_period - 1)
        object.__setattr__(self, "tol", check_positive(self.tol, "tol"))
        q_min = check_real(self.q_min, "q_min")
        if not -1.0 < q_min <= 1.0:
            raise ValueError(f"q_min must be in (-1, 1], got {q_min}")
        object.__setattr__(self, "q_min", q_min)
        object.__setattr__(self, "threshold", check_real(self.threshold, "threshold"))
        check_count(self.bins, "bins", 1)

    def attrs(self) -> dict[str, Any]:
        """The settings as HDF5 attributes (``None`` stays ``None``)."""
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ErrorCurves(AnalysisResult):
    """Task errors of several couplings from the same corrupted images.

    Attributes
    ----------
    times : ndarray of int64, shape (T + 1,)
    errors : ndarray of float64, shape (M, T + 1, P)
        Mean squared pixel error over all pixels of every image, per model.
    mean_all, sem_all, mean_masked, sem_masked, mean_visible, sem_visible
        ndarray of float64, shape (M, T + 1): mean over images and its standard error, over
        all, masked and visible pixels (masked and visible are NaN without a mask).
    models : tuple of str, length M
    task : str
    """

    _arrays: ClassVar[tuple[str, ...]] = (
        "times",
        "errors",
        "mean_all",
        "sem_all",
        "mean_masked",
        "sem_masked",
        "mean_visible",
        "sem_visible",
    )
    times: np.ndarray
    errors: np.ndarray
    mean_all: np.ndarray
    sem_all: np.ndarray
    mean_masked: np.ndarray
    sem_masked: np.ndarray
    mean_visible: np.ndarray
    sem_visible: np.ndarray
    models: tuple[str, ...] = ()
    task: str = ""

    def __post_init__(self):
        self._freeze_arrays()
        object.__setattr__(self, "models", tuple(str(m) for m in self.models))
        M, T1 = len(self.models), self.times.shape[0]
        if self.errors.ndim != 3 or self.errors.shape[:2] != (M, T1):
            raise ValueError(f"errors must have shape ({M}, {T1}, P), got {self.errors.shape}")
        for name in self._arrays[2:]:
            if getattr(self, name).shape != (M, T1):
                raise ValueError(f"{name} must have shape ({M}, {T1})")


@dataclass(frozen=True)
class StrengthMaps(AnalysisResult):
    """Coupling strength |J_ij|_F laid out on the grid of patches.

    Attributes
    ----------
    center : ndarray of float64, shape (gh, gw)
        |J_cj|_F for the central token c (row ``gh // 2``, column ``gw // 2``), at the
        grid position of j (0 at c itself).
    offset : ndarray of float64, shape (2 gh - 1, 2 gw - 1)
        Mean of |J_ij|_F over the pairs with grid displacement (r_j - r_i, c_j - c_i); the
        centre (zero displacement) is NaN.
    center_token : int
        c.
    """

    _arrays: ClassVar[tuple[str, ...]] = ("center", "offset")
    center: np.ndarray
    offset: np.ndarray
    center_token: int = 0

    def __post_init__(self):
        self._freeze_arrays()
        gh, gw = self.center.shape
        if self.offset.shape != (2 * gh - 1, 2 * gw - 1):
            raise ValueError(
                f"offset must have shape ({2 * gh - 1}, {2 * gw - 1}), got {self.offset.shape}"
            )


@dataclass(frozen=True)
class DecodedImages(AnalysisResult):
    """Configurations decoded into images (e.g. the attractors), for figures.

    Attributes
    ----------
    images : ndarray of float32, shape (C, H, W)
        In the embedding's pixel space, [0, 1].
    """

    _arrays: ClassVar[tuple[str, ...]] = ("images",)
    images: np.ndarray

    def __post_init__(self):
        self._freeze_arrays()
        if self.images.ndim not in (3, 4):
            raise ValueError(f"images must have shape (C, H, W[, ch]), got {self.images.shape}")


def strength_maps(J, grid_shape: tuple[int, int]) -> StrengthMaps:
    """|J_ij|_F on the patch grid: around the central token, and averaged by displacement.

    Parameters
    ----------
    J : ndarray, shape (N, N, d, d)
    grid_shape : (int, int)
        (gh, gw) with gh * gw = N, tokens in row-major grid order
        (:attr:`spinsa.PatchEmbedding.grid_shape`).

    Returns
    -------
    StrengthMaps
    """
    from spinsa.analysis.hebbian import pair_strengths

    S = pair_strengths(J)
    gh, gw = (check_count(g, "grid_shape[...]", 1) for g in grid_shape)
    if gh * gw != S.shape[0]:
        raise ValueError(f"grid_shape {grid_shape} does not hold the N = {S.shape[0]} tokens")
    c = (gh // 2) * gw + gw // 2
    r, q = np.divmod(np.arange(gh * gw), gw)
    dr = (r[None, :] - r[:, None]) + gh - 1
    dc = (q[None, :] - q[:, None]) + gw - 1
    off = ~np.eye(gh * gw, dtype=bool)
    shape = (2 * gh - 1, 2 * gw - 1)
    flat = np.ravel_multi_index((dr[off], dc[off]), shape)
    total = np.bincount(flat, weights=S[off], minlength=shape[0] * shape[1])
    count = np.bincount(flat, minlength=shape[0] * shape[1])
    offset = np.full(total.shape, np.nan)
    np.divide(total, count, out=offset, where=count > 0)
    return StrengthMaps(
        center=S[c].reshape(gh, gw), offset=offset.reshape(shape), center_token=int(c)
    )


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True, eq=False)
class RunInputs:
    """What the analyses of a run file need, rebuilt from the file and its config.

    Attributes
    ----------
    path : Path
    config : spinsa.experiments.ExperimentConfig
    J : ndarray of float32, shape (N, N, d, d)
        The fitted couplings.
    embedding : spinsa.PatchEmbedding
    train_images : ndarray, shape (M, H, W)
        The training images of the config.
    test_images : ndarray, shape (P, H, W)
        The config's test subset with ``n_test`` images.
    test_index : ndarray of int64, shape (P,)
        Their numbers in the test split (the keys of their task streams).
    patterns : ndarray, shape (M, N, d)
        The embedded training images (the stored patterns).
    test_patterns : ndarray, shape (P, N, d)
        The embedded test images.
    clean : ndarray of float32, shape (P, H, W)
        The test images in the embedding's pixel space
        (:meth:`spinsa.PatchEmbedding.pixel_space`).
    mean_train_image : ndarray, shape (H, W)
        ``/data/mean_train_image`` of the run file.
    """

    path: Path
    config: Any
    J: np.ndarray
    embedding: Any
    train_images: np.ndarray
    test_images: np.ndarray
    test_index: np.ndarray
    patterns: np.ndarray
    test_patterns: np.ndarray
    clean: np.ndarray
    mean_train_image: np.ndarray

    @property
    def lam(self) -> float:
        """lambda_eval of the run's dynamics."""
        return float(self.config.dynamics.lam_eval)

    def starts(self, task: str) -> tuple[np.ndarray, np.ndarray | None]:
        """The run's corrupted test images of a task, shape (P, N, d), and the token mask
        (:meth:`~spinsa.experiments.config.TasksSection.inputs`; None for denoising)."""
        return self.config.tasks.inputs(task, self.embedding, self.test_images, self.test_index)


def _read_run(path: Path):
    info = io.read(path)  # refuses foreign and broken files with a SpinsaFileError
    if info.kind != RUN_KIND:
        hint = (
            " A reproduce directory keeps each model's run file as fit-<model>.h5 next to it."
            if info.kind == "reproduce"
            else ""
        )
        raise ValueError(
            f"{path} is a spinsa file of kind {info.kind!r}; the analyses need a run file "
            f"(kind {RUN_KIND!r}) written by spinsa train or run_experiment, with its "
            f"couplings J and its config.{hint}"
        )
    if "J" not in info.datasets:
        raise ValueError(f"{path} holds no couplings /J")
    return info, ExperimentConfig.from_dict(info.config)


def load_run_inputs(path: str | os.PathLike, n_test: int = 200) -> RunInputs:
    """The couplings, config and images of a run file (see :class:`RunInputs`).

    Parameters
    ----------
    path : str or PathLike
        A run file (``kind = "experiment"``).
    n_test : int
        Test images to load.

    Returns
    -------
    RunInputs
    """
    path = Path(path)
    n_test = check_count(n_test, "n_test", 1)
    info, config = _read_run(path)
    config = config.with_overrides({"data.n_test": n_test})
    images = load_images(config)
    emb = config.make_embedding()
    J = io.read_array(path, "J")
    if "data/mean_train_image" in info.datasets:
        mean = io.read_array(path, "data/mean_train_image")
    else:
        mean = mean_image(emb, images.train)
    return RunInputs(
        path=path,
        config=config,
        J=J,
        embedding=emb,
        train_images=images.train,
        test_images=images.test,
        test_index=images.test_index,
        patterns=emb.encode(images.train),
        test_patterns=emb.encode(images.test),
        clean=emb.pixel_space(images.test),
        mean_train_image=mean,
    )


# --------------------------------------------------------------------------- dynamics


@dataclass(frozen=True, eq=False)
class _TaskPass:
    """What one corrupted-image pass keeps: errors, overlaps, masked-patch variances."""

    errors: Any  # ReconstructionErrors, fields (T + 1, P)
    overlap: np.ndarray  # (T + 1, P), with the clean test pattern
    mask: np.ndarray | None
    variances: np.ndarray | None  # (T + 1, K), masked patches, or None


class _Context:
    """One call of :func:`analyze_run`: inputs, settings, passes shared between analyses."""

    def __init__(self, inputs: RunInputs, settings: AnalysisSettings, progress: bool):
        self.inputs = inputs
        self.settings = settings
        self.progress = progress
        self._passes: dict[tuple[str, str], _TaskPass] = {}
        self._hebbian: np.ndarray | None = None

    # -- couplings
    def couplings(self, which: str) -> np.ndarray:
        if which == "fitted":
            return self.inputs.J
        if self._hebbian is None:
            from spinsa.analysis.hebbian import matched_hebbian

            self._hebbian = matched_hebbian(self.inputs.patterns, self.inputs.J, "global")
        return self._hebbian

    # -- dynamics with a (transient) progress bar
    def run(self, J, x0, mask, steps, record, desc: str) -> None:
        with progress_bar(steps, desc, "step", enabled=self.progress, leave=False) as bar:

            def callback(t, x):
                record(t, x)
                bar.update()

            record(0, np.asarray(x0))
            run_dynamics(self.inputs.config, J, x0, mask, steps, callback)

    def task_pass(self, which: str, task: str) -> _TaskPass:
        """Corrupted test images of ``task`` iterated with the ``which`` couplings (cached)."""
        key = (which, task)
        if key not in self._passes:
            self._passes[key] = self._task_pass(which, task)
        return self._passes[key]

    def _task_pass(self, which: str, task: str) -> _TaskPass:
        from spinsa.analysis.overlaps import target_overlaps
        from spinsa.analysis.patches import masked_patch_variances
        from spinsa.tasks import ReconstructionErrors, pixel_mask, reconstruction_errors

        inp, T = self.inputs, self.settings.steps
        x0, mask = inp.starts(task)
        P = x0.shape[0]
        pmask = None if mask is None else pixel_mask(mask, inp.embedding)
        errs = {k: np.empty((T + 1, P)) for k in ("all", "masked", "visible")}
        overlap = np.empty((T + 1, P))
        keep_var = mask is not None and which == "fitted"
        variances = np.empty((T + 1, int(mask.sum()))) if keep_var else None

        def record(t, x):
            dec = inp.embedding.decode_pixels(x)
            e = reconstruction_errors(dec, inp.clean, pmask)
            for k in errs:
                errs[k][t] = getattr(e, k)
            overlap[t] = target_overlaps(x, inp.test_patterns)
            if keep_var:
                variances[t] = masked_patch_variances(dec, mask, inp.embedding.patch).variance

        self.run(self.couplings(which), x0, mask, T, record, f"{task} ({which} J)")
        return _TaskPass(ReconstructionErrors(**errs), overlap, mask, variances)

    def dynamics_attrs(self, name: str) -> dict[str, Any]:
        """The dynamics an analysis ran (the attractor search always runs eq. 1)."""
        dyn = self.inputs.config.dynamics
        return {
            "lam": dyn.lam_eval,
            "dynamics": "design" if name == "attractors" else dyn.preset,
            "run_preset": dyn.preset,
            "gamma": dyn.gamma,
            "norm": dyn.norm,
            "update": dyn.update,
            "clamp_visible": bool(self.inputs.config.tasks.clamp_visible),
        }


Results = dict[str, tuple[AnalysisResult, dict[str, Any]]]


# --------------------------------------------------------------------------- analyses


def _overlaps(ctx: _Context) -> Results:
    from spinsa.analysis.overlaps import (
        OverlapTrace,
        mean_pattern,
        nearest_patterns,
        target_overlaps,
    )

    inp, s = ctx.inputs, ctx.settings
    T = s.steps
    M = inp.patterns.shape[0]
    n_train = min(s.n_train_starts or max(s.n_test // 2, 1), M)
    train_index = np.sort(
        np.random.default_rng([s.seed, STREAMS["train_starts"]]).choice(M, n_train, replace=False)
    )
    mean = mean_pattern(inp.patterns)
    out: Results = {}
    for starts, x0 in (("test", inp.test_patterns), ("train", inp.patterns[train_index])):
        P = x0.shape[0]
        target = np.empty((T + 1, P), dtype=x0.dtype)
        index = np.empty((T + 1, P), dtype=np.int64)
        value = np.empty((T + 1, P), dtype=x0.dtype)
        to_mean = np.empty((T + 1, P), dtype=x0.dtype)
        means = np.broadcast_to(mean, x0.shape)

        def record(
            t, x, x0=x0, target=target, index=index, value=value, to_mean=to_mean, means=means
        ):
            target[t] = target_overlaps(x, x0)
            near = nearest_patterns(x, inp.patterns)
            index[t], value[t] = near.index, near.overlap
            to_mean[t] = target_overlaps(x, means)

        ctx.run(inp.J, x0, None, T, record, f"overlaps ({starts} images)")
        times = np.arange(T + 1, dtype=np.int64)
        attrs = {
            "starts": f"{starts} images",
            "n_images": int(P),
            "n_patterns": int(M),
            "steps": T,
        }
        if starts == "train":
            attrs["start_index"] = train_index
        out[starts] = (
            OverlapTrace(times=times, target=target, nearest_index=index, nearest_overlap=value),
            attrs,
        )
        if starts == "test":
            out["mean"] = (
                OverlapTrace(times=times, target=to_mean),
                {**attrs, "target_pattern": "mean training pattern, projected token by token"},
            )
    return out


def _lifetimes(ctx: _Context) -> Results:
    from spinsa.analysis.lifetimes import error_lifetimes, overlap_lifetimes, summarize_lifetimes

    s, tasks = ctx.settings, ctx.inputs.config.tasks
    times = np.arange(s.steps + 1, dtype=np.int64)
    levels = {"masked": tasks.mask_fraction, "denoise": tasks.noise_variance}
    per: dict[str, list] = {"error": [], "overlap": []}
    out: Results = {}
    for task in TASKS:
        p = ctx.task_pass("fitted", task)
        common = {"task": task, "level": float(levels[task]), "n_images": int(p.overlap.shape[1])}
        err = error_lifetimes(p.errors.all, times)
        ovl = overlap_lifetimes(p.overlap, times, s.threshold)
        per["error"].append(err)
        per["overlap"].append(ovl)
        out[f"{task}_error"] = (err, {**common, "error": "mean squared error over all pixels"})
        out[f"{task}_overlap"] = (ovl, common)
    for criterion, results in per.items():
        table = summarize_lifetimes(results, [levels[t] for t in TASKS])
        out[f"table_{criterion}"] = (
            table,
            {"tasks": list(TASKS), "level_names": ["mask fraction", "noise variance"]},
        )
    return out


def _attractors(ctx: _Context) -> Results:
    from spinsa.analysis.attractors import find_attractors, random_spins

    inp, s = ctx.inputs, ctx.settings
    n = min(s.n_attractor_starts, inp.test_patterns.shape[0])
    N, d = inp.J.shape[0], inp.J.shape[2]
    masked, _ = inp.starts("masked")
    noisy, _ = inp.starts("denoise")
    rand = random_spins(n, N, d, np.random.default_rng([s.seed, STREAMS["random"]]))
    x0s = np.concatenate([inp.test_patterns[:n], masked[:n], noisy[:n], rand.astype(masked.dtype)])
    groups = np.repeat(np.array(["test", "masked", "noisy", "random"]), n)
    dyn = inp.config.dynamics
    report = find_attractors(
        inp.J,
        dyn.lam_eval,
        x0s,
        s.attractor_steps,
        gamma=dyn.gamma,
        norm=dyn.norm,
        update=dyn.update,
        seed=dyn.seed,
        max_period=s.max_period,
        tol=s.tol,
        q_min=s.q_min,
        patterns=inp.patterns,
        embedding=inp.embedding,
        groups=groups,
        progress=ctx.progress,
    )
    images = (
        inp.embedding.decode_pixels(report.states)
        if report.n_attractors
        else np.zeros((0, *inp.embedding.image_shape), dtype=np.float32)
    )
    attrs = {"starts_per_group": int(n), "group_order": ["test", "masked", "noisy", "random"]}
    return {
        "report": (report, attrs),
        "images": (DecodedImages(images=images.astype(np.float32)), {"of": "report/states"}),
    }


def _hebbian(ctx: _Context) -> Results:
    from spinsa.analysis.hebbian import comparison_of, coupling_spectrum, strength_vs_distance
    from spinsa.tasks import summarize

    inp = ctx.inputs
    J, K = inp.J, ctx.couplings("hebbian")
    positions = inp.embedding.token_positions("center")
    distance = np.linalg.norm(positions[:, None] - positions[None, :], axis=-1)
    sJ, sK = coupling_spectrum(J), coupling_spectrum(K)  # stored below too: computed once
    comparison = comparison_of(J, K, sJ, sK, distance, "global", inp.patterns.shape[0])
    grid = inp.embedding.grid_shape
    unit = {"distance_unit": "pixels"}
    out: Results = {
        "comparison": (comparison, unit),
        "distance": (strength_vs_distance(J, positions), {"couplings": "fitted", **unit}),
        "distance_hebbian": (strength_vs_distance(K, positions), {"couplings": "hebbian", **unit}),
        "maps": (strength_maps(J, grid), {"couplings": "fitted"}),
        "maps_hebbian": (strength_maps(K, grid), {"couplings": "hebbian"}),
        "spectrum": (sJ, {"couplings": "fitted"}),
        "spectrum_hebbian": (sK, {"couplings": "hebbian"}),
    }
    models = ("fitted", "hebbian")
    times = np.arange(ctx.settings.steps + 1, dtype=np.int64)
    for task in TASKS:
        passes = [ctx.task_pass(m, task) for m in models]
        sums = [summarize(p.errors) for p in passes]
        fields = {}
        for part in ("all", "masked", "visible"):
            fields[f"mean_{part}"] = np.stack([getattr(sm.mean, part) for sm in sums])
            fields[f"sem_{part}"] = np.stack([getattr(sm.sem, part) for sm in sums])
        curves = ErrorCurves(
            times=times,
            errors=np.stack([p.errors.all for p in passes]),
            models=models,
            task=task,
            **fields,
        )
        out[f"errors_{task}"] = (curves, {"n_images": int(passes[0].overlap.shape[1])})
    return out


def _patches(ctx: _Context) -> Results:
    from spinsa.analysis.patches import (
        PatchVariances,
        masked_patch_variances,
        patch_variance_histograms,
    )
    from spinsa.tasks import summarize

    inp, s = ctx.inputs, ctx.settings
    p = ctx.task_pass("fitted", "masked")
    T = s.steps
    mean = summarize(p.errors).mean.all
    best = 1 + int(np.nanargmin(mean[1:])) if np.isfinite(mean[1:]).any() else 1
    clean = masked_patch_variances(inp.clean, p.mask, inp.embedding.patch)

    def at(t: int) -> PatchVariances:
        return PatchVariances(
            variance=p.variances[t], sample=clean.sample, token=clean.token, patch=clean.patch
        )

    chosen = {
        "clean": (clean, None),
        "first": (at(1), 1),
        "best": (at(best), best),
        "last": (at(T), T),
    }
    labels = {
        "clean": "clean images",
        "first": "t = 1",
        "best": f"t = {best} (best)",
        "last": f"t = {T}",
    }
    hist = patch_variance_histograms({labels[k]: v for k, (v, _) in chosen.items()}, bins=s.bins)
    out: Results = {
        k: (v, {"label": labels[k], "t": -1 if t is None else int(t)})
        for k, (v, t) in chosen.items()
    }
    out["histograms"] = (hist, {"best_t": int(best), "steps": T})
    return out


@dataclass(frozen=True)
class _Analysis:
    run: Callable[[_Context], Results]
    help: str


#: The analyses of :func:`analyze_run`, by name, in the order they run.
ANALYSES: dict[str, _Analysis] = {
    "overlaps": _Analysis(
        _overlaps, "overlap with the start image and the nearest training pattern vs t"
    ),
    "lifetimes": _Analysis(_lifetimes, "lifetimes of the transient after masking and noise"),
    "attractors": _Analysis(
        _attractors, "attractors from test, masked, noisy and random starts; basins"
    ),
    "hebbian": _Analysis(
        _hebbian, "fitted vs norm-matched Hebbian couplings: cosines, geometry, spectra, errors"
    ),
    "patches": _Analysis(_patches, "pixel variance inside the masked patches (paper Fig. 2)"),
}


def _select(only: str | Iterable[str] | None) -> list[str]:
    if only is None:
        return list(ANALYSES)
    names = [only] if isinstance(only, str) else list(only)
    if not names:
        raise ValueError(f"only must name at least one analysis: {', '.join(ANALYSES)}")
    unknown = [n for n in names if n not in ANALYSES]
    if unknown:
        raise ValueError(
            f"unknown analysis {', '.join(map(repr, unknown))}; the analyses are: "
            + ", ".join(ANALYSES)
        )
    return [n for n in ANALYSES if n in names]  # table order, no duplicates


def _write(path: Path, name: str, results: Results, attrs: Mapping[str, Any]) -> None:
    from spinsa.analysis.store import save_analysis

    io.write_group(path, f"{ROOT}/{name}", {}, dict(attrs), overwrite=True)
    for sub, (result, extra) in results.items():
        save_analysis(path, f"{name}/{sub}", result, attrs=extra)


def analyze_run(
    path: str | os.PathLike,
    only: str | Iterable[str] | None = None,
    *,
    n_test: int = 200,
    steps: int = 60,
    seed: int = 0,
    overwrite: bool = False,
    progress: bool = False,
    **settings: Any,
) -> list[str]:
    """Run the analyses of a run file and write each under ``/analysis/<name>``.

    Parameters
    ----------
    path : str or PathLike
        A run file (``kind = "experiment"``, from ``spinsa train`` or
        :func:`spinsa.experiments.run_experiment`); other files are refused.
    only : str or iterable of str, optional
        Names from :data:`ANALYSES` (default: all of them); an unknown name raises a
        ``ValueError`` that lists the known ones.
    n_test : int
        Test images started from (:class:`AnalysisSettings`).
    steps : int
        Steps T of the trajectories.
    seed : int
        Seed of the training and random starts (the corruptions are the run's own).
    overwrite : bool
        Replace analyses the file already holds (default: refuse before computing anything).
    progress : bool
        Progress bars (one over the analyses, one per run of the dynamics).
    **settings
        Any other field of :class:`AnalysisSettings` (``attractor_steps``, ``tol``...).

    Returns
    -------
    list of str
        The names of the results written, e.g. ``["overlaps/test", "overlaps/train", ...]``
        (read them back with :func:`spinsa.analysis.load_analysis`).
    """

    names = _select(only)
    unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(AnalysisSettings)})
    if unknown:
        known = ", ".join(f.name for f in dataclasses.fields(AnalysisSettings))
        raise ValueError(f"unknown setting(s) {', '.join(unknown)}; the settings are: {known}")
    cfg = AnalysisSettings(n_test=n_test, steps=steps, seed=seed, **settings)
    path = Path(path)
    info, _ = _read_run(path)
    present = [n for n in names if f"{ROOT}/{n}" in info.groups]
    if present and not overwrite:
        raise FileExistsError(
            f"{path} already holds the analyses {', '.join(present)}; pass overwrite=True "
            "(spinsa analyze --overwrite) to replace them"
        )
    ctx = _Context(load_run_inputs(path, cfg.n_test), cfg, progress)
    written: list[str] = []
    with progress_bar(len(names), "spinsa analyze", "analysis", enabled=progress) as bar:
        for name in names:
            bar.set_postfix_str(name)
            t0 = time.perf_counter()
            results = ANALYSES[name].run(ctx)
            attrs = {
                **cfg.attrs(),
                **ctx.dynamics_attrs(name),
                "analysis": name,
                "wall_time": time.perf_counter() - t0,
            }
            _write(path, name, results, attrs)
            written += [f"{name}/{sub}" for sub in results]
            bar.update()
    return written
