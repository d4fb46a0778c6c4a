"""The one resumable torch trainer of the backprop models, their checkpoints, and positions.

:func:`train` runs the epochs of :mod:`spinsa.baselines` (the recycled block and the ViT on
images) and of :mod:`spinsa.sequences.train` (the RNN, transformer and S4D forecasters); each
caller gives only its model, its loss on a batch and its data. One epoch shuffles the
examples (a CPU ``torch.Generator`` seeded with ``config.seed``) and takes AdamW steps on
minibatches. A caller with a validation loss gets the validation curve, early stopping by
the one rule of :mod:`spinsa._convergence` (default: less than 0.5 % relative improvement of
the best validation loss over 5 epochs; ``config.epochs`` stays the cap) and, at the end, the
weights of the epoch of lowest validation loss; every run returns its
:class:`~spinsa._convergence.Convergence` (docs/convergence.md).

Reproducibility: every other random draw (masks, noise, dropout) comes from torch's global
RNG on the training device, seeded with ``config.seed + 1`` inside a forked RNG, so that the
caller's stream is untouched. Every checkpoint holds the model, optimiser, schedule, both
RNG states, the history, the best weights and the convergence record, is written through
:func:`spinsa._files.atomic_path` and is read back with ``weights_only=True``; a run
interrupted after any checkpoint and resumed ends with exactly the result of an
uninterrupted run (bit for bit on the CPU). See docs/guarantees.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._checks import check_count
from spinsa._config import config_differences, config_to_dict, describe_differences
from spinsa._convergence import (
    DEFAULT_PATIENCE,
    DEFAULT_REL_TOL,
    Convergence,
    check_rule,
    stopping_epoch,
)
from spinsa._files import atomic_path
from spinsa._progress import progress as progress_bar
from spinsa._torch import import_torch

__all__ = ["read_checkpoint", "sinusoidal_positions", "train"]


def sinusoidal_positions(n_tokens: int, width: int) -> Any:
    """The fixed sinusoidal positional encoding of Vaswani et al. (2017).

    e[k, 2m] = sin(k / 10000^(2m/D)),  e[k, 2m+1] = cos(k / 10000^(2m/D)),  k = token index.

    Parameters
    ----------
    n_tokens, width : int
        N and D (odd D drops the last cosine).

    Returns
    -------
    torch.Tensor, shape (N, D), float32
    """
    torch = import_torch()
    n_tokens = check_count(n_tokens, "n_tokens", 1)
    width = check_count(width, "width", 1)
    angle = np.arange(n_tokens)[:, None] / 10000.0 ** (2 * np.arange((width + 1) // 2) / width)
    e = np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(n_tokens, -1)  # sin, cos, ...
    return torch.from_numpy(e[:, :width].astype(np.float32))


def read_checkpoint(path, fmt: str, map_location: Any = "cpu") -> dict[str, Any]:
    """A checkpoint of format ``fmt`` (``"spinsa-<kind>/<version>"``) written by :func:`train`.

    Tensors and plain values only (``weights_only=True``); the CRC-32 of its records is
    checked first (``torch.load`` does not).

    Raises
    ------
    FileNotFoundError, ValueError
        No file, a file that is not a spinsa checkpoint of this kind, or one of an older
        version (the message says to delete it).
    spinsa.io.SpinsaFileError
        A record's CRC-32 fails: bytes changed after the file was written.
    """
    from spinsa.io import SpinsaFileError

    torch = import_torch()
    path, kind = Path(path), fmt.split("/")[0]
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
        raise ValueError(f"{path} is not a readable {kind} checkpoint: {exc}") from exc
    found = ckpt.get("format") if isinstance(ckpt, dict) else None
    if found != fmt and isinstance(found, str) and found.split("/")[0] == kind:
        raise ValueError(
            f"{path} is a checkpoint of an older spinsa ({found}; this one reads {fmt}): "
            "delete it and train again"
        )
    if found != fmt:
        raise ValueError(f"{path} is not a spinsa checkpoint ({fmt})")
    return ckpt


def _fingerprint(arrays: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays.values():
        h.update(repr((a.dtype.str, a.shape)).encode())
        h.update(np.ascontiguousarray(a))
    return h.hexdigest()


def _below(value: float, best: float) -> bool:
    """``value < best``, with a NaN loss counted as +inf (as the stopping rule counts it)."""
    return (math.inf if math.isnan(value) else value) < (math.inf if math.isnan(best) else best)


def _seed_rng(torch: Any, device: Any, seed: int) -> None:
    """Seed the global RNG that masks, noise and dropout draw from on ``device``."""
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def _adamw(torch: Any, model: Any, config: Any, no_decay: tuple[str, ...]) -> Any:
    """AdamW on the trainable parameters, with weight decay on matrices only: not on biases,
    LayerNorm nor ``no_decay``."""
    named = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
    decay = {k for k, p in named if p.ndim >= 2 and k.rsplit(".", 1)[-1] not in no_decay}
    groups = [
        {"params": [p for k, p in named if k in decay], "weight_decay": config.weight_decay},
        {"params": [p for k, p in named if k not in decay], "weight_decay": 0.0},
    ]
    # betas (0.9, 0.999), the defaults. Fused: one kernel for every tensor of a step, where
    # the plain loop (torch's CPU default) runs about ten tensor ops per parameter, each a
    # parallel region that waits for both cores (measured: the plain loop's optimiser and
    # clipping took 0.1-2 s per step of the ViT on the loaded 2-core machine, fused 2-20 ms).
    # The same update up to rounding; torch < 2.4 has no fused CPU kernel: foreach there.
    try:
        return torch.optim.AdamW(groups, lr=config.lr, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(groups, lr=config.lr, foreach=True)


class _Run:
    """The state of one call of :func:`train`: the model, its optimiser and schedule, the RNG
    of the order, the history and the best weights, and the checkpoint that holds them all."""

    def __init__(
        self,
        model: Any,
        config: Any,
        *,
        data: Mapping[str, np.ndarray],
        identity: Mapping[str, Any],
        fmt: str,
        checkpoint: str | os.PathLike | None,
        lr_factor: Callable[[int], float] | None,
        no_decay: tuple[str, ...],
        validate: Callable[[], float] | None,
        rule: tuple[float, int],
        extra_history: tuple[str, ...],
    ) -> None:
        torch = import_torch()
        self.model, self.config, self.validate = model, config, validate
        self.rel_tol, self.patience = rule
        self.device = next(model.parameters()).device
        self.cuda = self.device.type == "cuda"
        self.path = Path(checkpoint) if checkpoint is not None else None
        self.data, self.identity, self.fmt = data, identity, fmt
        self.n = len(next(iter(data.values())))
        self.saved_data = {
            "sha256": _fingerprint(data),
            "shapes": [list(a.shape) for a in data.values()],
        }
        self.saved_config = config_to_dict(config)
        self.optimizer = _adamw(torch, model, config, no_decay)
        self.scheduler = None
        if lr_factor is not None:
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_factor)
        self.generator = torch.Generator().manual_seed(config.seed)
        keys = ("step_loss", "step_lr", "epoch_loss", "epoch_seconds", *extra_history)
        self.history: dict[str, list] = {k: [] for k in keys + (("val_loss",) if validate else ())}
        self.best_epoch, self.best_model = -1, None

    def stopped_early(self) -> bool:
        """The stopping rule holds on the validation curve (a pure function of the history,
        so a resumed run stops where an uninterrupted one does)."""
        if self.validate is None:
            return False
        return stopping_epoch(self.history["val_loss"], self.rel_tol, self.patience) is not None

    def convergence(self) -> Convergence:
        """The record of the run so far."""
        return Convergence.of_curve(
            self.history.get("val_loss", []),
            self.config.epochs,
            self.rel_tol,
            self.patience,
            epochs_used=len(self.history["epoch_loss"]),
        )

    def finished(self) -> bool:
        return len(self.history["epoch_loss"]) >= self.config.epochs or self.stopped_early()

    def save(self) -> None:
        """Write the checkpoint (atomically)."""
        torch, device = import_torch(), self.device
        state = {
            "format": self.fmt,
            "identity": dict(self.identity),
            "config": self.saved_config,
            "data": self.saved_data,
            "epoch": len(self.history["epoch_loss"]),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "best_epoch": self.best_epoch,
            "best_model": self.best_model,
            "convergence": self.convergence().to_attrs(),
            "rng_order": self.generator.get_state(),
            "rng_device": torch.cuda.get_rng_state(device) if self.cuda else torch.get_rng_state(),
            "device_type": device.type,
            "history": {k: torch.from_numpy(np.array(v)) for k, v in self.history.items()},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.path) as tmp:
            torch.save(state, tmp)

    def resume(self, neutral: tuple[str, ...]) -> None:
        """Continue from the checkpoint, after refusing one of another config, identity or data."""
        path = self.path
        ckpt = read_checkpoint(path, self.fmt, map_location=self.device)
        diffs = config_differences(
            {**ckpt["identity"], **ckpt["config"]}, {**self.identity, **self.saved_config}, neutral
        )
        if diffs:
            raise ValueError(
                f"checkpoint {path} was written with another config: " + describe_differences(diffs)
            )
        done = len(ckpt["history"]["epoch_loss"])
        if done > self.config.epochs:  # a lower cap than the epochs done: not the same run
            raise ValueError(
                f"checkpoint {path} holds {done} epochs, more than epochs = "
                f"{self.config.epochs}; resume with epochs >= {done}, or delete it"
            )
        if ckpt["data"]["sha256"] != self.saved_data["sha256"]:
            raise ValueError(
                f"checkpoint {path} was trained on other data (shapes "
                f"{ckpt['data']['shapes']}); pass the same {', '.join(self.data)} to resume, "
                "or delete it"
            )
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(ckpt["scheduler"])
        self.generator.set_state(ckpt["rng_order"].cpu())
        self.history = {k: v.tolist() for k, v in ckpt["history"].items()}
        self.best_epoch, self.best_model = int(ckpt["best_epoch"]), ckpt["best_model"]
        self._restore_device_rng(ckpt)

    def _restore_device_rng(self, ckpt: dict[str, Any]) -> None:
        """The device RNG as saved; a new stream when the checkpoint is of another device."""
        torch, device = import_torch(), self.device
        if ckpt["device_type"] == device.type:
            if self.cuda:
                torch.cuda.set_rng_state(ckpt["rng_device"].cpu(), device)
            else:
                torch.set_rng_state(ckpt["rng_device"].cpu())
        else:  # a CUDA generator's state does not fit a CPU one, and vice versa
            warnings.warn(  # 5: this, resume, train, its caller, and that one's caller (as before)
                f"checkpoint {self.path} was written on {ckpt['device_type']}, resuming on "
                f"{device.type}: masks, noise and dropout are redrawn from a new stream",
                stacklevel=5,
            )
            _seed_rng(torch, device, self.config.seed + 1 + 1_000_003 * int(ckpt["epoch"]))

    def run_epochs(
        self,
        step: Callable,
        end: int,
        grad_clip: float,
        per_example: bool,
        desc: str,
        progress: bool,
    ) -> None:
        """Train up to epoch ``end`` (or until finished), checkpointing as configured."""
        start = len(self.history["epoch_loss"])
        total = max(0, end - start) * -(-self.n // self.config.batch_size)
        with progress_bar(total, desc, "step", enabled=progress) as bar:
            for epoch in range(start, end):
                if self.finished():
                    break
                t0 = time.perf_counter()
                step_loss, sizes = self._steps(step, grad_clip, bar)
                postfix = self._record_epoch(epoch, step_loss, sizes, per_example)
                self.history["epoch_seconds"].append(time.perf_counter() - t0)
                bar.set_postfix(postfix)
                done = epoch + 1
                if self.path is not None and (
                    done % self.config.checkpoint_every == 0 or done == end or self.finished()
                ):
                    self.save()

    def finish(self) -> tuple[dict[str, list], Convergence]:
        """Load the best weights (with ``validate``), set eval mode; what :func:`train` returns."""
        if self.best_model is not None:
            self.model.load_state_dict(self.best_model)
        self.model.eval()
        return self.history, self.convergence()

    def _steps(self, step: Callable, grad_clip: float, bar: Any) -> tuple[np.ndarray, list[int]]:
        """One epoch's AdamW steps in a new order: the loss and size of every minibatch."""
        torch, model, optimizer = import_torch(), self.model, self.optimizer
        model.train()
        perm = torch.randperm(self.n, generator=self.generator).to(self.device)
        losses, sizes, bs = [], [], self.config.batch_size
        params = [p for p in model.parameters() if p.requires_grad]
        for i in range(0, self.n, bs):
            idx = perm[i : i + bs]
            self.history["step_lr"].append(optimizer.param_groups[0]["lr"])
            loss = step(idx, self.generator, self.history)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip > 0:
                # foreach: the norms of all tensors in one call, not a loop over them
                torch.nn.utils.clip_grad_norm_(params, grad_clip, foreach=True)
            optimizer.step()
            if self.scheduler is not None:
                self.scheduler.step()
            losses.append(loss.detach())
            sizes.append(len(idx))
            bar.update(1)
        return torch.stack(losses).double().cpu().numpy(), sizes  # one sync per epoch

    def _record_epoch(
        self, epoch: int, step_loss: np.ndarray, sizes: list[int], per_example: bool
    ) -> dict[str, Any]:
        """Append the epoch's losses, validate and keep the best weights; the bar's postfix."""
        history = self.history
        history["step_loss"].extend(step_loss.tolist())
        if per_example:
            weighted = 0.0
            for loss_k, size in zip(step_loss.tolist(), sizes, strict=True):
                weighted += loss_k * size  # in order, as a running float64 sum
            history["epoch_loss"].append(weighted / self.n)
        else:
            history["epoch_loss"].append(float(step_loss.mean()))
        postfix = {"epoch": epoch + 1, "loss": f"{history['epoch_loss'][-1]:.4g}"}
        if self.validate is not None:
            val = self.validate()
            history["val_loss"].append(val)
            postfix["val"] = f"{val:.4g}"
            if self.best_epoch < 0 or _below(val, history["val_loss"][self.best_epoch]):
                self.best_epoch = epoch
                self.best_model = {
                    k: v.detach().clone() for k, v in self.model.state_dict().items()
                }
        return postfix


