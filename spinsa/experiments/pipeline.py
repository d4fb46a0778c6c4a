"""The experiment pipeline: data -> fit -> dynamics on the two tasks -> one HDF5 run file.

:func:`train` fits the couplings of an :class:`ExperimentConfig` and writes a run file
(``kind = "experiment"``); :func:`evaluate` adds ``/evaluation/<task>`` to it (or writes it
to a file of its own); :func:`run_experiment` does both in memory and writes the run file
once, the unit of work of a phase scan. Errors are computed on the fly (a callback decodes
and scores every state in one compiled pass, :class:`spinsa.tasks.StateScorer`), so memory
stays O(P N d + T P), never O(T P N d). The run file's layout:
docs/files.md, 'An experiment's run file'.

Errors are measured in the embedding's pixel space (:meth:`spinsa.PatchEmbedding.pixel_space`),
on the task inputs of :meth:`TasksSection.inputs`, the same in every evaluation and analysis.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import spinsa
from spinsa import io
from spinsa._checks import check_choice, check_count, check_lam_gamma, check_spins_couplings
from spinsa._config import config_differences, config_to_dict
from spinsa._files import refuse_existing
from spinsa._progress import progress as progress_bar
from spinsa._torch_dynamics import design_run, dynamics_device
from spinsa.analysis.hebbian import coupling_cosine
from spinsa.analysis.summary import summarize_arrays
from spinsa.couplings import frobenius_norm, hebbian_couplings
from spinsa.damico import damico_run
from spinsa.experiments.config import ExperimentConfig
from spinsa.fit import fit_pseudolikelihood
from spinsa.io.schema import to_json
from spinsa.references import task_references
from spinsa.tasks import (
    TASKS,
    ReconstructionErrors,
    StateScorer,
    draw_noisy,
    image_correlation,
    mean_sem,
    pixel_mask,
    summarize,
)

__all__ = [
    "TASKS",
    "RUN_KIND",
    "EVALUATION_KIND",
    "Images",
    "TaskEvaluation",
    "load_images",
    "evaluate_task",
    "train",
    "evaluate",
    "run_experiment",
    "evaluate_fit",
    "read_run_config",
]

RUN_KIND = "experiment"
EVALUATION_KIND = "evaluation"
N_TUNE = 1000  # corrupted training images on which the denoising references are tuned
CYCLE_TOL = 1e-4  # largest token distance between two states that count as the same
# what an evaluation file of a shared fit copies from it
FIT_ATTRS = ("fit_loss", "fit_converged", "fit_criterion", "fit_iterations", "fit_wall_time",
             "fit_norm", "hebbian_cosine")  # fmt: skip
PIXELS = ("all", "masked", "visible")


# ---------------------------------------------------------------------------- data
@dataclass(frozen=True, eq=False)
class Images:
    """Training and test images of an experiment.

    Attributes
    ----------
    train, test : ndarray, shape (P, H, W) and (Q, H, W), float32 in [0, 1]
    train_labels, test_labels : ndarray of int64
    train_index, test_index : ndarray of int64, shapes (P,) and (Q,)
        The images' numbers in their split (the keys of their task streams).
    """

    train: np.ndarray
    train_labels: np.ndarray
    test: np.ndarray
    test_labels: np.ndarray
    train_index: np.ndarray
    test_index: np.ndarray


def load_images(
    config: ExperimentConfig, *, fetch: bool = True, train: bool = True, test: bool = True
) -> Images:
    """The images of ``config.data``; ``fetch`` fetches MNIST into the cache on first use,
    ``train`` and ``test`` say which splits to load (the other comes back empty)."""
    from spinsa import datasets

    data = config.data
    if data.dataset == "synthetic":

        def load(split, n, per_class=None):  # seeded per split: streams 0 and 1
            n = 10 * per_class if n is None else n
            gen = np.random.default_rng([data.seed, 0 if split == "train" else 1])
            imgs, labels = datasets.synthetic_digits(n, size=data.image_size, seed=gen)
            return imgs, labels, np.arange(n, dtype=np.int64)

    else:
        mnist = datasets.load_mnist if data.dataset == "mnist" else datasets.load_fashion_mnist
        load = functools.partial(mnist, seed=data.seed, fetch=fetch, return_index=True)
    none = np.zeros(0, dtype=np.int64)
    empty = np.zeros((0, *data.image_shape), dtype=np.float32), none, none
    tr = load("train", n=data.n_train, per_class=data.per_class) if train else empty
    te = load("test", n=data.n_test) if test else empty
    return Images(*tr[:2], *te[:2], train_index=tr[2], test_index=te[2])


# ---------------------------------------------------------------------------- evaluation
@dataclass(frozen=True, eq=False)
class TaskEvaluation:
    """Everything kept from the dynamics on one task: the arrays of ``/evaluation/<task>``
    (laid out in docs/files.md).

    Attributes
    ----------
    task : {"masked", "denoise"}
    times : ndarray of int64, shape (T + 1,)
    errors : spinsa.tasks.ReconstructionErrors
        Per-image errors, fields of shape (T + 1, P).
    mean_image_corr : ndarray, shape (T + 1, P)
    step_change : ndarray, shape (T,)
    final_mean_image, final_coherence : ndarray, shapes (H, W) and (P,)
    final_nearest_corr, final_period : ndarray, shape (P,)
        Correlation of each final image with its nearest training image; 1 for a run that
        ended on a fixed point, 2 on a 2-cycle, 0 neither.
    examples, example_times, example_index, clean_examples : ndarray
        Shapes (k, n, H, W), (k,), (n,) and (n, H, W).
    references : dict of str to spinsa.references.Reference
    wall_time : float
        Seconds spent.
    """

    task: str
    times: np.ndarray
    errors: Any
    mean_image_corr: np.ndarray
    step_change: np.ndarray
    final_mean_image: np.ndarray
    final_coherence: np.ndarray
    final_nearest_corr: np.ndarray
    final_period: np.ndarray
    examples: np.ndarray
    example_times: np.ndarray
    example_index: np.ndarray
    clean_examples: np.ndarray
    references: dict[str, Any]
    wall_time: float = 0.0

    def arrays(self) -> dict[str, Any]:
        """The arrays in the layout of ``/evaluation/<task>``."""

        def parts(errors, dtype=None):
            return {k: np.asarray(getattr(errors, k), dtype=dtype) for k in PIXELS}

        summary = summarize(self.errors)
        corr_mean, corr_sem, _ = mean_sem(self.mean_image_corr)
        f32 = np.float32
        return {
            "times": self.times,
            "errors": parts(self.errors, f32),
            "mean": parts(summary.mean),
            "sem": parts(summary.sem),
            "mean_image_corr": self.mean_image_corr.astype(f32),
            "mean_image_corr_mean": corr_mean,
            "mean_image_corr_sem": corr_sem,
            "step_change": self.step_change,
            "final_mean_image": self.final_mean_image.astype(f32),
            "final_coherence": self.final_coherence.astype(f32),
            "final_nearest_corr": self.final_nearest_corr.astype(f32),
            "final_period": self.final_period,
            "examples": {
                "images": self.examples.astype(f32),
                "times": self.example_times,
                "index": self.example_index,
                "clean": self.clean_examples.astype(f32),
            },
            "references": {n: parts(r.errors, f32) for n, r in self.references.items()},
        }

    def reference_params(self) -> dict[str, dict]:
        """``name -> {label, chosen parameters}`` of the references (an HDF5 attribute)."""
        return {n: {"label": r.label, **r.params} for n, r in self.references.items()}


class _Cache:
    """A few values kept by key between calls (what the points of a scan share in one
    process), thread-safe: a Dask worker may run several points in threads."""

    def __init__(self, size: int):
        self.size, self.values, self.lock = size, {}, threading.Lock()

    def get(self, key, make):
        """The value kept for ``key``, else ``make()``, kept (the oldest ones dropped)."""
        with self.lock:
            if key in self.values:
                return self.values[key]
        value = make()
        with self.lock:
            if len(self.values) >= self.size:
                self.values.pop(next(iter(self.values)))
            self.values[key] = value
        return value


# what the points of a scan share: a few data sets (points with one fit share theirs) and
# the references of both tasks on each
_SCAN_IMAGES = _Cache(4)
_SCAN_REFERENCES = _Cache(8)


def _centered(images: np.ndarray, dtype) -> np.ndarray:
    """Every image (P, H, W) as a row of ``dtype`` minus its mean: (P, H W)."""
    a = images.reshape(images.shape[0], -1).astype(dtype)
    return a - a.mean(axis=1, keepdims=True)


def _nearest_correlation(images: np.ndarray, train: np.ndarray, chunk: int = 500) -> np.ndarray:
    """The largest Pearson correlation of every image (P, H, W) with the training images
    (M, H, W): how close it came to one stored image; NaN for a constant image."""

    def standardized(a):
        a = _centered(a, np.float32)
        norm = np.linalg.norm(a, axis=1, keepdims=True)
        return np.divide(a, norm, out=np.full_like(a, np.nan), where=norm > 0)

    stored = np.nan_to_num(standardized(train))  # a constant training image matches nothing
    out = np.empty(images.shape[0])
    for start in range(0, images.shape[0], chunk):
        out[start : start + chunk] = (standardized(images[start : start + chunk]) @ stored.T).max(1)
    return out


def _reference_key(config: ExperimentConfig, task: str) -> str:
    """What the references of a task depend on: the data, the embedding and the corruptions."""
    return to_json([task, *map(config_to_dict, (config.data, config.embedding, config.tasks))])


def _final_periods(last: list[np.ndarray], steps: int) -> np.ndarray:
    """1 (fixed point), 2 (2-cycle) or 0 for every trajectory, from its last states (k, P, N, d)."""
    if len(last) < 2:
        return np.zeros(last[0].shape[0], dtype=np.int64)
    from spinsa.analysis import find_cycles

    times = np.arange(steps - len(last) + 1, steps + 1)
    return find_cycles(np.stack(last), times, max_period=len(last) // 2, tol=CYCLE_TOL).period


def references(
    config: ExperimentConfig, images: Images, task: str, clean, inputs, train, pixel_mask=None
):
    """``name -> spinsa.references.Reference``: the simple predictors on a task's inputs.

    ``clean``, ``inputs`` (P, H, W) and ``train`` (M, H, W) are in the embedding's pixel
    space: the clean test images, the decoded t = 0 states and the training images. The
    denoising references are tuned on :data:`N_TUNE` training images, evenly spaced,
    corrupted by the run's noise from their own streams.
    """
    tune: dict[str, Any] = {}
    if task == "denoise":
        pick = np.unique(np.linspace(0, train.shape[0] - 1, N_TUNE).astype(np.int64))
        tasks = config.tasks
        noisy = draw_noisy(
            images.train[pick], images.train_index[pick], tasks.noise_variance, tasks.seed
        )
        noisy = config.make_embedding().pixel_space(noisy)
        tune = dict(tune_clean=train[pick], tune_noisy=noisy, tune_index=pick)
    return task_references(task, clean, inputs, train, pixel_mask=pixel_mask, **tune)


def run_dynamics(config: ExperimentConfig, J, x0, mask, steps, callback):
    """Iterate the config's dynamics from x0 (P, N, d), calling callback(t, x) at t >= 1.

    The one place that maps ``[dynamics]`` and ``clamp_visible`` to a run (evaluation,
    analyses, Fig. 2); asynchronous site orders come from ``dynamics.seed``, else ``tasks.seed``;
    ``dynamics.device`` says where it runs.
    """
    dyn = config.dynamics
    clamp = config.tasks.clamp_visible and mask is not None
    seed = config.tasks.seed if dyn.seed is None else dyn.seed
    if dyn.preset == "damico2024":
        damico_run(
            x0, J, dyn.lam_eval, steps, mask, clamp_visible=clamp, callback=callback,
            device=dyn.device,
        )  # fmt: skip
    elif clamp and (dev := dynamics_device(dyn.device)) is not None:
        # the visible sites reset after every step, on the device; checked as spinsa.run does
        x0, J = check_spins_couplings(x0, J, x_name="x0")
        check_lam_gamma(dyn.lam_eval, dyn.gamma, x0, J)
        design_run(
            x0, J, dyn.lam_eval, dyn.gamma, dyn.norm, dyn.update, steps, dev, seed=seed,
            visible=~mask, callback=callback,
        )  # fmt: skip
    elif not clamp:
        # one record at the end: the callback keeps what the caller needs
        spinsa.run(
            x0,
            J,
            dyn.lam_eval,
            steps,
            gamma=dyn.gamma,
            norm=dyn.norm,
            update=dyn.update,
            seed=seed,
            callback=callback,
            record_every=max(steps, 1),
            device=dyn.device,
        )
    else:
        rng = np.random.default_rng(seed)
        visible = ~mask
        x = np.array(x0, copy=True)
        for t in range(1, steps + 1):
            if dyn.update == "sync":
                x = spinsa.step(x, J, dyn.lam_eval, gamma=dyn.gamma, norm=dyn.norm)
            else:
                x = spinsa.async_sweep(x, J, dyn.lam_eval, gamma=dyn.gamma, norm=dyn.norm, rng=rng)
            x[visible] = x0[visible]
            callback(t, x)


def state_at(config: ExperimentConfig, J, x0, mask, steps: int) -> np.ndarray:
    """The state (P, N, d) after ``steps`` steps of the config's dynamics from x0 (P, N, d)."""
    state = [x0]

    def keep(t, x):
        if t == steps:
            state[0] = np.array(x, copy=True)

    if steps > 0:
        run_dynamics(config, J, x0, mask, steps, keep)
    return state[0]


