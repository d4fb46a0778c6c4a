"""Evaluation of the baselines with the harness of the bare self-attention.

The test images are corrupted by :mod:`spinsa.tasks`, each image from its own seeded stream,
exactly as for the spin dynamics (masked patches become zero pixels here, zero spins there),
and :func:`spinsa.tasks.reconstruction_errors` turns the predictions after t = 1..T iterations
into the same error-vs-t curves as for the bare self-attention.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from spinsa._checks import check_choice, check_count
from spinsa._convergence import Convergence
from spinsa._torch import import_torch, resolve_device
from spinsa.baselines.config import TASKS, BaselineConfig, check_images
from spinsa.embedding import PatchEmbedding
from spinsa.tasks import (
    ErrorSummary,
    ReconstructionErrors,
    draw_masks,
    draw_noisy,
    pixel_mask,
    reconstruction_errors,
    summarize,
)

__all__ = [
    "BaselineEvaluation",
    "corrupt_images",
    "evaluate_baseline",
    "load_baseline",
    "predict_trajectory",
]


@dataclass(frozen=True, eq=False)
class BaselineEvaluation:
    """Per-image reconstruction errors of a baseline at every iteration t.

    Attributes
    ----------
    task : {"masked", "denoise"}
    times : ndarray, shape (T,), int64
        The iterations t of the rows of ``errors``: 1..T (0..T with ``include_input``, t = 0
        being the corrupted input itself).
    errors : spinsa.tasks.ReconstructionErrors
        Fields ``all``, ``masked``, ``visible`` of shape (T, P): mean squared pixel error of
        each test image over all / masked / visible pixels (masked and visible are NaN for
        denoising).
    seed : int
        Seed of the corruption.
    """

    task: str
    times: np.ndarray
    errors: ReconstructionErrors
    seed: int

    def __post_init__(self) -> None:
        check_choice(self.task, "task", TASKS)
        times = np.array(self.times, dtype=np.int64).reshape(-1)
        times.setflags(write=False)
        object.__setattr__(self, "times", times)
        errors = self.errors
        if not isinstance(errors, ReconstructionErrors) or errors.all.shape[:-1] != times.shape:
            raise ValueError(f"errors must be ReconstructionErrors of shape (T = {len(times)}, P)")

    def summary(self) -> ErrorSummary:
        """Means over images and standard errors at every t (:func:`spinsa.tasks.summarize`)."""
        return summarize(self.errors)


def corrupt_images(
    images,
    task: str,
    patch: int,
    seed: int = 0,
    *,
    index=None,
    mask_fraction: float = 0.3,
    noise_variance: float = 0.7,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Corrupted test images, drawn by :mod:`spinsa.tasks` as for the bare self-attention.

    Parameters
    ----------
    images : array_like, shape (P, H, W)
        Clean images in [0, 1].
    task : {"masked", "denoise"}
    patch : int
        Patch side: the masked task zeroes whole patches.
    seed : int
        Seed of the task streams (:func:`spinsa.tasks.task_inputs`).
    index : array_like of int, shape (P,), optional
        The images' numbers in their split (default 0..P-1): image k gets the mask or noise
        it gets in the bare self-attention's evaluation.
    mask_fraction, noise_variance : float
        0.3 and 0.7 in the paper.

    Returns
    -------
    inputs : ndarray, shape (P, H, W), float32
        Masked patches set to 0, or the noisy images.
    pixel_mask : ndarray, shape (P, H, W), bool, or None
        True at masked pixels (None for denoising).
    """
    check_choice(task, "task", TASKS)
    images = np.asarray(images)
    if images.ndim != 3:
        raise ValueError(f"images must have shape (P, H, W), got {images.shape}")
    grid = PatchEmbedding(image_shape=images.shape[1:], patch=patch)
    images = check_images(images, grid.image_shape)
    index = np.arange(images.shape[0]) if index is None else index
    if task == "denoise":
        return draw_noisy(images, index, noise_variance, seed).astype(np.float32), None
    pm = pixel_mask(draw_masks(index, grid.n_tokens, mask_fraction, seed), grid)
    return np.where(pm, np.float32(0), images), pm


