"""Training of the backprop baselines: AdamW, a schedule, checkpoints and resumption.

One optimiser step takes a batch of clean training images, corrupts it for the task
(:mod:`spinsa.baselines.corruption`: masked patches set to 0, or Gaussian noise), runs the
model (the recycled block for τ iterations, τ drawn uniformly from {tau_min..tau_max} at
every step; the ViT once) and minimises the mean squared error against the clean images over
all pixels.

Reproducibility: the initial weights come from ``config.seed``; the order of the images and τ
come from a CPU ``torch.Generator``, masks and noise from a generator on the training device,
both seeded from ``config.seed`` and saved in every checkpoint together with the model, the
optimiser, the schedule and the history. A run interrupted after any checkpoint and resumed
ends with the same weights as an uninterrupted run (bit for bit on the CPU).

Checkpoints are written with ``torch.save`` to a temporary file in the same directory and
renamed over the old one (``os.replace``), so that a crash never leaves a truncated file; they
hold tensors and plain Python values only and are read back with ``weights_only=True``.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._checks import check_choice, check_count
from spinsa.baselines._torch import require_torch, resolve_device
from spinsa.baselines.config import RESUME_NEUTRAL, TASKS, BaselineConfig
from spinsa.baselines.corruption import check_images, mask_batch, noise_batch, token_index_map

__all__ = [
    "CHECKPOINT_FORMAT",
    "TrainHistory",
    "load_checkpoint",
    "lr_factor",
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
        for name, dtype in (
            ("epoch_loss", np.float64),
            ("epoch_seconds", np.float64),
            ("step_loss", np.float64),
            ("step_lr", np.float64),
            ("step_tau", np.int64),
        ):
            value = np.array(getattr(self, name), dtype=dtype).reshape(-1)
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        if len(self.epoch_seconds) != len(self.epoch_loss):
            raise ValueError("epoch_loss and epoch_seconds must have one length")
        n = len(self.step_loss)
        if len(self.step_lr) != n or len(self.step_tau) != n:
            raise ValueError("step_loss, step_lr and step_tau must have one length")

    @property
    def n_epochs(self) -> int:
        """Epochs done."""
        return len(self.epoch_loss)


# --------------------------------------------------------------------------- pieces


def sample_tau(generator: Any, tau_min: int = 3, tau_max: int = 7) -> int:
    """τ uniform in {tau_min, ..., tau_max}, drawn from a CPU ``torch.Generator``."""
    torch = require_torch()
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
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    if config.schedule == "step":
        return config.step_gamma ** (step // (config.step_epochs * steps_per_epoch))
    return 1.0


def _param_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices only; biases and LayerNorm parameters are not decayed."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]


def _fingerprint(images: np.ndarray) -> str:
    return hashlib.sha256(images.tobytes()).hexdigest()


def _atomic_save(obj: dict[str, Any], path: Path) -> None:
    torch = require_torch()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """Read a baseline checkpoint (tensors and plain values only: ``weights_only=True``).

    Returns
    -------
    dict
        ``format``, ``config`` (a dict; :meth:`BaselineConfig.from_dict` rebuilds it), ``task``,
        ``epoch`` (epochs done), ``model``, ``optimizer``, ``scheduler`` (state dicts),
        ``rng_cpu``, ``rng_device``, ``device_type``, ``history`` (a dict of tensors) and
        ``data`` (shape and sha256 of the training images).

    Raises
    ------
    FileNotFoundError, ValueError
        No file, or a file that is not a spinsa baseline checkpoint.
    """
    torch = require_torch()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - re-raised with the path
        raise ValueError(f"{path} is not a readable baseline checkpoint: {exc}") from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a spinsa baseline checkpoint ({CHECKPOINT_FORMAT})")
    return ckpt


def _history_from_lists(task: str, h: dict[str, list]) -> TrainHistory:
    return TrainHistory(
        task=task,
        epoch_loss=np.asarray(h["epoch_loss"], dtype=np.float64),
        epoch_seconds=np.asarray(h["epoch_seconds"], dtype=np.float64),
        step_loss=np.asarray(h["step_loss"], dtype=np.float64),
        step_lr=np.asarray(h["step_lr"], dtype=np.float64),
        step_tau=np.asarray(h["step_tau"], dtype=np.int64),
    )


def _config_differences(saved: dict[str, Any], config: BaselineConfig) -> list[str]:
    now = config.to_dict()
    return [
        f"{key}: checkpoint {saved.get(key)!r}, now {now[key]!r}"
        for key in now
        if key not in RESUME_NEUTRAL and saved.get(key) != now[key]
    ]


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
        Masked prediction (``config.mask_fraction`` of the patches zeroed) or denoising
        (Gaussian noise of ``config.noise_variance``).
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
    torch = require_torch()
    from spinsa.baselines.models import RecycledBlock, build_model

    if not isinstance(config, BaselineConfig):
        raise ValueError(f"config must be a BaselineConfig, got {type(config).__name__}")
    check_choice(task, "task", TASKS)
    images = check_images(images_train, config.image_shape, "images_train")
    if stop_after is not None:
        stop_after = check_count(stop_after, "stop_after", 1)
    ckpt_path = Path(checkpoint) if checkpoint is not None else None
    device = resolve_device(config.device)

    n_images = images.shape[0]
    steps_per_epoch = math.ceil(n_images / config.batch_size)
    fingerprint = _fingerprint(images)

    model = build_model(config).to(device)
    optimizer = torch.optim.AdamW(
        _param_groups(model, config.weight_decay),
        lr=config.lr,
        betas=(0.9, 0.999),
        fused=device.type == "cuda",  # one kernel per step on the GPU
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(config, s, steps_per_epoch)
    )
    gen_cpu = torch.Generator().manual_seed(config.seed)
    gen_dev = torch.Generator(device=device).manual_seed(config.seed + 1)
    hist: dict[str, list] = {k: [] for k in TrainHistory.__dataclass_fields__ if k != "task"}
    start_epoch = 0

    if ckpt_path is not None and ckpt_path.exists():
        if not resume:
            raise FileExistsError(
                f"checkpoint {ckpt_path} exists; pass resume=True to continue it, or remove it"
            )
        ckpt = load_checkpoint(ckpt_path, map_location=device)
        diffs = _config_differences(ckpt["config"], config)
        if diffs:
            raise ValueError(
                f"checkpoint {ckpt_path} was written with another config: " + "; ".join(diffs)
            )
        if ckpt["task"] != task:
            raise ValueError(f"checkpoint {ckpt_path} is for task {ckpt['task']!r}, not {task!r}")
        if ckpt["data"]["sha256"] != fingerprint:
            raise ValueError(
                f"checkpoint {ckpt_path} was trained on other images (shape "
                f"{tuple(ckpt['data']['shape'])}); pass the same images_train to resume"
            )
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        gen_cpu.set_state(ckpt["rng_cpu"].cpu())
        if ckpt["device_type"] == device.type:
            gen_dev.set_state(ckpt["rng_device"].cpu())
        else:
            warnings.warn(
                f"checkpoint {ckpt_path} was written on {ckpt['device_type']}, resuming on "
                f"{device.type}: masks and noise are redrawn from a new stream",
                stacklevel=2,
            )
            gen_dev.manual_seed(config.seed + 1 + 1_000_003 * int(ckpt["epoch"]))
        hist = {k: ckpt["history"][k].cpu().tolist() for k in hist}
        start_epoch = int(ckpt["epoch"])

    end_epoch = config.epochs if stop_after is None else min(config.epochs, stop_after)
    if start_epoch >= end_epoch:
        model.eval()
        return model, _history_from_lists(task, hist)

    def save(epoch_done: int) -> None:
        _atomic_save(
            {
                "format": CHECKPOINT_FORMAT,
                "config": config.to_dict(),
                "task": task,
                "epoch": epoch_done,
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
                "data": {"shape": list(images.shape), "sha256": fingerprint},
            },
            ckpt_path,
        )

    data = torch.from_numpy(images).to(device)
    index_map = torch.from_numpy(token_index_map(config.image_shape, config.patch)).to(device)
    recycled = isinstance(model, RecycledBlock)
    clip = config.grad_clip
    mse = torch.nn.functional.mse_loss

    from tqdm.auto import tqdm

    bar = tqdm(
        total=(end_epoch - start_epoch) * steps_per_epoch,
        desc=f"{config.model} ({task})",
        unit="step",
        disable=not config.progress,
        leave=False,
    )
    model.train()
    try:
        for epoch in range(start_epoch, end_epoch):
            t0 = time.perf_counter()
            perm = torch.randperm(n_images, generator=gen_cpu).to(device)
            losses = []
            for b in range(steps_per_epoch):
                clean = data[perm[b * config.batch_size : (b + 1) * config.batch_size]]
                if task == "masked":
                    inputs, _ = mask_batch(
                        clean, config.n_masked, index_map, config.n_tokens, gen_dev
                    )
                else:
                    inputs = noise_batch(clean, config.noise_variance, gen_dev)
                tau = sample_tau(gen_cpu, config.tau_min, config.tau_max) if recycled else 0
                hist["step_lr"].append(optimizer.param_groups[0]["lr"])
                hist["step_tau"].append(tau)
                out = model(inputs, tau) if recycled else model(inputs)
                loss = mse(out, clean)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
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
            if ckpt_path is not None and (done % config.checkpoint_every == 0 or done == end_epoch):
                save(done)
    finally:
        bar.close()
    model.eval()
    return model, _history_from_lists(task, hist)
