"""Training of the backprop baselines: AdamW, a schedule, checkpoints and resumption.

One optimiser step corrupts a batch of clean training images on the device (:func:`mask_batch`,
:func:`noise_batch`: the pixel-space torch counterparts of :mod:`spinsa.tasks`), runs the
model (the recycled block for τ ~ U{tau_min..tau_max} iterations, the ViT once) and minimises
the mean squared error against the clean images over all pixels.

Reproducibility: the initial weights come from ``config.seed``; the order of the images and τ
from a CPU ``torch.Generator``, masks and noise from one on the training device, both seeded
from ``config.seed`` and saved in every checkpoint with the model, optimiser, schedule and
history. A run interrupted after any checkpoint and resumed ends with the weights of an
uninterrupted run (bit for bit on the CPU). Checkpoints are written through
:func:`spinsa._files.atomic_path` (never a truncated file), hold tensors and plain values only
and are read back with ``weights_only=True``.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
import warnings
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._checks import check_choice, check_count
from spinsa._files import atomic_path
from spinsa._progress import progress
from spinsa._torch import import_torch, resolve_device
from spinsa.baselines.config import RESUME_NEUTRAL, TASKS, BaselineConfig, check_images
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
]

CHECKPOINT_FORMAT = "spinsa-baseline/1"


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
    """

    task: str
    epoch_loss: np.ndarray
    epoch_seconds: np.ndarray
    step_loss: np.ndarray
    step_lr: np.ndarray
    step_tau: np.ndarray

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

    @property
    def n_epochs(self) -> int:
        """Epochs done."""
        return len(self.epoch_loss)


#: The array fields of a TrainHistory, as stored in checkpoints and baselines.h5.
HISTORY = tuple(f.name for f in fields(TrainHistory) if f.name != "task")


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
    generator : torch.Generator on clean's device

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
    generator : torch.Generator on clean's device

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


def read_checkpoint(path, fmt: str, what: str, map_location: Any = "cpu") -> dict[str, Any]:
    """A torch checkpoint of format ``fmt`` (tensors and plain values only:
    ``weights_only=True``), its records' CRC-32 checked first (torch.load does not).

    Raises
    ------
    FileNotFoundError, ValueError
        No file, or a file that is not a spinsa ``what`` checkpoint.
    spinsa.io.SpinsaFileError
        A record's CRC-32 fails: bytes changed after the file was written.
    """
    from spinsa.io import SpinsaFileError

    torch = import_torch()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    with contextlib.suppress(zipfile.BadZipFile):  # not a zip: torch.load says what it is
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
        if bad is not None:
            raise SpinsaFileError(
                f"{path}: the CRC-32 of its record {bad} fails: bytes changed after it was "
                "written (a disk or copy error). Delete it and train again, or copy it again.",
                "corrupt",
            )
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - re-raised with the path
        raise ValueError(f"{path} is not a readable {what} checkpoint: {exc}") from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != fmt:
        raise ValueError(f"{path} is not a spinsa {what} checkpoint ({fmt})")
    return ckpt


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """Read a baseline checkpoint (:func:`read_checkpoint`).

    Returns
    -------
    dict
        ``format``, ``config`` (a dict; :meth:`BaselineConfig.from_dict` rebuilds it), ``task``,
        ``epoch`` (epochs done), ``model``, ``optimizer``, ``scheduler`` (state dicts),
        ``rng_cpu``, ``rng_device``, ``device_type``, ``history`` (a dict of tensors) and
        ``data`` (shape and sha256 of the training images).
    """
    return read_checkpoint(path, CHECKPOINT_FORMAT, "baseline", map_location)


def check_same_config(path, saved: dict, now: dict, neutral=()) -> None:
    """A ValueError naming every option (but ``neutral``) where a checkpoint's config
    ``saved`` differs from ``now``."""
    diffs = [
        f"{key}: checkpoint {saved.get(key)!r}, now {now[key]!r}"
        for key in now
        if key not in neutral and saved.get(key) != now[key]
    ]
    if diffs:
        raise ValueError(f"checkpoint {path} was written with another config: " + "; ".join(diffs))