class _Recorder:
    """The callback of the dynamics in :func:`evaluate_task`: decodes every state and keeps
    its errors, its correlation with the mean image, the mean step size, the examples and
    the final images, in buffers over all test images, one chunk of images at a time.

    A :class:`spinsa.tasks.StateScorer` (``backend``: ``"numba"``, or ``"numpy"``, the plain
    reference) decodes and scores each state in one pass; the decoded images are kept only
    at the times that need them (t = 0, example times, t = T).
    """

    def __init__(self, emb, clean, mean_img, steps: int, n_ex: int, ex_times, bar,
                 backend: str = "numba"):  # fmt: skip
        P, shape = clean.shape[0], emb.image_shape
        self.emb, self.clean, self.mean_img, self.steps, self.bar = emb, clean, mean_img, steps, bar
        self.n_ex, self.ex_times, self.backend = n_ex, ex_times, backend
        self.errs = {k: np.full((steps + 1, P), np.nan) for k in PIXELS}
        self.corr = np.full((steps + 1, P), np.nan)
        self.change = np.zeros(max(steps, 0))
        self.examples = np.zeros((ex_times.size, n_ex, *shape), dtype=np.float32)
        self.finals = np.empty((P, *shape), dtype=np.float32)
        self.inputs = np.empty((P, *shape), dtype=np.float32)

    def start(self, sl: slice, pmask, x0) -> None:
        """A new chunk of images ``sl`` (pixel mask ``pmask``) starting from ``x0``."""
        self.sl, self.prev = sl, x0
        self.scorer = StateScorer(
            self.emb, self.clean[sl], pmask, self.mean_img, backend=self.backend
        )
        self.last = [x0]  # the last four states: fixed point or 2-cycle at the end
        self(0, x0)

    def __call__(self, t: int, x) -> None:
        sl, P = self.sl, self.clean.shape[0]
        hi = min(sl.stop, self.n_ex)
        where = np.flatnonzero(self.ex_times == t) if sl.start < hi else np.zeros(0, int)
        keep = t == 0 or t == self.steps or where.size > 0
        scores = self.scorer(x, None if t == 0 else self.prev, decode=keep)
        for k in self.errs:
            self.errs[k][t, sl] = getattr(scores.errors, k)
        self.corr[t, sl] = scores.correlation
        dec = scores.decoded
        if t == 0:
            self.inputs[sl] = dec
        else:
            self.change[t - 1] += float(scores.step.sum()) / P
            self.prev = x
            self.last = [*self.last[-3:], x]
            self.bar.update(x.shape[0])
        if where.size:
            self.examples[where[0], sl.start : hi] = dec[: hi - sl.start]
        if t == self.steps:
            self.finals[sl] = dec