def predict_trajectory(model: Any, inputs, n_steps: int, *, batch_size: int = 512) -> np.ndarray:
    """Predicted images after t = 1..T iterations of a baseline.

    Parameters
    ----------
    model : RecycledBlock or ViT
        On any device; run in eval mode without gradients.
    inputs : array_like, shape (P, H, W)
        Corrupted images in [0, 1] (:func:`corrupt_images`).
    n_steps : int
        T >= 1.
    batch_size : int
        Images per forward pass.

    Returns
    -------
    ndarray, shape (T, P, H, W), float32
        ``out[t - 1]`` = prediction after t iterations, clipped to [0, 1]; the same for every
        t for the ViT.
    """
    from spinsa.baselines.models import check_model

    torch = import_torch()
    model, n_steps = check_model(model), check_count(n_steps, "n_steps", 1)
    batch_size = check_count(batch_size, "batch_size", 1)
    inputs = check_images(inputs, model.image_shape, "inputs")
    out = np.empty((n_steps, *inputs.shape), dtype=np.float32)
    device, was_training = next(model.parameters()).device, model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, inputs.shape[0], batch_size):
                x = torch.from_numpy(inputs[start : start + batch_size]).to(device)
                out[:, start : start + batch_size] = model.trajectory(x, n_steps).cpu().numpy()
    finally:
        model.train(was_training)
    return out


def evaluate_baseline(
    model: Any,
    images_test,
    task: str,
    T: int = 20,
    seed: int = 0,
    *,
    index=None,
    mask_fraction: float = 0.3,
    noise_variance: float = 0.7,
    include_input: bool = False,
    batch_size: int = 512,
) -> BaselineEvaluation:
    """Error-vs-t curves of a baseline on test images, per image.

    The images are corrupted by :func:`corrupt_images` (seeded), the model iterates T times
    (:func:`predict_trajectory`) and :func:`spinsa.tasks.reconstruction_errors` compares every
    prediction with the clean image, over all pixels and, for the masked task, over the
    masked and the visible pixels.

    Parameters
    ----------
    model : RecycledBlock or ViT
    images_test : array_like, shape (P, H, W)
        Clean test images in [0, 1].
    task : {"masked", "denoise"}
    T : int
        Iterations (>= 1; 20 or more for the paper's plots).
    seed : int
        Seed of the masks / noise (:func:`corrupt_images`).
    index : array_like of int, shape (P,), optional
        The test images' numbers in their split (default 0..P-1).
    mask_fraction, noise_variance : float
        Task parameters (0.3, 0.7).
    include_input : bool
        Prepend t = 0 with the corrupted input itself as the prediction.
    batch_size : int
        Images per forward pass; errors are accumulated batch by batch, so memory stays
        O(T · batch_size · H · W).

    Returns
    -------
    BaselineEvaluation
        ``errors`` fields of shape (T, P) (T + 1 with ``include_input``); ``summary()`` gives
        means and standard errors over images.
    """
    from spinsa.baselines.models import check_model

    model, T = check_model(model), check_count(T, "T", 1)
    batch_size = check_count(batch_size, "batch_size", 1)
    images = check_images(images_test, model.image_shape, "images_test")
    inputs, pm = corrupt_images(
        images,
        task,
        model.patch,
        seed,
        index=index,
        mask_fraction=mask_fraction,
        noise_variance=noise_variance,
    )
    parts = []
    for start in range(0, images.shape[0], batch_size):
        sl = slice(start, start + batch_size)
        decoded = predict_trajectory(model, inputs[sl], T, batch_size=batch_size)
        if include_input:
            decoded = np.concatenate([inputs[None, sl], decoded])
        parts.append(reconstruction_errors(decoded, images[sl], None if pm is None else pm[sl]))
    fields = ("all", "masked", "visible")
    errors = [np.concatenate([getattr(p, k) for p in parts], axis=1) for k in fields]
    times = np.arange(0 if include_input else 1, T + 1)
    return BaselineEvaluation(task, times, ReconstructionErrors(*errors), int(seed))


def load_baseline(
    path: str | os.PathLike, device: str = "cpu"
) -> tuple[Any, BaselineConfig, str, Any]:
    """A trained baseline from its checkpoint.

    Parameters
    ----------
    path : path
        A checkpoint written by :func:`spinsa.baselines.train_baseline`.
    device : str
        Where to put the model ("cpu", "cuda", "auto").

    Returns
    -------
    model : RecycledBlock or ViT, in eval mode
        With the weights of the epoch of lowest validation loss (the last ones without a
        validation set), as :func:`~spinsa.baselines.train_baseline` returns it.
    config : BaselineConfig
    task : str
    history : TrainHistory
    """
    from spinsa.baselines.models import build_model
    from spinsa.baselines.train import TrainHistory, load_checkpoint

    dev = resolve_device(device)
    ckpt = load_checkpoint(path, map_location=dev)
    config = BaselineConfig.from_dict(ckpt["config"])
    model = build_model(config).to(dev)
    # the weights train_baseline returns: those of the lowest validation loss, if any
    best = ckpt["best_model"]
    model.load_state_dict(ckpt["model"] if best is None else best)
    model.eval()
    task = ckpt["identity"]["task"]
    history = TrainHistory(
        task,
        **{k: v.tolist() for k, v in ckpt["history"].items()},
        convergence=Convergence.from_attrs(ckpt["convergence"]),
    )
    return model, config, task, history
