"""Training of the backprop baselines: AdamW, a schedule, checkpoints and resumption.

One optimiser step corrupts a batch of clean training images on the device (:func:`mask_batch`,
:func:`noise_batch`: the pixel-space torch counterparts of :mod:`spinsa.tasks`), runs the
model (the recycled block for τ ~ U{tau_min..tau_max} iterations, the ViT once) and minimises
the mean squared error against the clean images over all pixels.

A seeded ``config.val_fraction`` of the training images (:func:`validation_split`) is held
out: after every epoch the same loss on them, with masks and noise drawn once and τ averaged
over {tau_min..tau_max}, is the validation curve. Training stops by the rule of
:mod:`spinsa._convergence` (``config.rel_tol``, ``config.patience``; ``config.epochs`` is the
cap) and the model returned holds the weights of the epoch of lowest validation loss.

The epochs, checkpoints and exact resumption are those of :func:`spinsa._training.train`:
the initial weights come from ``config.seed``, the order of the images and τ from its CPU
generator, masks and noise from torch's global RNG on the training device (seeded there).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._checks import check_choice, check_count
from spinsa._convergence import Convergence
from spinsa._torch import import_torch, resolve_device
from spinsa._training import read_checkpoint, train
from spinsa.baselines.config import TASKS, BaselineConfig, check_images, resume_neutral
from spinsa.embedding import PatchEmbedding

__all__ = [
    "CHECKPOINT_FORMAT",
    "HISTORY",
    "TrainHistory",
    "load_checkpoint",
    "lr_factor",
    "mask_batch",
    "noise_batch",
    "sample_tau",
    "train_baseline",
    "validation_split",
]

# 3: the validation curve, the stopping rule and the convergence record
CHECKPOINT_FORMAT = "spinsa-baseline/3"


@dataclass(frozen=True, eq=False)
class TrainHistory:
    """What happened during training.

    Attributes
    ----------
    task : {"masked", "denoise"}
    epoch_loss : ndarray, shape (n_epochs,), float64
        Mean training loss (MSE over all pixels) of every epoch done.
    epoch_seconds : ndarray, shape (n_epochs,), float64
        Wall time of every epoch (of the run that did it).
    step_loss : ndarray, shape (n_steps,), float64
        Loss of every optimiser step.
    step_lr : ndarray, shape (n_steps,), float64
        Learning rate used at every step.
    step_tau : ndarray, shape (n_steps,), int64
        Iterations τ of the recycled block at every step (0 for the ViT).
    val_loss : ndarray, shape (n_epochs,) or (0,), float64
        Validation loss after every epoch (empty with ``val_fraction = 0``).
    convergence : spinsa._convergence.Convergence or None
        Whether the stopping rule held, the epochs used and the rule (None only for a
        history built by hand).
    """

    task: str
    epoch_loss: np.ndarray
    epoch_seconds: np.ndarray
    step_loss: np.ndarray
    step_lr: np.ndarray
    step_tau: np.ndarray
    val_loss: np.ndarray = ()
    convergence: Convergence | None = None

    def __post_init__(self) -> None:
        check_choice(self.task, "task", TASKS)
        for name in HISTORY:
            dtype = np.int64 if name == "step_tau" else np.float64
            value = np.array(getattr(self, name), dtype=dtype).reshape(-1)
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        if len(self.epoch_seconds) != len(self.epoch_loss):
            raise ValueError("epoch_loss and epoch_seconds must have one length")
        if not len(self.step_loss) == len(self.step_lr) == len(self.step_tau):
            raise ValueError("step_loss, step_lr and step_tau must have one length")
        if len(self.val_loss) not in (0, len(self.epoch_loss)):
            raise ValueError("val_loss must have one value per epoch, or none")

    @property
    def n_epochs(self) -> int:
        """Epochs done."""
        return len(self.epoch_loss)


#: The array fields of a TrainHistory, as stored in checkpoints and baselines.h5.
HISTORY = ("epoch_loss", "epoch_seconds", "step_loss", "step_lr", "step_tau", "val_loss")


# --------------------------------------------------------------------------- pieces


def sample_tau(generator: Any, tau_min: int = 3, tau_max: int = 7) -> int:
    """τ uniform in {tau_min, ..., tau_max}, drawn from a CPU ``torch.Generator``."""
    torch = import_torch()
    tau_min = check_count(tau_min, "tau_min", 0)
    tau_max = check_count(tau_max, "tau_max", tau_min)
    return int(torch.randint(tau_min, tau_max + 1, (1,), generator=generator))


def lr_factor(config: BaselineConfig, step: int, steps_per_epoch: int) -> float:
    """Learning rate at optimiser step ``step`` (0-based) divided by ``config.lr``.

    Linear warm-up over w = round(warmup_epochs · steps_per_epoch) steps, (s + 1) / w; then
    ``"cosine"``: (1 + cos(π (s - w) / (S - w))) / 2 with S the total number of steps;
    ``"step"``: step_gamma ** floor(s / (step_epochs · steps_per_epoch)); ``"constant"``: 1.
    """
    warmup = int(round(config.warmup_epochs * steps_per_epoch))
    if step < warmup:
        return (step + 1) / warmup
    if config.schedule == "cosine":
        total = config.epochs * steps_per_epoch
        done = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(done, 1.0)))
    if config.schedule == "step":
        return config.step_gamma ** (step // (config.step_epochs * steps_per_epoch))
    return 1.0


def mask_batch(
    clean: Any, n_masked: int, index_map: Any, n_tokens: int, generator: Any
) -> tuple[Any, Any]:
    """Zero ``n_masked`` patches of every image, a uniformly random subset per image.

    Parameters
    ----------
    clean : torch.Tensor, shape (B, H, W)
    n_masked : int
        Patches masked per image, k = :func:`spinsa.tasks.masked_count` (fraction, N).
    index_map : torch.Tensor, shape (H, W), int64, on clean's device
        The token of every pixel (:meth:`spinsa.PatchEmbedding.token_index_map`).
    n_tokens : int
        N (given, not read off ``index_map``, to avoid a device synchronisation).
    generator : torch.Generator on clean's device, or None (torch's global RNG)

    Returns
    -------
    inputs : torch.Tensor, shape (B, H, W)
        ``clean`` with the masked patches set to 0.
    pixel_mask : torch.Tensor, shape (B, H, W), bool
        True at masked pixels.
    """
    torch = import_torch()
    B = clean.shape[0]
    order = torch.rand((B, n_tokens), generator=generator, device=clean.device).argsort(dim=1)
    mask = torch.zeros((B, n_tokens), dtype=torch.bool, device=clean.device)
    pixel_mask = mask.scatter_(1, order[:, :n_masked], True)[:, index_map]
    return clean.masked_fill(pixel_mask, 0.0), pixel_mask


def noise_batch(clean: Any, variance: float, generator: Any) -> Any:
    """Gaussian corruption with every image's mean and variance restored, then clipped.

    y = x + sqrt(variance) z;  y' = m + (y - mean(y)) s / std(y)  (m, s: the clean image's mean
    and population std over its pixels; y' = m where std(y) = 0);  clipped to [0, 1].

    Parameters
    ----------
    clean : torch.Tensor, shape (B, H, W)
    variance : float
    generator : torch.Generator on clean's device, or None (torch's global RNG)

    Returns
    -------
    torch.Tensor, shape (B, H, W)
    """
    torch = import_torch()
    z = torch.randn(clean.shape, generator=generator, device=clean.device, dtype=clean.dtype)
    noisy = clean + math.sqrt(variance) * z
    dims = tuple(range(1, clean.ndim))
    m, s = clean.mean(dim=dims, keepdim=True), clean.std(dim=dims, keepdim=True, correction=0)
    my, sy = noisy.mean(dim=dims, keepdim=True), noisy.std(dim=dims, keepdim=True, correction=0)
    ratio = torch.where(sy > 0, s / sy.clamp_min(torch.finfo(sy.dtype).tiny), 0.0)
    return (m + (noisy - my) * ratio).clamp_(0.0, 1.0)


def validation_split(
    n_images: int, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The indices of the training and the validation images, both sorted.

    ``round(val_fraction · n_images)`` images (at least one when ``val_fraction`` > 0) drawn
    without replacement by ``numpy.random.default_rng(seed)``; the rest train.

    Parameters
    ----------
    n_images : int
    val_fraction : float
        The share of the images kept for validation, in [0, 1).
    seed : int

    Returns
    -------
    train, val : ndarray of int64
        The indices of the training and of the validation images, sorted.

    Raises
    ------
    ValueError
        No image would be left to train on.
    """
    n_images = check_count(n_images, "n_images", 1)
    n_val = max(1, round(val_fraction * n_images)) if val_fraction > 0 else 0
    if n_val >= n_images:
        raise ValueError(
            f"val_fraction = {val_fraction} of {n_images} image(s) leaves none to train on: "
            "give more training images, or val_fraction = 0 (no validation, no convergence)"
        )
    val = np.sort(np.random.default_rng(seed).choice(n_images, n_val, replace=False))
    return np.setdiff1d(np.arange(n_images), val), val