def evaluate_task(
    config: ExperimentConfig,
    J: np.ndarray,
    images: Images,
    task: str,
    *,
    steps: int | None = None,
    chunk_size: int = 1000,
    progress: bool = False,
    reference_cache: _Cache | None = None,
) -> TaskEvaluation:
    """Run the config's dynamics on one task over the test images, keeping the errors.

    Parameters
    ----------
    config : ExperimentConfig
    J : ndarray, shape (N, N, d, d)
    images : Images
        The test images are corrupted and iterated; the training images give the mean
        image and the references (:func:`references`).
    task : {"masked", "denoise"}
    steps : int, optional
        T (default ``config.dynamics.steps``).
    chunk_size : int
        Images iterated at once (memory; the results do not depend on it).
    progress : bool
    reference_cache : _Cache, optional
        Keeps the references by (task, data, embedding, tasks) across calls, for callers
        whose ``images`` are :func:`load_images` of the config (a scan's points).

    Returns
    -------
    TaskEvaluation
    """
    check_choice(task, "task", TASKS)
    steps = config.dynamics.steps if steps is None else check_count(steps, "steps")
    chunk_size = check_count(chunk_size, "chunk_size", 1)
    t_start = time.perf_counter()
    emb = config.make_embedding()
    test, shape = np.asarray(images.test, dtype=np.float32), emb.image_shape
    if test.ndim != 3 or test.shape[1:] != shape:
        raise ValueError(
            f"test images must have shape (P, {shape[0]}, {shape[1]}), got {test.shape}"
        )
    P = test.shape[0]
    x0_all, mask_all = config.tasks.inputs(task, emb, test, images.test_index)
    pmask_all = None if mask_all is None else pixel_mask(mask_all, emb)
    clean_all = emb.pixel_space(test)
    train_px = emb.pixel_space(images.train)
    mean_img = train_px.mean(axis=0, dtype=np.float64)

    n_ex = min(config.tasks.n_examples, P)
    ex_times = np.array([t for t in config.tasks.example_times if t <= steps], dtype=np.int64)
    desc = f"{config.name}: {task}"
    bar = progress_bar(P * steps, desc, "img-step", enabled=progress, unit_scale=True)
    rec = _Recorder(emb, clean_all, mean_img, steps, n_ex, ex_times, bar)
    periods = np.zeros(P, dtype=np.int64)
    for start in range(0, P, chunk_size):
        sl = slice(start, min(start + chunk_size, P))
        mask = None if mask_all is None else mask_all[sl]
        rec.start(sl, None if pmask_all is None else pmask_all[sl], x0_all[sl])
        run_dynamics(config, J, x0_all[sl], mask, steps, rec)
        periods[sl] = _final_periods(rec.last, steps)
    bar.close()
    errs, corr, change, finals, inputs = rec.errs, rec.corr, rec.change, rec.finals, rec.inputs
    examples = rec.examples
    final_mean = finals.mean(axis=0, dtype=np.float64)

    def make_references():
        return references(config, images, task, clean_all, inputs, train_px, pmask_all)

    if reference_cache is None:
        refs = make_references()
    else:
        refs = reference_cache.get(_reference_key(config, task), make_references)
    return TaskEvaluation(
        task=task,
        times=np.arange(steps + 1, dtype=np.int64),
        errors=ReconstructionErrors(**errs),
        mean_image_corr=corr,
        step_change=change,
        final_mean_image=final_mean,
        final_coherence=image_correlation(finals, final_mean),
        final_nearest_corr=_nearest_correlation(finals, train_px),
        final_period=periods,
        examples=examples,
        example_times=ex_times,
        example_index=np.arange(n_ex, dtype=np.int64),
        clean_examples=clean_all[:n_ex],
        references=refs,
        wall_time=time.perf_counter() - t_start,
    )


