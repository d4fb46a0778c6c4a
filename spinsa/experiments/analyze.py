"""Every analysis of a run file, stored in the file: what ``spinsa analyze RUN.h5`` does.

:func:`analyze_run` reads a run file's couplings and config, rebuilds its images, runs the
analyses of :mod:`spinsa.analysis` with the run's dynamics and writes each result under
``/analysis/<name>/`` of the file::

    analyze_run("run.h5", only=["hebbian"], n_test=1000, steps=100, overwrite=True)

The analyses (:data:`ANALYSES`) and their results:

``overlaps``
    ``test``, ``train`` (:class:`~spinsa.analysis.OverlapTrace`): overlaps with the start and
    the nearest training pattern; ``mean``: the test trajectories' with the mean pattern.
``lifetimes``
    ``masked_error``, ``denoise_error`` (:class:`~spinsa.analysis.Lifetimes`): how long the
    pixel error stays below the corrupted input's; ``masked_overlap``, ``denoise_overlap``:
    how long the overlap with the clean image stays above ``threshold``; both only while
    the state is nearer the clean image than midway to the global attractor (the one of
    largest basin in the attractor search, run for them if ``attractors`` is not: a
    lifetime must not count the time spent at the attractor; :mod:`spinsa.analysis.lifetimes`);
    ``table_error``, ``table_overlap`` (:class:`~spinsa.analysis.LifetimeTable`, a row per
    task).
``attractors``
    ``report`` (:class:`~spinsa.analysis.AttractorReport`): the attractors reached from the
    groups of starts ``test``, ``masked``, ``noisy`` and ``random`` (uniform spins), each
    run until converged (at most ``attractor_steps``), with their basins; ``images``
    (:class:`DecodedImages`).
``hebbian``
    Against the norm-matched Hebbian couplings: ``comparison``
    (:class:`~spinsa.analysis.HebbianComparison`), ``distance[_hebbian]``
    (:class:`~spinsa.analysis.StrengthDistance`), ``maps[_hebbian]`` (:class:`StrengthMaps`),
    ``spectrum[_hebbian]`` (:class:`~spinsa.analysis.CouplingSpectrum`), ``errors_masked``,
    ``errors_denoise`` (:class:`ErrorCurves`: both couplings from the same inputs).
``patches``
    Pixel variance of each masked patch (the paper's Fig. 2) in the clean images (``clean``)
    and the predictions at t = 1 (``first``), the best t >= 1 (``best``) and t = T (``last``)
    (:class:`~spinsa.analysis.PatchVariances`); ``histograms`` of the four.

``/analysis/<name>`` holds the settings (:class:`AnalysisSettings`) and the dynamics as
attributes. The corrupted images are the run's task inputs, as in ``spinsa evaluate``; the
other starts come from :data:`STREAMS`. Trajectories follow the run's dynamics, except the
attractor search (:func:`spinsa.analysis.find_attractors`): eq. 1 with the run's
``lam_eval``, ``gamma``, ``norm`` and ``update``. Errors are in the embedding's pixel space.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from spinsa import analysis, io
from spinsa._checks import check_count, check_positive, check_real
from spinsa._config import config_from_dict
from spinsa._progress import progress as progress_bar
from spinsa.analysis._results import AnalysisResult
from spinsa.analysis.hebbian import comparison_of
from spinsa.analysis.summary import best_time
from spinsa.experiments.pipeline import PIXELS, RUN_KIND, load_images, read_run, run_dynamics
from spinsa.tasks import (
    TASKS,
    ReconstructionErrors,
    StateScorer,
    pixel_mask,
    reconstruction_errors,
    summarize,
)

__all__ = [
    "ANALYSES",
    "STREAMS",
    "AnalysisSettings",
    "RunInputs",
    "analyze_run",
    "load_run_inputs",
]

#: Random streams of the starts: ``np.random.default_rng([seed, STREAMS[name]])``.
STREAMS = {"train_starts": 0, "random": 3}
ROOT = "analysis"
GROUPS = ("test", "masked", "noisy", "random")  # the starts of the attractor search


@dataclass(frozen=True)
class AnalysisSettings:
    """Sizes and thresholds of :func:`analyze_run` (stored as attributes of every group).

    Parameters
    ----------
    n_test, steps : int
        Test images started from, and steps T of the trajectories (all but the attractors').
    seed : int
        Seed of the training and random starts (:data:`STREAMS`); the corruptions are the
        run's own (its ``tasks.seed``).
    n_train_starts : int or None
        Training images started from in ``overlaps`` (default ``n_test // 2``).
    n_attractor_starts, attractor_steps : int
        Starts of each group of ``attractors``, and the most steps of the search: each start
        runs until it is on a fixed point or a cycle (``until_converged`` of
        :func:`~spinsa.analysis.find_attractors`); those still moving after
        ``attractor_steps`` count as unconverged.
    tol : float
        Step size max_i |x_i(t+1) - x_i(t)| under which a state is a fixed point.
    q_min : float
        Overlap above which two final states are one attractor.
    max_period : int
        Longest cycle looked for.
    threshold : float
        Overlap threshold of the overlap lifetimes (raised, image by image, to midway
        between the clean image and the global attractor where that is higher).
    bins : int
        Bins of the patch-variance histograms.
    """

    n_test: int = 200
    steps: int = 60
    seed: int = 0
    n_train_starts: int | None = None
    n_attractor_starts: int = 25
    attractor_steps: int = 2000
    tol: float = 5e-4
    q_min: float = 0.99
    max_period: int = 2
    threshold: float = 0.9
    bins: int = 50

    def __post_init__(self):
        minimum = dict(n_test=2, steps=1, seed=0, n_attractor_starts=1, max_period=1, bins=1)
        for name, low in minimum.items():
            check_count(getattr(self, name), name, low)
        check_count(self.attractor_steps, "attractor_steps", 2 * self.max_period - 1)
        if self.n_train_starts is not None:
            check_count(self.n_train_starts, "n_train_starts", 1)
        object.__setattr__(self, "tol", check_positive(self.tol, "tol"))
        q_min = check_real(self.q_min, "q_min")
        if not -1.0 < q_min <= 1.0:
            raise ValueError(f"q_min must be in (-1, 1], got {q_min}")
        object.__setattr__(self, "q_min", q_min)
        object.__setattr__(self, "threshold", check_real(self.threshold, "threshold"))


@dataclass(frozen=True, eq=False)
class RunInputs:
    """What the analyses of a run file need, rebuilt from the file and its config.

    Attributes
    ----------
    path : Path
    config : spinsa.experiments.ExperimentConfig
        The run's config, with ``data.n_test`` the number of test images loaded.
    J : ndarray of float32, shape (N, N, d, d)
    embedding : spinsa.PatchEmbedding
    train_images, test_images : ndarray, shapes (M, H, W) and (P, H, W)
    test_index : ndarray of int64, shape (P,)
        The test images' numbers in their split (the keys of their task streams).
    patterns, test_patterns : ndarray, shapes (M, N, d) and (P, N, d)
        The embedded training images (the stored patterns) and test images.
    clean : ndarray of float32, shape (P, H, W)
        The test images in the embedding's pixel space.
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

    def starts(self, task: str) -> tuple[np.ndarray, np.ndarray | None]:
        """The run's corrupted test images of a task, shape (P, N, d), and the token mask
        (:meth:`~spinsa.experiments.config.TasksSection.inputs`; None for denoising)."""
        return self.config.tasks.inputs(task, self.embedding, self.test_images, self.test_index)


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
    return _load_inputs(path, read_run(path, (RUN_KIND,), couplings=True)[1], n_test)


def _load_inputs(path: Path, config, n_test: int) -> RunInputs:
    """:func:`load_run_inputs` of a run file already read (its config as stored)."""
    config = config.with_overrides({"data.n_test": n_test})
    images = load_images(config)
    emb = config.make_embedding()
    return RunInputs(
        path=path,
        config=config,
        J=io.read_array(path, "J"),
        embedding=emb,
        train_images=images.train,
        test_images=images.test,
        test_index=images.test_index,
        patterns=emb.encode(images.train),
        test_patterns=emb.encode(images.test),
        clean=emb.pixel_space(images.test),
    )


# --------------------------------------------------------------------------- dynamics
class _TaskPass(NamedTuple):
    """What one corrupted-image pass keeps."""

    errors: Any  # ReconstructionErrors, fields (T + 1, P)
    overlap: np.ndarray  # (T + 1, P), with the clean test pattern
    mask: np.ndarray | None
    variances: np.ndarray | None  # (T + 1, K), of the masked patches (fitted J only)


class _Context:
    """One call of :func:`analyze_run`: inputs, settings, passes shared between analyses."""

    def __init__(self, inputs: RunInputs, settings: AnalysisSettings, progress: bool):
        self.inputs, self.settings, self.progress = inputs, settings, progress
        self._passes: dict[tuple[str, str], _TaskPass] = {}

    @functools.cached_property
    def attractors(self) -> analysis.AttractorReport:
        """The attractor search (computed once, for ``attractors`` and ``lifetimes``): eq. 1
        with the run's lam_eval, gamma, norm and update from the groups of starts, each run
        until converged, at most ``attractor_steps`` steps."""
        inp, s = self.inputs, self.settings
        n = min(s.n_attractor_starts, inp.test_patterns.shape[0])
        N, d = inp.J.shape[0], inp.J.shape[2]
        masked, noisy = inp.starts("masked")[0][:n], inp.starts("denoise")[0][:n]
        rand = analysis.random_spins(n, N, d, np.random.default_rng([s.seed, STREAMS["random"]]))
        x0s = np.concatenate([inp.test_patterns[:n], masked, noisy, rand.astype(masked.dtype)])
        design = dataclasses.asdict(inp.config.dynamics.model_config())
        return analysis.find_attractors(
            inp.J,
            design.pop("lam"),
            x0s,
            until_converged=True,
            max_steps=s.attractor_steps,
            **design,
            max_period=s.max_period,
            tol=s.tol,
            q_min=s.q_min,
            patterns=inp.patterns,
            embedding=inp.embedding,
            groups=np.repeat(np.array(GROUPS), n),
            progress=self.progress,
        )

    @functools.cached_property
    def hebbian(self) -> np.ndarray:
        """The norm-matched Hebbian couplings of the training patterns."""
        return analysis.matched_hebbian(self.inputs.patterns, self.inputs.J, "global")

    def run(self, J, x0, mask, steps, record, desc: str) -> None:
        """The run's dynamics from x0, calling record(t, x) at t = 0..steps."""
        with progress_bar(steps, desc, "step", enabled=self.progress, leave=False) as bar:

            def callback(t, x):
                record(t, x)
                bar.update()

            record(0, np.asarray(x0))
            run_dynamics(self.inputs.config, J, x0, mask, steps, callback)

    def task_pass(self, which: str, task: str) -> _TaskPass:
        """Corrupted test images of ``task`` iterated with the fitted or the Hebbian couplings
        (computed once)."""
        if (which, task) in self._passes:
            return self._passes[which, task]
        inp, T, emb = self.inputs, self.settings.steps, self.inputs.embedding
        x0, mask = inp.starts(task)
        pmask = None if mask is None else pixel_mask(mask, emb)
        errs = {k: np.empty((T + 1, x0.shape[0])) for k in PIXELS}
        overlap = np.empty((T + 1, x0.shape[0]))
        keep_var = mask is not None and which == "fitted"
        variances = np.empty((T + 1, int(mask.sum()))) if keep_var else None

        scorer = StateScorer(emb, inp.clean, pmask)  # decode and score in one compiled pass

        def record(t, x):
            scores = scorer(x, decode=keep_var)
            for k in errs:
                errs[k][t] = getattr(scores.errors, k)
            overlap[t] = analysis.target_overlaps(x, inp.test_patterns)
            if keep_var:
                decoded = scores.decoded
                variances[t] = analysis.masked_patch_variances(decoded, mask, emb.patch).variance

        J = inp.J if which == "fitted" else self.hebbian
        self.run(J, x0, mask, T, record, f"{task} ({which} J)")
        errors = ReconstructionErrors(**errs)
        self._passes[which, task] = _TaskPass(errors, overlap, mask, variances)
        return self._passes[which, task]

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
def _overlap_traces(ctx: _Context, x0: np.ndarray, mean: np.ndarray, desc: str):
    """Along the trajectories from x0: the overlaps with x0 and with the nearest training
    pattern, and those with the mean pattern (two :class:`~spinsa.analysis.OverlapTrace`)."""
    shape = (ctx.settings.steps + 1, x0.shape[0])
    target, value, to_mean = (np.empty(shape, dtype=x0.dtype) for _ in range(3))
    index = np.empty(shape, dtype=np.int64)
    means = np.broadcast_to(mean, x0.shape)

    def record(t, x):
        target[t] = analysis.target_overlaps(x, x0)
        near = analysis.nearest_patterns(x, ctx.inputs.patterns)
        index[t], value[t] = near.index, near.overlap
        to_mean[t] = analysis.target_overlaps(x, means)

    ctx.run(ctx.inputs.J, x0, None, ctx.settings.steps, record, desc)
    times = np.arange(shape[0], dtype=np.int64)
    return analysis.OverlapTrace(times, target, index, value), analysis.OverlapTrace(times, to_mean)


def _overlaps(ctx: _Context) -> Results:
    inp, s = ctx.inputs, ctx.settings
    M = inp.patterns.shape[0]
    n_train = min(s.n_train_starts or max(s.n_test // 2, 1), M)
    rng = np.random.default_rng([s.seed, STREAMS["train_starts"]])
    train_index = np.sort(rng.choice(M, n_train, replace=False))
    mean = analysis.mean_pattern(inp.patterns)
    out: Results = {}
    for starts, x0 in (("test", inp.test_patterns), ("train", inp.patterns[train_index])):
        trace, to_mean = _overlap_traces(ctx, x0, mean, f"overlaps ({starts} images)")
        images = {"test": "test images", "train": "training images"}[starts]
        attrs = dict(starts=images, n_images=len(x0), n_patterns=M, steps=s.steps)
        if starts == "test":
            out["test"] = (trace, attrs)
            what = "mean training pattern, projected token by token"
            out["mean"] = (to_mean, {**attrs, "target_pattern": what})
        else:
            out["train"] = (trace, {**attrs, "start_index": train_index})
    return out


def _global_attractor(ctx: _Context) -> tuple[np.ndarray | None, np.ndarray | None, dict]:
    """The overlap of the global attractor (largest basin) with each clean test pattern and
    its error against each clean test image, and what to say of it; None, None where the
    search found no attractor."""
    report, inp = ctx.attractors, ctx.inputs
    if not report.n_attractors:
        return None, None, {"attractor": "none (no start converged)"}
    a = int(np.argmax(report.basin_size))
    state = np.broadcast_to(report.states[a], inp.test_patterns.shape)
    overlap = analysis.target_overlaps(state, inp.test_patterns)
    image = inp.embedding.decode_pixels(report.states[a : a + 1])[0]
    error = reconstruction_errors(np.broadcast_to(image, inp.clean.shape), inp.clean).all
    said = {"attractor": int(a), "attractor_basin": float(report.basin_fraction[a])}
    return overlap, error, said


def _lifetimes(ctx: _Context) -> Results:
    s, tasks = ctx.settings, ctx.inputs.config.tasks
    times = np.arange(s.steps + 1, dtype=np.int64)
    levels = {"masked": tasks.mask_fraction, "denoise": tasks.noise_variance}
    to_overlap, to_error, said = _global_attractor(ctx)
    out: Results = {}
    for task in TASKS:
        p = ctx.task_pass("fitted", task)
        common = {"task": task, "level": float(levels[task]), "n_images": int(p.overlap.shape[1])}
        common.update(said)
        err = analysis.error_lifetimes(p.errors.all, times, attractor=to_error)
        out[f"{task}_error"] = (err, {**common, "error": "mean squared error over all pixels"})
        ovl = analysis.overlap_lifetimes(p.overlap, times, s.threshold, attractor=to_overlap)
        out[f"{task}_overlap"] = (ovl, common)
    names = {"tasks": list(TASKS), "level_names": ["mask fraction", "noise variance"]}
    for criterion in ("error", "overlap"):
        results = [out[f"{task}_{criterion}"][0] for task in TASKS]
        table = analysis.summarize_lifetimes(results, [levels[t] for t in TASKS])
        out[f"table_{criterion}"] = (table, {**names, **said})
    return out


def _attractors(ctx: _Context) -> Results:
    inp, report = ctx.inputs, ctx.attractors
    n = min(ctx.settings.n_attractor_starts, inp.test_patterns.shape[0])
    emb = inp.embedding
    images = np.zeros((0, *emb.image_shape))
    if report.n_attractors:
        images = emb.decode_pixels(report.states)
    decoded = analysis.DecodedImages(images=images.astype(np.float32))
    return {
        "report": (report, {"starts_per_group": int(n), "group_order": list(GROUPS)}),
        "images": (decoded, {"of": "report/states"}),
    }


def _hebbian(ctx: _Context) -> Results:
    inp = ctx.inputs
    J, K = inp.J, ctx.hebbian
    positions = inp.embedding.token_positions("center")
    distance = np.linalg.norm(positions[:, None] - positions[None, :], axis=-1)
    sJ, sK = analysis.coupling_spectrum(J), analysis.coupling_spectrum(K)  # stored too
    comparison = comparison_of(J, K, sJ, sK, distance, "global", inp.patterns.shape[0])
    grid = inp.embedding.grid_shape
    unit = {"distance_unit": "pixels"}
    fitted, hebbian = {"couplings": "fitted"}, {"couplings": "hebbian"}
    out: Results = {
        "comparison": (comparison, unit),
        "distance": (analysis.strength_vs_distance(J, positions), {**fitted, **unit}),
        "distance_hebbian": (analysis.strength_vs_distance(K, positions), {**hebbian, **unit}),
        "maps": (analysis.strength_maps(J, grid), fitted),
        "maps_hebbian": (analysis.strength_maps(K, grid), hebbian),
        "spectrum": (sJ, fitted),
        "spectrum_hebbian": (sK, hebbian),
    }
    models = ("fitted", "hebbian")
    times = np.arange(ctx.settings.steps + 1, dtype=np.int64)
    for task in TASKS:
        passes = [ctx.task_pass(m, task) for m in models]
        sums = [summarize(p.errors) for p in passes]
        curves = {
            f"{stat}_{part}": np.stack([getattr(getattr(sm, stat), part) for sm in sums])
            for part in PIXELS
            for stat in ("mean", "sem")
        }
        errors = np.stack([p.errors.all for p in passes])
        result = analysis.ErrorCurves(
            times=times, errors=errors, models=models, task=task, **curves
        )
        out[f"errors_{task}"] = (result, {"n_images": int(passes[0].overlap.shape[1])})
    return out


def _patches(ctx: _Context) -> Results:
    inp, T = ctx.inputs, ctx.settings.steps
    p = ctx.task_pass("fitted", "masked")
    best = best_time(summarize(p.errors).mean.all, first=1)
    clean = analysis.masked_patch_variances(inp.clean, p.mask, inp.embedding.patch)
    chosen = {"clean": (clean, -1, "clean images")}  # t = -1: no time
    for name, t, label in (
        ("first", 1, "t = 1"),
        ("best", best, f"t = {best} (best)"),
        ("last", T, f"t = {T}"),
    ):
        chosen[name] = (dataclasses.replace(clean, variance=p.variances[t]), t, label)
    hist = analysis.patch_variance_histograms(
        {label: v for v, _, label in chosen.values()}, bins=ctx.settings.bins
    )
    out: Results = {k: (v, {"label": label, "t": int(t)}) for k, (v, t, label) in chosen.items()}
    out["histograms"] = (hist, {"best_t": int(best), "steps": T})
    return out


class _Analysis(NamedTuple):
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
    names = list(ANALYSES) if only is None else [only] if isinstance(only, str) else list(only)
    unknown = [n for n in names if n not in ANALYSES]
    if unknown or not names:
        what = f"unknown analysis {', '.join(map(repr, unknown))}" if unknown else "no analysis"
        raise ValueError(f"{what}; the analyses are: {', '.join(ANALYSES)}")
    return [n for n in ANALYSES if n in names]  # table order, no duplicates


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
        A run file (``kind = "experiment"``); other files are refused.
    only : str or iterable of str, optional
        Names from :data:`ANALYSES` (default: all of them).
    n_test, steps, seed, **settings
        The fields of :class:`AnalysisSettings` (``attractor_steps``, ``tol``...).
    overwrite : bool
        Replace analyses the file already holds (default: refuse before computing anything).
    progress : bool

    Returns
    -------
    list of str
        The names of the results written, e.g. ``["overlaps/test", "overlaps/train", ...]``
        (read them back with :func:`spinsa.analysis.load_analysis`).
    """
    names = _select(only)
    values = {"n_test": n_test, "steps": steps, "seed": seed, **settings}
    cfg = config_from_dict(AnalysisSettings, values, "the analysis settings")
    path = Path(path)
    info, config = read_run(path, (RUN_KIND,), couplings=True)
    present = [n for n in names if f"{ROOT}/{n}" in info.groups]
    if present and not overwrite:
        raise FileExistsError(
            f"{path} already holds the analyses {', '.join(present)}; pass overwrite=True "
            "(spinsa analyze --overwrite) to replace them"
        )
    ctx = _Context(_load_inputs(path, config, cfg.n_test), cfg, progress)
    written: list[str] = []
    with progress_bar(len(names), "spinsa analyze", "analysis", enabled=progress) as bar:
        for name in names:
            bar.set_postfix_str(name)
            t0 = time.perf_counter()
            results = ANALYSES[name].run(ctx)
            attrs = {**dataclasses.asdict(cfg), **ctx.dynamics_attrs(name), "analysis": name}
            attrs["wall_time"] = time.perf_counter() - t0
            io.write_group(path, f"{ROOT}/{name}", {}, attrs, overwrite=True)
            for sub, (result, extra) in results.items():
                analysis.save_analysis(path, f"{name}/{sub}", result, attrs=extra)
            written += [f"{name}/{sub}" for sub in results]
            bar.update()
    return written
