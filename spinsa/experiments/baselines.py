"""The backprop baselines of ``spinsa reproduce``: recycled block and ViT next to the bare SA.

One stage, one file. For each task it trains the recycled block and the ViT
(:mod:`spinsa.baselines`, checkpointed) on the run's training images, evaluates them on the
run's test images with the run's task streams (the same masks when the patch sizes agree),
and measures the texture of the predicted masked patches (the paper's Fig. 2) for them and
for every bare-SA model of the run, recomputed from its couplings at its best t.

Layout of ``baselines.h5``::

    /models/<recycled|vit>/<task>/times                 (T,) int64, 1 .. T
    /models/<recycled|vit>/<task>/{mean,sem}/{all,masked,visible}   (T,) over test images
    /models/<recycled|vit>/<task>/errors/all             (T, P) float32 per image
    /models/<recycled|vit>/<task>/history/{epoch_loss, epoch_seconds, step_loss, step_lr,
                                           step_tau, val_loss}
        attrs: best_t, best_error, best_sem, error_t1, error_T, n_parameters (dict),
               train_seconds, eval_seconds, n_train, n_val, patch, epochs (the cap),
               and the convergence record: converged, epochs_used, max_epochs,
               best_epoch, rel_tol, patience, criterion (docs/convergence.md)
    /patch_variances/{bin_edges, counts, density, mean, median, n_patches}
    /patch_variances/values/<model>                     (K,) one per masked patch
        attrs: models, patch (dict model -> patch side), best_t (dict model -> t)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spinsa import io
from spinsa._checks import check_count
from spinsa._config import config_from_dict, config_to_dict
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
    "BaselinesSpec",
    "run_baselines",
]

BASELINES_NAME = "baselines.h5"
BASELINES_KIND = "reproduce-baselines"
BASELINE_MODELS = ("recycled", "vit")
HISTOGRAMS = ("bin_edges", "counts", "density", "mean", "median", "n_patches")


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
        Seed of the training subset.
    """

    recycled: BaselineConfig = field(default_factory=lambda: BaselineConfig(model="recycled"))
    vit: BaselineConfig = field(default_factory=lambda: BaselineConfig(model="vit"))
    n_train: int | None = None
    T: int = 20
    n_patch_images: int = 1000
    bins: int = 50
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "recycled", _config(self.recycled, "recycled"))
        object.__setattr__(self, "vit", _config(self.vit, "vit"))
        if self.recycled.image_shape != self.vit.image_shape:
            raise ValueError("the recycled block and the ViT must have one image_shape")
        if self.n_train is not None:
            check_count(self.n_train, "n_train", 1)
        for name, minimum in dict(T=1, n_patch_images=1, bins=1, seed=0).items():
            check_count(getattr(self, name), name, minimum)

    def configs(self) -> dict[str, BaselineConfig]:
        """``{"recycled": ..., "vit": ...}``."""
        return {"recycled": self.recycled, "vit": self.vit}

    def to_dict(self) -> dict[str, Any]:
        """Plain types (stored as the stage file's config); :meth:`from_dict` inverts it."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BaselinesSpec:
        return config_from_dict(cls, values)

    @classmethod
    def for_run(cls, config, quick: bool = True) -> BaselinesSpec:
        """The baselines of a :class:`~spinsa.experiments.ReproduceConfig`, with 4x4 patches
        when they tile the images and the run's mask fraction and noise.

        ``quick``: :meth:`BaselineConfig.quick`, one epoch on 3,000 training images, Fig. 2
        on 200 test images; otherwise the paper's recipe (width 128, 100 epochs, batch 256,
        CUDA when present) on every training image, Fig. 2 on 1,000 test images.
        """
        base = config.base
        shape = tuple(base.data.image_shape)
        patch = 4 if shape[0] % 4 == 0 and shape[1] % 4 == 0 else base.embedding.patch
        tasks = base.tasks
        common = dict(image_shape=shape, patch=patch, progress=False)
        common.update(mask_fraction=tasks.mask_fraction, noise_variance=tasks.noise_variance)
        if quick:
            models = (BaselineConfig.quick(model=m, epochs=1, **common) for m in BASELINE_MODELS)
            return cls(*models, n_train=3000, n_patch_images=200)
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
    train = np.asarray(images.train, dtype=np.float32)
    test = np.asarray(images.test, dtype=np.float32)
    if spec.n_train is not None and spec.n_train < train.shape[0]:
        pick = np.random.default_rng(spec.seed).choice(train.shape[0], spec.n_train, False)
        train = train[np.sort(pick)]
    n_var = min(spec.n_patch_images, test.shape[0])

    arrays: dict[str, Any] = {}
    group_attrs: dict[str, dict] = {}
    experiments = config.experiments()
    fig2 = _sa_patch_variances(experiments, images, reproduce_h5, n_var)
    streams = dict(tasks.streams(), index=images.test_index)  # the run's corruptions, checked above
    for model, bc in spec.configs().items():
        for task in TASKS:
            ckpt = ckdir / f"baseline-{model}-{task}.pt"
            group = f"models/{model}/{task}"
            arrays[group], group_attrs[group] = _train_and_evaluate(
                bc.replace(progress=progress), task, train, test, ckpt, spec.T, streams,
                n_var, fig2, say,
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
        {"models": list(BASELINE_MODELS), "sa_models": list(experiments), "T": spec.T},
        kind=BASELINES_KIND,
        config=stage_config(config, spec),
        seeds={"subset": spec.seed, "tasks": tasks.seed},
        group_attrs=group_attrs,
        overwrite=True,
    )
    return out_path


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
    to ``fig2``."""
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
    if task == "masked":
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