# ---------------------------------------------------------------------------- files
def _evaluation_attrs(config: ExperimentConfig, ev: TaskEvaluation, n_test: int, arrays) -> dict:
    """The attributes of ``/evaluation/<task>``; ``arrays`` is ``ev.arrays()``, computed once
    by the caller, which writes it too."""
    tasks, dyn = config.tasks, config.dynamics
    attrs = dict(task=ev.task, steps=int(ev.times[-1]), n_test=int(n_test), dynamics=dyn.preset)
    attrs.update(embedding_scale=config.embedding.scale, lam_eval=dyn.lam_eval)
    attrs["wall_time"] = float(ev.wall_time)
    if ev.task == "masked":
        attrs.update(mask_fraction=tasks.mask_fraction, clamp_visible=tasks.clamp_visible)
    else:
        attrs["noise_variance"] = tasks.noise_variance
    attrs["reference_params"] = ev.reference_params()
    summary = summarize_arrays(ev.task, arrays)
    return {**attrs, **{f"summary.{k}": v for k, v in summary.items()}}


def _write(path, config, kind, arrays, attrs, group_attrs, overwrite) -> Path:
    """One file of the pipeline: the arrays, the whole config and every seed."""
    seeds = {s: getattr(config, s).seed for s in ("data", "embedding", "fit", "tasks", "dynamics")}
    options = dict(kind=kind, config=config, seeds=seeds, group_attrs=group_attrs)
    return io.write_file(path, arrays, attrs, overwrite=overwrite, **options)