def _validation_inputs(config: BaselineConfig, task: str, clean: Any, index_map: Any) -> Any:
    """The validation images' corrupted inputs, drawn once on the CPU from ``seed + 2``
    (never from the training streams, so that validating changes no training draw)."""
    g = import_torch().Generator().manual_seed(config.seed + 2)
    if task == "masked":
        return mask_batch(clean, config.n_masked, index_map.cpu(), config.n_tokens, g)[0]
    return noise_batch(clean, config.noise_variance, g)


def _validation_loss(model: Any, inputs: Any, clean: Any, taus: range, batch: int) -> float:
    """The training loss on the validation images, averaged over τ in ``taus`` (the recycled
    block; the ViT runs once): (1/|taus|) Σ_τ MSE(model(inputs, τ), clean), float64."""
    torch = import_torch()
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=clean.device)
    with torch.no_grad():
        for i in range(0, len(clean), batch):
            x, y = inputs[i : i + batch], clean[i : i + batch]
            z, done = model.encode(x), 0
            for tau in taus:  # one trajectory serves every τ of the block
                z, done = model.iterate(z, tau - done), tau
                total += (model.decode(z) - y).double().pow(2).sum()
    return float(total) / (clean.numel() * len(taus))


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """Read a baseline checkpoint (:func:`spinsa._training.read_checkpoint`).

    Parameters
    ----------
    path : str or PathLike
        The checkpoint file.
    map_location : str or torch.device
        Where torch puts the tensors it reads, as in ``torch.load``.

    Returns
    -------
    dict
        ``format``, ``config`` (a dict; :meth:`BaselineConfig.from_dict` rebuilds it),
        ``identity`` (``{"task": ...}``), ``epoch`` (epochs done), ``model`` (the last
        weights), ``best_model`` (those of the lowest validation loss, or None),
        ``optimizer``, ``scheduler`` (state dicts), ``history`` (a dict of tensors),
        ``convergence`` (:meth:`spinsa._convergence.Convergence.to_attrs`), ``data`` and the
        RNG states (:func:`spinsa._training.train`).
    """
    return read_checkpoint(path, CHECKPOINT_FORMAT, map_location)