def train(
    model: Any,
    step: Callable[[Any, Any, dict], Any],
    config: Any,
    *,
    data: Mapping[str, np.ndarray],
    identity: Mapping[str, Any],
    fmt: str,
    checkpoint: str | os.PathLike | None = None,
    neutral: tuple[str, ...] = (),
    stop_after: int | None = None,
    lr_factor: Callable[[int], float] | None = None,
    no_decay: tuple[str, ...] = (),
    grad_clip: float = 0.0,
    validate: Callable[[], float] | None = None,
    rel_tol: float = DEFAULT_REL_TOL,
    patience: int = DEFAULT_PATIENCE,
    per_example: bool = False,
    extra_history: tuple[str, ...] = (),
    desc: str = "",
    progress: bool = False,
) -> tuple[dict[str, list], Convergence]:
    """Train ``model`` with AdamW on minibatches, resuming from ``checkpoint`` if it exists.

    Parameters
    ----------
    model : torch.nn.Module
        On the training device, with its initial weights.
    step : callable
        ``step(idx, generator, history) -> loss``: the scalar loss of the examples ``idx``
        (a device tensor of indices, shape (B,)); ``generator`` is the CPU generator of the
        order (for draws of the caller's own), ``history`` the dict of lists to which it may
        append its ``extra_history`` of the step.
    config : frozen dataclass
        Its ``epochs``, ``batch_size``, ``lr``, ``weight_decay``, ``seed`` and
        ``checkpoint_every`` are used; all of it is saved and compared on resumption.
    data : mapping of str to ndarray
        The arrays trained on, by argument name; the first one holds the training examples
        (one per row). A checkpoint of other data is refused.
    identity : mapping
        What else a checkpoint must match (the task, the model's name...).
    fmt : str
        The checkpoint format, ``"spinsa-<kind>/<version>"``.
    checkpoint : path, optional
        Written every ``config.checkpoint_every`` epochs and at the end; continued from when
        it exists (one of another config, identity or data is refused).
    neutral : tuple of str
        Config fields that may differ on resumption.
    stop_after : int, optional
        Stop (after the checkpoint) once this many epochs are done in total.
    lr_factor : callable, optional
        Learning rate at step s (0-based) over ``config.lr``; default 1 (constant).
    no_decay : tuple of str
        Parameter names (the last part) without weight decay; decay is on matrices only.
    grad_clip : float
        Clip the gradient's norm to this (0: no clipping).
    validate : callable, optional
        ``validate() -> float``, the validation loss after an epoch (of data held out of the
        training examples, never the test set): the weights of the epoch of lowest
        validation loss are kept and loaded at the end, and training stops once
        :func:`spinsa._convergence.stopping_epoch` finds the rule met. Without it the run
        trains ``config.epochs`` epochs and is never ``converged``.
    rel_tol, patience : float, int
        The stopping rule: stop when the best validation loss improved by less than
        ``rel_tol`` (relative) over the last ``patience`` epochs (0.005 and 5: less than
        0.5 % over 5 epochs; ``rel_tol=0``: ``patience`` epochs without a lower loss).
    per_example : bool
        The epoch's loss is the mean over examples (True) or over steps (False).
    extra_history : tuple of str
        The caller's own lists in the history (filled by ``step``).
    desc, progress : str, bool
        The progress bar's name, and whether to show it.

    Returns
    -------
    history : dict of lists
        Of every step: ``step_loss``, ``step_lr``; of every epoch: ``epoch_loss``,
        ``epoch_seconds`` and, with ``validate``, ``val_loss``; and ``extra_history``.
    convergence : spinsa._convergence.Convergence
        ``converged`` (the rule held within ``config.epochs``), ``epochs_used``,
        ``max_epochs``, ``best_epoch`` (0-based, the epoch whose weights ``model`` now
        holds, in eval mode; -1 without ``validate``: the last weights) and the rule.
    """
    torch = import_torch()
    rule = check_rule(rel_tol, patience)
    end = config.epochs
    if stop_after is not None:
        end = min(end, check_count(stop_after, "stop_after", 1))
    run = _Run(
        model,
        config,
        data=data,
        identity=identity,
        fmt=fmt,
        checkpoint=checkpoint,
        lr_factor=lr_factor,
        no_decay=no_decay,
        validate=validate,
        rule=rule,
        extra_history=extra_history,
    )
    with torch.random.fork_rng(devices=[run.device] if run.cuda else []):
        _seed_rng(torch, run.device, config.seed + 1)
        if run.path is not None and run.path.exists():
            run.resume(neutral)
        run.run_epochs(step, end, grad_clip, per_example, desc, progress)
    return run.finish()