def _new_file(path, overwrite: bool) -> Path:
    """``path``, refused before any work if it exists (unless ``overwrite``) or its
    directory does not."""
    path = Path(path)
    if not overwrite:
        refuse_existing(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: directory {path.parent} does not exist")
    return path


def read_run(path, kinds=(RUN_KIND, EVALUATION_KIND), *, couplings: bool = False):
    """The file's :class:`~spinsa.io.RunFile` and config; other kinds of file are refused,
    and with ``couplings`` a file without ``/J``."""
    info = io.read(path)  # refuses foreign and broken files with a SpinsaFileError
    if info.kind not in kinds:
        hint = " A reproduce directory keeps each model's run file as fit-<model>.h5 next to it."
        raise ValueError(
            f"{path} is a spinsa file of kind {info.kind!r}; expected a run file (kind "
            f"{RUN_KIND!r}) written by spinsa train or run_experiment."
            + (hint if info.kind == "reproduce" else "")
        )
    if couplings and "J" not in info.datasets:
        raise ValueError(f"{path} holds no couplings /J; give run files from spinsa train")
    return info, ExperimentConfig.from_dict(info.config)


def read_run_config(path) -> ExperimentConfig:
    """The :class:`ExperimentConfig` stored in a run (or evaluation) file."""
    return read_run(path)[1]


def _evaluations(config, J, images, tasks, chunk_size, progress, reference_cache=None):
    """``(arrays, group_attrs)`` of ``/evaluation/<task>`` for every task, in memory."""
    arrays, group_attrs = {}, {}
    for task in tasks:
        ev = evaluate_task(
            config, J, images, task, chunk_size=chunk_size, progress=progress,
            reference_cache=reference_cache,
        )  # fmt: skip
        arrays[f"evaluation/{task}"] = ev_arrays = ev.arrays()
        n_test = images.test.shape[0]
        group_attrs[f"evaluation/{task}"] = _evaluation_attrs(config, ev, n_test, ev_arrays)
    return arrays, group_attrs


def _hebbian_cosine(J: np.ndarray, xi: np.ndarray) -> float:
    """Cosine of J with the Hebbian couplings of the training spins (an order
    parameter, docs/model.md, 'The Hebbian order parameter'; about 1 where the fit is
    essentially Hebbian)."""
    return coupling_cosine(J, hebbian_couplings(xi))


def _fit_and_write(
    config, out_path, overwrite, checkpoint, progress, images, tasks=(), chunk_size=1000
) -> Path:
    """Fit, evaluate ``tasks`` in memory, write the run file at once, drop the checkpoint."""
    if not isinstance(config, ExperimentConfig):
        raise ValueError(f"config must be an ExperimentConfig, got {type(config).__name__}")
    out_path = _new_file(out_path, overwrite)
    if images is None:
        config.check_memory()  # before the data are loaded
        images = load_images(config, test=bool(tasks))
    emb = config.make_embedding()
    xi = emb.encode(images.train)
    fit = fit_pseudolikelihood(xi, config=config.fit, checkpoint=checkpoint, progress=progress)
    mean = emb.pixel_space(images.train).mean(axis=0, dtype=np.float64).astype(np.float32)
    arrays = {"J": fit.J, "fit": {"history": fit.history()}, "data": {"mean_train_image": mean}}
    if fit.factors:  # factorised couplings: J is their expansion
        arrays["fit"]["factors"] = fit.factors
    evaluations, group_attrs = _evaluations(config, fit.J, images, tasks, chunk_size, progress)
    arrays.update(evaluations)
    attrs = {f"fit_{k}": v for k, v in {**fit.convergence(), "loss": fit.loss}.items()}
    attrs["fit_device"] = fit.device
    attrs.update(name=config.name, fit_n_steps=fit.n_steps, n_train=int(images.train.shape[0]))
    attrs.update(fit_initial_loss=float(fit.epoch_loss[0]), fit_wall_time=float(fit.wall_time))
    attrs.update(fit_norm=frobenius_norm(fit.J), hebbian_cosine=_hebbian_cosine(fit.J, xi))
    _write(out_path, config, RUN_KIND, arrays, attrs, group_attrs, overwrite)
    if checkpoint is not None:
        Path(checkpoint).unlink(missing_ok=True)
    return out_path


# ---------------------------------------------------------------------------- stages
def train(
    config: ExperimentConfig,
    out_path,
    *,
    overwrite: bool = False,
    checkpoint=None,
    progress: bool = False,
    images: Images | None = None,
) -> Path:
    """Fit the couplings of ``config`` and write a run file (J, fit history, config).

    Parameters
    ----------
    config : ExperimentConfig
    out_path : str or PathLike
        The run file; refused before the fit if it exists, unless ``overwrite``.
    overwrite, progress : bool
    checkpoint : str or PathLike, optional
        Fit checkpoint, resumed after an interruption and removed once the file is written.
    images : Images, optional
        Already loaded images (default: :func:`load_images`).

    Returns
    -------
    Path
    """
    return _fit_and_write(config, out_path, overwrite, checkpoint, progress, images)


def evaluate(
    run_path,
    task: str,
    steps: int | None = None,
    *,
    n_test: int | None = None,
    out=None,
    overwrite: bool = False,
    chunk_size: int = 1000,
    progress: bool = False,
    images: Images | None = None,
    device: str | None = None,
) -> Path:
    """Run a run file's dynamics on a task over the test set; store ``/evaluation/<task>``.

    Parameters
    ----------
    run_path : str or PathLike
        A run file written by :func:`train` or :func:`run_experiment`.
    task : {"masked", "denoise"}
    steps, n_test : int, optional
        T and the number of test images (default: the config's).
    out : str or PathLike, optional
        Write the evaluation to a file of its own (``kind = "evaluation"``).
    overwrite : bool
        Replace an existing evaluation of this task (or an existing ``out`` file).
    chunk_size, progress
        As in :func:`evaluate_task`.
    images : Images, optional
        As in :func:`train`.
    device : str, optional
        Where the dynamics runs (``dynamics.device``: ``"numba"``, ``"cpu"``, ``"cuda"``,
        ``"cuda:<k>"``, ``"auto"``); default: the config's.

    Returns
    -------
    Path
        The file written.
    """
    check_choice(task, "task", TASKS)
    run_path = Path(run_path)
    info, config = read_run(run_path)
    changed = {"data.n_test": n_test, "dynamics.steps": steps, "dynamics.device": device}
    config = config.with_overrides({k: v for k, v in changed.items() if v is not None})
    group = f"evaluation/{task}"
    if out is None and group in info.groups and not overwrite:
        raise FileExistsError(
            f"{run_path} already holds an evaluation of the {task} task; pass overwrite=True "
            "(--overwrite) to replace it"
        )
    if out is not None:
        out = _new_file(out, overwrite)
    J = io.read_array(run_path, "J")
    images = load_images(config) if images is None else images
    ev = evaluate_task(config, J, images, task, chunk_size=chunk_size, progress=progress)
    arrays = ev.arrays()
    attrs = _evaluation_attrs(config, ev, images.test.shape[0], arrays)
    if out is None:
        io.write_group(run_path, group, arrays, attrs, overwrite=overwrite)
        return run_path
    root = {"name": config.name, "run_file": str(run_path)}
    return _write(out, config, EVALUATION_KIND, {group: arrays}, root, {group: attrs}, overwrite)


def _scan_images(config: ExperimentConfig) -> Images:
    """:func:`load_images` of the config, read-only, kept for the next point of a scan."""

    def load():
        images = load_images(config)
        for array in vars(images).values():
            array.setflags(write=False)
        return images

    return _SCAN_IMAGES.get(config.data, load)


def evaluate_fit(
    config: ExperimentConfig,
    fit_path,
    out_path,
    *,
    tasks: tuple[str, ...] = TASKS,
    chunk_size: int = 1000,
    progress: bool = False,
    overwrite: bool = False,
) -> Path:
    """Evaluate the couplings of a fit file with the dynamics and tasks of ``config``.

    The unit of work of a scan point whose fit is shared with other points: the fit file
    (written by :func:`train`) must hold the fit of ``config.training_config()``, and the
    evaluation file written (``kind = "evaluation"``) holds ``/evaluation/<task>`` for every
    task, the fit's :data:`FIT_ATTRS` and the fit file's name (``fit_file``), not J.
    Images and references are kept in memory for the next call with the same data.

    Parameters
    ----------
    config : ExperimentConfig
    fit_path, out_path : str or PathLike
    tasks, chunk_size, progress, overwrite
        As in :func:`run_experiment`.

    Returns
    -------
    Path
        ``out_path``.
    """
    out_path = _new_file(out_path, overwrite)
    info, fitted = read_run(fit_path, kinds=(RUN_KIND,))
    differ = config_differences(fitted.training_config(), config.training_config())
    if differ:
        raise ValueError(
            f"{fit_path} holds a fit of another config (it differs in {', '.join(differ)}); "
            "fit this config's couplings with spinsa train"
        )
    J = io.read_array(fit_path, "J")
    images = _scan_images(config)
    arrays, group_attrs = _evaluations(
        config, J, images, tasks, chunk_size, progress, _SCAN_REFERENCES
    )
    attrs = {k: info.attrs[k] for k in FIT_ATTRS if k in info.attrs}
    attrs.update(name=config.name, fit_file=Path(fit_path).name)
    return _write(out_path, config, EVALUATION_KIND, arrays, attrs, group_attrs, overwrite)


def run_experiment(
    config: ExperimentConfig,
    out_path,
    *,
    progress: bool = False,
    overwrite: bool = False,
    checkpoint=None,
    tasks: tuple[str, ...] = TASKS,
    chunk_size: int = 1000,
) -> Path:
    """Train, evaluate every task and write one run file; deterministic for a given config
    (on one machine and library versions: every draw comes from the config's seeds).

    Parameters
    ----------
    config, out_path, progress, overwrite, checkpoint
        As in :func:`train`.
    tasks : tuple of {"masked", "denoise"}
    chunk_size : int
        Images iterated at once (:func:`evaluate_task`).

    Returns
    -------
    Path
        ``out_path``; its layout: docs/files.md.
    """
    for task in tasks:
        check_choice(task, "tasks[...]", TASKS)
    return _fit_and_write(
        config, out_path, overwrite, checkpoint, progress, None, tasks, chunk_size
    )