# --------------------------------------------------------------------------- training


def train_baseline(
    config: BaselineConfig,
    images_train,
    task: str,
    *,
    checkpoint: str | os.PathLike | None = None,
    resume: bool = False,
    stop_after: int | None = None,
) -> tuple[Any, TrainHistory]:
    """Train a recycled block or a ViT by backpropagation on one task.

    Parameters
    ----------
    config : BaselineConfig
        Model and recipe.
    images_train : array_like, shape (P, H, W)
        Clean training images in [0, 1]; they are copied to the device once (float32). A
        seeded ``config.val_fraction`` of them is held out for the validation curve
        (:func:`validation_split`).
    task : {"masked", "denoise"}
        Masked prediction (``config.n_masked`` patches zeroed) or denoising (Gaussian noise
        of ``config.noise_variance``).
    checkpoint : path, optional
        Checkpoint file, written every ``config.checkpoint_every`` epochs and at the end.
    resume : bool
        Continue from ``checkpoint`` if it exists (a missing file starts afresh). Without
        ``resume`` an existing checkpoint is an error, so that nothing is overwritten by
        accident. The config (except device, progress, checkpoint_every), the task and the
        training images must be those of the checkpoint.
    stop_after : int, optional
        Stop (after writing the checkpoint) once this many epochs are done in total; a later
        call with ``resume=True`` continues. The schedule still spans ``config.epochs``.

    Returns
    -------
    model : RecycledBlock or ViT
        The trained model in eval mode, on the training device, with the weights of the
        epoch of lowest validation loss (the last weights with ``val_fraction = 0``).
    history : TrainHistory
        Losses, learning rates and τ of every step, loss and time of every epoch, the
        validation curve and the convergence record.

    Raises
    ------
    ValueError
        Bad config, task or images; a checkpoint from another config, task or data set.
    FileExistsError
        ``checkpoint`` exists and ``resume`` is False.
    """
    torch = import_torch()
    from spinsa.baselines.models import build_model

    model = build_model(config)  # checks the config
    check_choice(task, "task", TASKS)
    images = check_images(images_train, config.image_shape, "images_train")
    if checkpoint is not None and Path(checkpoint).exists() and not resume:
        raise FileExistsError(
            f"checkpoint {checkpoint} exists; pass resume=True to continue it, or remove it"
        )
    device = resolve_device(config.device)
    model = model.to(device)
    fit_idx, val_idx = validation_split(len(images), config.val_fraction, config.seed)
    data = torch.from_numpy(images[fit_idx]).to(device)
    grid = PatchEmbedding(image_shape=config.image_shape, patch=config.patch)
    index_map = torch.from_numpy(grid.token_index_map()).to(device)
    steps_per_epoch = math.ceil(len(fit_idx) / config.batch_size)
    recycled, n_masked = config.model == "recycled", config.n_masked
    validate = None
    if len(val_idx):
        val_clean = torch.from_numpy(images[val_idx])
        val_inputs = _validation_inputs(config, task, val_clean, index_map).to(device)
        val_clean = val_clean.to(device)
        taus = range(config.tau_min, config.tau_max + 1) if recycled else range(1, 2)

        def validate():
            return _validation_loss(model, val_inputs, val_clean, taus, config.batch_size)

    def step(idx, generator, history):
        clean = data[idx]
        if task == "masked":  # masks and noise from torch's global RNG on the device
            inputs, _ = mask_batch(clean, n_masked, index_map, grid.n_tokens, None)
        else:
            inputs = noise_batch(clean, config.noise_variance, None)
        tau = sample_tau(generator, config.tau_min, config.tau_max) if recycled else 0
        history["step_tau"].append(tau)
        return torch.nn.functional.mse_loss(model(inputs, tau), clean)

    hist, convergence = train(
        model,
        step,
        config,
        data={"images_train": images[fit_idx], "validation": images[val_idx]},
        identity={"task": task},
        fmt=CHECKPOINT_FORMAT,
        checkpoint=checkpoint,
        neutral=resume_neutral(config),
        stop_after=stop_after,
        lr_factor=lambda s: lr_factor(config, s, steps_per_epoch),
        grad_clip=config.grad_clip,
        validate=validate,
        rel_tol=config.rel_tol,
        patience=config.patience,
        extra_history=("step_tau",),
        desc=f"{config.model} ({task})",
        progress=config.progress,
    )
    return model, TrainHistory(task, **hist, convergence=convergence)
