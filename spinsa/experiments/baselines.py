"""The backprop baselines of ``spinsa reproduce``: recycled block and ViT next to the bare SA.

One stage, one file. For each task it trains the recycled block and the ViT
(:mod:`spinsa.baselines`, checkpointed) on the run's training images, evaluates them on the
run's test images with the run's task streams (the same masks when the patch sizes agree),
and measures the texture of the predicted masked patches (the paper's Fig. 2) for them and
for every bare-SA model of the run, recomputed from its couplings at its best t.

Layout of ``baselines.h5`` (root attributes: models, sa_models, T, patch_models, wall_time)::

    /models/<recycled|vit>/<task>/times                 (T,) int64, 1 .. T
    /models/<recycled|vit>/<task>/{mean,sem}/{all,masked,visible}   (T,) over test images
    /models/<recycled|vit>/<task>/errors/all             (T, P) float32 per image
    /models/<recycled|vit>/<task>/history/{epoch_loss, epoch_seconds, step_loss, step_lr,
                                           step_tau, val_loss}
        attrs: best_t, best_error, best_sem, error_t1, error_T, n_parameters (dict),
               train_seconds, eval_seconds, n_train, n_val, patch, epochs (the cap),
               and the convergence record: converged, epochs_used, max_epochs,
               best_epoch, rel_tol, patience, criterion (docs/convergence.md)
    /models/recycled_<p>x<p>/masked                     the same, for the block at another
        patch size (the patch-size claim; ``BaselinesSpec.patch_study``)
    /patch_variances/{bin_edges, counts, density, mean, median, n_patches}
    /patch_variances/values/<model>                     (K,) one per masked patch
        attrs: models, patch (dict model -> patch side), best_t (dict model -> t)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spinsa import io
from spinsa._checks import check_choice, check_count
from spinsa._config import config_from_dict, config_to_dict
from spinsa._files import atomic_path
from spinsa.analysis.patches import masked_patch_variances, patch_pixels, patch_variance_histograms
from spinsa.analysis.summary import best_time, read_summaries
from spinsa.baselines.config import BaselineConfig
from spinsa.baselines.train import HISTORY, validation_split
from spinsa.experiments.pipeline import PIXELS, state_at
from spinsa.tasks import TASKS

__all__ = [
    "BASELINES_KIND",
    "BASELINES_NAME",
    "BASELINE_MODELS",
    "BASELINE_RECIPES",
    "BaselinesSpec",
    "run_baselines",
]

BASELINES_NAME = "baselines.h5"
BASELINES_KIND = "reproduce-baselines"
BASELINE_MODELS = ("recycled", "vit")
BASELINE_RECIPES = ("quick", "cpu", "paper")
HISTOGRAMS = ("bin_edges", "counts", "density", "mean", "median", "n_patches")

# The CPU recipe, chosen by measurement on 2 cores (docs/convergence.md, "The CPU recipe"):
# width 64 trains at about 520 images/s per process with one torch thread, two processes
# side by side; a constant learning rate after the warm-up lets the stopping rule, not the
# cap, end training.
CPU_RECIPE = dict(
    width=64,
    heads=4,
    batch_size=128,
    lr=1e-3,
    schedule="constant",
    warmup_epochs=1.0,
    epochs=100,
    device="cpu",
)

# Seconds of one training image-epoch on 4x4 patches, by width: one torch thread, two
# trainings side by side (width 128: the paper's recipe on two threads), measured on 2 cores;
# times (N / 49) ** 1.25 for N tokens (2x2 patches: 5.5x, measured).
_IMAGE_EPOCH_WIDTHS = (32, 64, 96, 128)
_IMAGE_EPOCH_SECONDS = (1.1e-3, 1.9e-3, 3.3e-3, 3.6e-3)


def _training_seconds(bc: BaselineConfig, n_images: int) -> float:
    """The most seconds one training of ``bc`` on ``n_images`` images takes on a 2-core CPU:
    every epoch up to the cap (the stopping rule usually ends it sooner)."""
    per = np.interp(bc.width, _IMAGE_EPOCH_WIDTHS, _IMAGE_EPOCH_SECONDS)
    return bc.epochs * n_images * (1 - bc.val_fraction) * per * (bc.n_tokens / 49) ** 1.25


def _config(value: Any, model: str) -> BaselineConfig:
    if isinstance(value, dict):
        value = BaselineConfig.from_dict(value)
    if not isinstance(value, BaselineConfig):
        raise ValueError(f"{model} must be a BaselineConfig, got {type(value).__name__}")
    if value.model != model:
        raise ValueError(f"the {model} config has model = {value.model!r}")
    return value.replace(progress=False)


@dataclass(frozen=True)
class BaselinesSpec:
    """What the baselines stage trains and measures.

    Parameters
    ----------
    recycled, vit : BaselineConfig
        The recipes (``model`` must match; ``progress`` is stored as False).
    n_train : int or None
        Train on a seeded random subset of this many training images (None: all).
    T : int
        Iterations of the evaluation, t = 1..T (the ViT is constant in t).
    n_patch_images, bins : int
        Test images whose masked patches enter Fig. 2, and bins of its histograms.
    seed : int
        Seed of the training subsets.
    patch_study : BaselineConfig, optional
        The recycled block at another patch size, trained and evaluated on the masked task
        only, for the paper's claim that the block works best with 4x4 patches; stored as
        ``recycled_<p>x<p>``.
    patch_study_n_train : int or None
        Its training images, a seeded subset (None: those of the other models). The block
        at ``recycled.patch`` is trained on the same subset too (``recycled_<p>x<p>`` of
        that patch), so that both patch sizes have one budget.
    workers : int
        Trainings run side by side, each in its own process with one torch thread (2 on a
        2-core machine: small models gain little from a second thread). 1 trains in this
        process, with torch's threads as they are.
    """

    recycled: BaselineConfig = field(default_factory=lambda: BaselineConfig(model="recycled"))
    vit: BaselineConfig = field(default_factory=lambda: BaselineConfig(model="vit"))
    n_train: int | None = None
    T: int = 20
    n_patch_images: int = 1000
    bins: int = 50
    seed: int = 0
    patch_study: BaselineConfig | None = None
    patch_study_n_train: int | None = None
    workers: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "recycled", _config(self.recycled, "recycled"))
        object.__setattr__(self, "vit", _config(self.vit, "vit"))
        if self.recycled.image_shape != self.vit.image_shape:
            raise ValueError("the recycled block and the ViT must have one image_shape")
        for name in ("n_train", "patch_study_n_train"):
            if getattr(self, name) is not None:
                check_count(getattr(self, name), name, 1)
        for name, minimum in dict(T=1, n_patch_images=1, bins=1, seed=0, workers=1).items():
            check_count(getattr(self, name), name, minimum)
        if self.patch_study is not None:
            study = _config(self.patch_study, "recycled")
            if study.image_shape != self.recycled.image_shape:
                raise ValueError("patch_study must have the recycled block's image_shape")
            if study.patch == self.recycled.patch:
                raise ValueError(
                    f"patch_study must use another patch size than the block's "
                    f"{self.recycled.patch}, got {study.patch}"
                )
            object.__setattr__(self, "patch_study", study)

    def configs(self) -> dict[str, BaselineConfig]:
        """``{"recycled": ..., "vit": ...}``."""
        return {"recycled": self.recycled, "vit": self.vit}

    def patch_models(self) -> dict[str, BaselineConfig]:
        """The patch study's blocks, ``{"recycled_<p>x<p>": config}`` for both patch sizes
        (empty without ``patch_study``); trained on the masked task only."""
        if self.patch_study is None:
            return {}
        blocks = (self.recycled, self.patch_study)
        return {f"recycled_{bc.patch}x{bc.patch}": bc for bc in blocks}

    def to_dict(self) -> dict[str, Any]:
        """Plain types (stored as the stage file's config); :meth:`from_dict` inverts it."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BaselinesSpec:
        return config_from_dict(cls, values)

    @classmethod
    def for_run(cls, config, recipe: str = "quick") -> BaselinesSpec:
        """The baselines of a :class:`~spinsa.experiments.ReproduceConfig`, with 4x4 patches
        when they tile the images and the run's mask fraction and noise.

        Every recipe trains until the stopping rule holds (docs/convergence.md), ``epochs``
        being only the cap:

        - ``"quick"``: :meth:`BaselineConfig.quick` (width 32) on 3,000 training images, a
          constant learning rate, at most 200 epochs, two trainings side by side; Fig. 2 on
          200 test images. About 5 minutes on 2 cores (the rule held after 57 to 82 epochs).
        - ``"cpu"``: the CPU recipe chosen by measurement (width 64, 4 heads, batch 128,
          constant learning rate 1e-3 after one epoch of warm-up, at most 100 epochs) on a
          seeded subset of 20,000 training images, two trainings side by side; the patch
          study trains the block on 2x2 and on 4x4 patches on 5,000 images; Fig. 2 on
          1,000 test images. About 2 hours on 2 cores; the plan's estimate, every
          training at its cap, is 2.8.
        - ``"paper"``: the paper's recipe (width 128, 100 epochs, batch 256, CUDA when
          present) on every training image, Fig. 2 on 1,000 test images; hours per model and
          task on a CPU, meant for a GPU.
        """
        check_choice(recipe, "recipe", BASELINE_RECIPES)
        base = config.base
        shape = tuple(base.data.image_shape)
        patch = 4 if shape[0] % 4 == 0 and shape[1] % 4 == 0 else base.embedding.patch
        tasks = base.tasks
        common = dict(image_shape=shape, patch=patch, progress=False)
        common.update(mask_fraction=tasks.mask_fraction, noise_variance=tasks.noise_variance)
        if recipe == "quick":
            models = (
                BaselineConfig.quick(model=m, epochs=200, schedule="constant", **common)
                for m in BASELINE_MODELS
            )
            return cls(*models, n_train=3000, n_patch_images=200, workers=2)
        if recipe == "cpu":
            recycled, vit = (
                BaselineConfig(model=m, **common, **CPU_RECIPE) for m in BASELINE_MODELS
            )
            study = (
                recycled.replace(patch=2)
                if patch != 2 and shape[0] % 2 == 0 == shape[1] % 2
                else None
            )
            return cls(
                recycled,
                vit,
                n_train=20_000,
                n_patch_images=1000,
                patch_study=study,
                patch_study_n_train=5000,
                workers=2,
            )
        common.update(epochs=100, batch_size=256, device="auto")
        models = (BaselineConfig(model=m, **common) for m in BASELINE_MODELS)
        return cls(*models, n_train=None, n_patch_images=1000)


# ---------------------------------------------------------------------------- the stage
def _token_mask(pixel_mask: np.ndarray, patch: int) -> np.ndarray:
    return patch_pixels(pixel_mask.astype(np.float64), patch).min(axis=-1) > 0.5


def run_baselines(
    out_path,
    config,
    spec: BaselinesSpec,
    images,
    reproduce_h5,
    *,
    checkpoint_dir=None,
    progress: bool = False,
    log=None,
) -> Path:
    """Train, evaluate and measure the baselines; write ``baselines.h5`` atomically.

    Parameters
    ----------
    out_path : str or PathLike
        The file to write (replaced if present).
    config : ReproduceConfig
    spec : BaselinesSpec
    images : spinsa.experiments.pipeline.Images
        The run's images: ``train`` (P, H, W) and ``test`` (Q, H, W) in [0, 1].
    reproduce_h5 : str or PathLike
        The run's ``reproduce.h5`` (couplings and error curves of the bare SA).
    checkpoint_dir : str or PathLike, optional
        Where the checkpoints ``baseline-<model>-<task>.pt`` go and are resumed from
        (default: next to ``out_path``).
    progress : bool
    log : callable, optional
        Receives one line per model and task.

    Returns
    -------
    Path
    """
    if not isinstance(spec, BaselinesSpec):
        raise ValueError(f"spec must be a BaselinesSpec, got {type(spec).__name__}")
    say = log or (lambda message: None)
    start = time.perf_counter()
    out_path = Path(out_path)
    ckdir = Path(checkpoint_dir) if checkpoint_dir is not None else out_path.parent
    tasks = config.base.tasks
    for name, bc in spec.configs().items():
        if (bc.mask_fraction, bc.noise_variance) != (tasks.mask_fraction, tasks.noise_variance):
            raise ValueError(
                f"the {name} baseline must use the run's mask fraction and noise variance "
                f"({tasks.mask_fraction}, {tasks.noise_variance}), got "
                f"({bc.mask_fraction}, {bc.noise_variance})"
            )
    all_train = np.asarray(images.train, dtype=np.float32)
    test = np.asarray(images.test, dtype=np.float32)
    train = _subset(all_train, spec.n_train, spec.seed)
    study_train = train
    if spec.patch_study_n_train not in (None, spec.n_train):
        study_train = _subset(all_train, spec.patch_study_n_train, spec.seed)
    n_var = min(spec.n_patch_images, test.shape[0])
    jobs = [(model, bc, task, train) for model, bc in spec.configs().items() for task in TASKS]
    jobs += [(model, bc, "masked", study_train) for model, bc in spec.patch_models().items()]
    jobs.sort(key=lambda job: -_training_seconds(job[1], len(job[3])))  # two finish together
    jobs = [(*job, ckdir / f"baseline-{job[0]}-{job[2]}.pt") for job in jobs]
    _train_side_by_side(jobs, spec.workers, say)

    arrays: dict[str, Any] = {}
    group_attrs: dict[str, dict] = {}
    experiments = config.experiments()
    fig2 = _sa_patch_variances(experiments, images, reproduce_h5, n_var)
    streams = dict(tasks.streams(), index=images.test_index)  # the run's corruptions, checked above
    for model, bc, task, subset, ckpt in jobs:
        group = f"models/{model}/{task}"
        arrays[group], group_attrs[group] = _train_and_evaluate(
            bc.replace(progress=progress), task, subset, test, ckpt, spec.T, streams,
            n_var, fig2 if model in BASELINE_MODELS else None, say,
        )  # fmt: skip
    order = [*experiments, *BASELINE_MODELS, "clean"]
    hists = patch_variance_histograms({m: fig2[m][0] for m in order}, bins=spec.bins)
    arrays["patch_variances"] = {k: getattr(hists, k) for k in HISTOGRAMS}
    arrays["patch_variances"]["values"] = {m: fig2[m][0].variance for m in order}
    group_attrs["patch_variances"] = {
        "models": order,
        "patch": {m: int(fig2[m][1]) for m in order},
        "best_t": {m: int(fig2[m][2]) for m in order},
        "n_images": int(n_var),
    }
    io.write_file(
        out_path,
        arrays,
        {
            "models": list(BASELINE_MODELS),
            "sa_models": list(experiments),
            "T": spec.T,
            "patch_models": list(spec.patch_models()),
            "wall_time": time.perf_counter() - start,  # of this call (a resumed one: its own)
        },
        kind=BASELINES_KIND,
        config=stage_config(config, spec),
        seeds={"subset": spec.seed, "tasks": tasks.seed},
        group_attrs=group_attrs,
        overwrite=True,
    )
    return out_path


def _subset(images: np.ndarray, n: int | None, seed: int) -> np.ndarray:
    """A seeded random subset of ``n`` images, in their order (all of them when None)."""
    if n is None or n >= images.shape[0]:
        return images
    return images[np.sort(np.random.default_rng(seed).choice(images.shape[0], n, False))]


_WORKER = "import sys; from spinsa.experiments.baselines import _train_one; _train_one(sys.argv[1])"


def _train_one(job) -> None:
    """Train the baseline of a job file (written by :func:`_train_side_by_side`) to its end
    with one torch thread, in a process of its own; the result is its checkpoint."""
    from spinsa._torch import import_torch
    from spinsa.baselines import train_baseline

    import_torch().set_num_threads(1)
    with np.load(job, allow_pickle=False) as f:
        config = BaselineConfig.from_dict(json.loads(str(f["config"])))
        task, ckpt, images = str(f["task"]), Path(str(f["checkpoint"])), f["images"]
    _, history = train_baseline(config, images, task, checkpoint=ckpt, resume=True)
    minutes = np.sum(history.epoch_seconds) / 60
    print(f"  trained {ckpt.name}: {history.convergence.describe()} ({minutes:.1f} min)")


def _train_side_by_side(jobs, workers: int, say) -> None:
    """Train the jobs ``(model, config, task, images, checkpoint)``, ``workers`` at a time, each in
    a new Python process (no fork of this process's threads, and no import of the caller's
    script, as multiprocessing would do);
    a finished checkpoint returns at once. With one worker nothing is done here:
    :func:`_train_and_evaluate` trains in this process."""
    if workers < 2 or len(jobs) < 2:
        return

    def run(index: int) -> str:
        _, config, task, images, ckpt = jobs[index]
        job = ckpt.with_name(f"{ckpt.stem}.job.npz")
        with atomic_path(job) as tmp, open(tmp, "wb") as f:
            np.savez(
                f,
                config=json.dumps(config.replace(progress=False).to_dict()),
                task=task,
                checkpoint=str(ckpt.resolve()),
                images=images,
            )
        command = [sys.executable, "-c", _WORKER, str(job)]
        done = subprocess.run(command, capture_output=True, text=True)
        job.unlink(missing_ok=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"training {ckpt.name} failed (exit status {done.returncode}):\n"
                + done.stderr[-3000:]
            )
        return done.stdout.strip()

    with ThreadPoolExecutor(min(workers, len(jobs))) as pool:
        for line in pool.map(run, range(len(jobs))):
            say(line)


def _sa_patch_variances(experiments, images, reproduce_h5, n_var: int) -> dict[str, tuple]:
    """``model -> (patch variances, patch, t)`` of every bare-SA model: its predictions of
    the first ``n_var`` masked test images at its best t, from its couplings."""
    fig2 = {}
    for name, exp in experiments.items():
        best_t = int(read_summaries(reproduce_h5, name, tasks=("masked",))["masked"]["best_t"])
        emb = exp.make_embedding()
        x0, mask = exp.tasks.inputs("masked", emb, images.test[:n_var], images.test_index[:n_var])
        x = state_at(exp, io.read_array(reproduce_h5, f"models/{name}/J"), x0, mask, best_t)
        variances = masked_patch_variances(emb.decode_pixels(x), mask, exp.embedding.patch)
        fig2[name] = (variances, exp.embedding.patch, best_t)
    return fig2


def _train_and_evaluate(bc, task, train, test, ckpt, T, streams, n_var, fig2, say):
    """Train (or resume) one baseline on one task and evaluate it; returns the arrays and
    attributes of its group, and adds its masked-patch variances (and the clean images')
    to ``fig2`` (unless None)."""
    from spinsa.baselines import (
        corrupt_images,
        count_parameters,
        evaluate_baseline,
        predict_trajectory,
        train_baseline,
    )

    t0 = time.perf_counter()
    net, hist = train_baseline(bc, train, task, checkpoint=ckpt, resume=True)
    t1 = time.perf_counter()
    convergence = hist.convergence
    ev = evaluate_baseline(net, test, task, T=T, **streams)
    summary = ev.summary()
    mean = np.asarray(summary.mean.all, dtype=np.float64)
    sem = np.asarray(summary.sem.all, dtype=np.float64)
    b = best_time(mean)  # an index into times, which start at t = 1
    best_t = int(ev.times[b])
    if task == "masked" and fig2 is not None:
        inputs, pm = corrupt_images(test, task, bc.patch, **streams)
        pred = predict_trajectory(net, inputs[:n_var], best_t)[best_t - 1]
        mask = _token_mask(pm[:n_var], bc.patch)
        fig2[bc.model] = (masked_patch_variances(pred, mask, bc.patch), bc.patch, best_t)
        if "clean" not in fig2:
            fig2["clean"] = (masked_patch_variances(test[:n_var], mask, bc.patch), bc.patch, 0)
    t2 = time.perf_counter()
    arrays = {
        "times": ev.times,
        "mean": {k: np.asarray(getattr(summary.mean, k)) for k in PIXELS},
        "sem": {k: np.asarray(getattr(summary.sem, k)) for k in PIXELS},
        "errors": {"all": ev.errors.all.astype(np.float32)},
        "history": {k: getattr(hist, k) for k in HISTORY},
    }
    attrs = {
        "best_t": best_t,
        "best_error": float(mean[b]),
        "best_sem": float(sem[b]),
        "error_t1": float(mean[0]),
        "error_T": float(mean[-1]),
        "n_parameters": count_parameters(net),
        "train_seconds": float(np.sum(hist.epoch_seconds)),
        "train_call_seconds": t1 - t0,
        "eval_seconds": t2 - t1,
        "n_train": int(train.shape[0]),
        "n_val": len(validation_split(len(train), bc.val_fraction, bc.seed)[1]),
        "n_test": int(test.shape[0]),
        "patch": bc.patch,
        "epochs": bc.epochs,
        **convergence.to_attrs(),
    }
    say(
        f"  {bc.model} / {task}: best t = {best_t}, error {mean[b]:.4f}; "
        f"train {t1 - t0:.1f} s, evaluate {t2 - t1:.1f} s; {convergence.describe()}"
    )
    return arrays, attrs


def stage_config(config, spec: BaselinesSpec) -> dict[str, Any]:
    """What ``baselines.h5`` stores as its config (a finished stage must match it)."""
    base = config.base.to_dict()
    return {"baselines": spec.to_dict(), "data": base["data"], "tasks": base["tasks"]}