def _check_resumable(ckpt: dict, path: Path, config: BaselineConfig, task: str, sha256: str):
    """A ValueError unless the checkpoint has this config (but RESUME_NEUTRAL), task, images."""
    check_same_config(path, ckpt["config"], config.to_dict(), RESUME_NEUTRAL)
    if ckpt["task"] != task:
        raise ValueError(f"checkpoint {path} is for task {ckpt['task']!r}, not {task!r}")
    if ckpt["data"]["sha256"] != sha256:
        raise ValueError(
            f"checkpoint {path} was trained on other images (shape "
            f"{tuple(ckpt['data']['shape'])}); pass the same images_train to resume"
        )


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
        Clean training images in [0, 1]; they are copied to the device once (float32).
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
        The trained model in eval mode, on the training device.
    history : TrainHistory
        Losses, learning rates and τ of every step, loss and time of every epoch.

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
    end_epoch = config.epochs
    if stop_after is not None:
        end_epoch = min(end_epoch, check_count(stop_after, "stop_after", 1))
    path = Path(checkpoint) if checkpoint is not None else None
    device = resolve_device(config.device)
    steps_per_epoch = math.ceil(images.shape[0] / config.batch_size)
    sha256 = hashlib.sha256(images).hexdigest()  # C-contiguous: hashed in place, no copy

    model = model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [  # weight decay on matrices only, not on biases and LayerNorm parameters
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    # fused: one kernel per step on the GPU; betas (0.9, 0.999), the defaults
    optimizer = torch.optim.AdamW(groups, lr=config.lr, fused=device.type == "cuda")
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(config, s, steps_per_epoch)
    )
    gen_cpu = torch.Generator().manual_seed(config.seed)
    gen_dev = torch.Generator(device=device).manual_seed(config.seed + 1)
    hist: dict[str, list] = {name: [] for name in HISTORY}
    start_epoch = 0

    if path is not None and path.exists():
        if not resume:
            raise FileExistsError(
                f"checkpoint {path} exists; pass resume=True to continue it, or remove it"
            )
        ckpt = load_checkpoint(path, map_location=device)
        _check_resumable(ckpt, path, config, task, sha256)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        gen_cpu.set_state(ckpt["rng_cpu"].cpu())
        if ckpt["device_type"] == device.type:
            gen_dev.set_state(ckpt["rng_device"].cpu())
        else:  # a CUDA generator's state does not fit a CPU one, and vice versa
            warnings.warn(
                f"checkpoint {path} was written on {ckpt['device_type']}, resuming on "
                f"{device.type}: masks and noise are redrawn from a new stream",
                stacklevel=2,
            )
            gen_dev.manual_seed(config.seed + 1 + 1_000_003 * int(ckpt["epoch"]))
        hist = {k: v.tolist() for k, v in ckpt["history"].items()}
        start_epoch = int(ckpt["epoch"])
    if start_epoch >= end_epoch:  # done earlier
        model.eval()
        return model, TrainHistory(task, **hist)

    def save(epochs_done: int) -> None:
        state = {
            "format": CHECKPOINT_FORMAT,
            "config": config.to_dict(),
            "task": task,
            "epoch": epochs_done,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng_cpu": gen_cpu.get_state(),
            "rng_device": gen_dev.get_state(),
            "device_type": device.type,
            "history": {
                k: torch.tensor(v, dtype=torch.int64 if k == "step_tau" else torch.float64)
                for k, v in hist.items()
            },
            "data": {"shape": list(images.shape), "sha256": sha256},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            torch.save(state, tmp)

    data = torch.from_numpy(images).to(device)
    grid = PatchEmbedding(image_shape=config.image_shape, patch=config.patch)
    index_map = torch.from_numpy(grid.token_index_map()).to(device)
    recycled = config.model == "recycled"
    n_steps = (end_epoch - start_epoch) * steps_per_epoch
    model.train()
    with progress(n_steps, f"{config.model} ({task})", "step", enabled=config.progress) as bar:
        for epoch in range(start_epoch, end_epoch):
            t0 = time.perf_counter()
            perm = torch.randperm(images.shape[0], generator=gen_cpu).to(device)
            losses = []
            for b in range(steps_per_epoch):
                clean = data[perm[b * config.batch_size : (b + 1) * config.batch_size]]
                if task == "masked":
                    inputs, _ = mask_batch(
                        clean, config.n_masked, index_map, grid.n_tokens, gen_dev
                    )
                else:
                    inputs = noise_batch(clean, config.noise_variance, gen_dev)
                tau = sample_tau(gen_cpu, config.tau_min, config.tau_max) if recycled else 0
                hist["step_lr"].append(optimizer.param_groups[0]["lr"])
                hist["step_tau"].append(tau)
                loss = torch.nn.functional.mse_loss(model(inputs, tau), clean)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if config.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                optimizer.step()
                scheduler.step()
                losses.append(loss.detach())
                bar.update(1)
            step_loss = torch.stack(losses).double().cpu().numpy()  # one sync per epoch
            hist["step_loss"].extend(step_loss.tolist())
            hist["epoch_loss"].append(float(step_loss.mean()))
            hist["epoch_seconds"].append(time.perf_counter() - t0)
            bar.set_postfix(epoch=epoch + 1, loss=f"{hist['epoch_loss'][-1]:.4g}")
            done = epoch + 1
            if path is not None and (done % config.checkpoint_every == 0 or done == end_epoch):
                save(done)
    model.eval()
    return model, TrainHistory(task, **hist)
