"""Training of the backprop forecasters: AdamW on the MSE, early stopping, checkpoints.

One epoch shuffles the training windows (a seeded CPU ``torch.Generator``), takes AdamW steps
on minibatches of the mean squared error of the next value, then measures the validation MSE.
The weights of the best validation epoch are kept; training stops after ``patience`` epochs
without a strictly lower validation MSE, or after ``epochs``.

Reproducibility: the initial weights come from ``config.seed`` (:func:`make_model`), the order
of the windows from a CPU generator seeded with ``config.seed``, and dropout (the transformer)
from the global torch RNG, seeded with ``config.seed + 1`` inside a forked RNG so that the
caller's stream is untouched. Every checkpoint holds the model, optimiser, both generator
states, the history and the best weights, written through :func:`spinsa._files.atomic_path`
and read back with ``weights_only=True``; a run interrupted after any checkpoint and resumed
ends with exactly the result of an uninterrupted run (bit for bit on the CPU).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._checks import check_choice, check_count, check_finite, check_positive
from spinsa._files import atomic_path
from spinsa._progress import progress as progress_bar
from spinsa._torch import import_torch, resolve_device
from spinsa.sequences.models import MODEL_NAMES, SSM_PARAMETERS, make_model

__all__ = [
    "CHECKPOINT_FORMAT",
    "RESUME_NEUTRAL",
    "ForecasterConfig",
    "ForecasterResult",
    "load_checkpoint",
    "load_forecaster",
    "predict",
    "train_forecaster",
]

CHECKPOINT_FORMAT = "spinsa-forecaster/1"

#: Config fields that may change between a run and its resumption (they do not change the
#: numbers on one device type).
RESUME_NEUTRAL = ("device", "checkpoint_every")

_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
_HISTORY = ("train_loss", "val_loss", "epoch_seconds")


@dataclass(frozen=True)
class ForecasterConfig:
    """Training recipe of a backprop forecaster.

    Parameters
    ----------
    epochs : int
        Most passes over the training windows.
    batch_size : int
        Windows per AdamW step.
    lr : float
        Learning rate of AdamW (constant; betas (0.9, 0.999)).
    weight_decay : float
        AdamW's decoupled weight decay, on weight matrices only (not on biases, LayerNorm
        parameters, nor S4D's A and Δ: :data:`spinsa.sequences.models.SSM_PARAMETERS`).
    patience : int
        Stop after this many epochs without a lower validation MSE than the best so far.
    seed : int
        Seeds the initial weights, the order of the windows and dropout.
    device : str
        ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or ``"cuda:<k>"``.
    checkpoint_every : int
        Write the checkpoint every this many epochs (and always at the end).
    """

    epochs: int = 30
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 1e-2
    patience: int = 5
    seed: int = 0
    device: str = "auto"
    checkpoint_every: int = 1

    def __post_init__(self) -> None:
        for name, minimum in (
            ("epochs", 1),
            ("batch_size", 1),
            ("patience", 1),
            ("seed", 0),
            ("checkpoint_every", 1),
        ):
            check_count(getattr(self, name), name, minimum)
        check_positive(self.lr, "lr")
        wd = self.weight_decay
        if isinstance(wd, bool) or not isinstance(wd, (int, float)) or not 0 <= wd < math.inf:
            raise ValueError(f"weight_decay must be a finite number >= 0, got {wd!r}")
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise ValueError(
                f"device must be 'auto', 'cpu', 'cuda' or 'cuda:<k>', got {self.device!r}"
            )

    def replace(self, **changes: Any) -> ForecasterConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, eq=False)
class ForecasterResult:
    """A trained forecaster and its history.

    Attributes
    ----------
    name : {"rnn", "transformer", "s4d"}
    config : ForecasterConfig
    model : torch.nn.Module
        With the weights of the best validation epoch, in eval mode, on the training device.
    train_loss : ndarray, shape (n_epochs,), float64
        Mean training MSE of every epoch done (in training mode, over its minibatches).
    val_loss : ndarray, shape (n_epochs,), float64
        Validation MSE after every epoch (eval mode).
    best_epoch : int
        Index into ``val_loss`` of the epoch whose weights ``model`` holds (0-based).
    stopped_early : bool
        True when training stopped after ``patience`` epochs without improvement.
    seconds : float
        Wall time of the epochs done (summed over interrupted and resumed runs).
    """

    name: str
    config: ForecasterConfig
    model: Any
    train_loss: np.ndarray
    val_loss: np.ndarray
    best_epoch: int
    stopped_early: bool
    seconds: float

    def __post_init__(self) -> None:
        for name in ("train_loss", "val_loss"):
            value = np.array(getattr(self, name), dtype=np.float64).reshape(-1)
            value.setflags(write=False)
            object.__setattr__(self, name, value)

    @property
    def n_epochs(self) -> int:
        """Epochs done."""
        return len(self.val_loss)

    @property
    def best_val_loss(self) -> float:
        """The lowest validation MSE, that of ``model``."""
        return float(self.val_loss[self.best_epoch])


# --------------------------------------------------------------------------- helpers


def _check_x(x, name: str, context: int | None = None) -> np.ndarray:
    """Windows x: (n, context), finite, as a C-contiguous float32 array."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
        raise ValueError(f"{name} must be a real float array, got dtype {x.dtype}")
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{name} must have shape (n_windows, context), got {x.shape}")
    if context is not None and x.shape[1] != context:
        raise ValueError(f"{name} has windows of {x.shape[1]} values, the training ones {context}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    check_finite(x, name)
    return x


def _check_windows(x, y, x_name: str, y_name: str, context: int | None = None):
    """x: (n, context) and y: (n,), finite, as C-contiguous float32 arrays."""
    x, y = _check_x(x, x_name, context), np.asarray(y)
    if not np.issubdtype(y.dtype, np.number) or np.iscomplexobj(y):
        raise ValueError(f"{y_name} must be a real float array, got dtype {y.dtype}")
    if y.shape != x.shape[:1]:
        raise ValueError(
            f"{y_name} must have shape ({x.shape[0]},) (one per window), got {y.shape}"
        )
    y = np.ascontiguousarray(y, dtype=np.float32)
    check_finite(y, y_name)
    return x, y


def _fingerprint(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(repr((a.dtype.str, a.shape)).encode())
        h.update(a)  # C-contiguous: hashed in place
    return h.hexdigest()


def _predict_tensor(model: Any, x: Any, batch_size: int) -> Any:
    """Predictions of a device tensor x (n, L) in eval mode, no grad: (n,)."""
    torch = import_torch()
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return torch.cat([model(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])
    finally:
        model.train(was_training)


def _mse(model: Any, x: Any, y: Any, batch_size: int = 4096) -> float:
    return float(((_predict_tensor(model, x, batch_size) - y).double() ** 2).mean())


def _since_best(val_loss: list, best_epoch: int) -> int:
    return len(val_loss) - 1 - best_epoch


def _seed_global(torch: Any, device: Any, seed: int) -> None:
    """Seed the global RNG that dropout draws from on ``device`` (and the CPU)."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed)


def predict(model: Any, x, batch_size: int = 4096) -> np.ndarray:
    """Forecasts of a trained model, in eval mode without gradients.

    Parameters
    ----------
    model : torch.nn.Module
        A forecaster of :mod:`spinsa.sequences.models` (its training mode is restored).
    x : array_like, shape (n, context)
        Windows of the normalised series.
    batch_size : int
        Windows per forward pass.

    Returns
    -------
    ndarray, shape (n,), float32
    """
    torch = import_torch()
    batch_size = check_count(batch_size, "batch_size", 1)
    x = _check_x(x, "x")
    param = next(model.parameters())
    xt = torch.from_numpy(x).to(device=param.device, dtype=param.dtype)
    return _predict_tensor(model, xt, batch_size).float().cpu().numpy()


# --------------------------------------------------------------------------- checkpoints


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """Read a forecaster checkpoint (tensors and plain values only: ``weights_only=True``).

    Returns
    -------
    dict
        ``format``, ``name``, ``context``, ``config`` (a dict), ``epoch`` (epochs done),
        ``model``, ``optimizer``, ``best_model`` (state dicts), ``best_epoch``, ``history``
        (``train_loss``, ``val_loss``, ``epoch_seconds``: float64 tensors), ``rng_shuffle``,
        ``rng_cpu``, ``rng_cuda`` (None off CUDA), ``device_type`` and ``data`` (the sha256 of
        the four arrays and their shapes).

    Raises
    ------
    FileNotFoundError, ValueError, spinsa.io.SpinsaFileError
        As :func:`spinsa.baselines.train.read_checkpoint`.
    """
    from spinsa.baselines.train import read_checkpoint

    return read_checkpoint(path, CHECKPOINT_FORMAT, "forecaster", map_location)


def _result(name, config, model, hist, best_epoch, best_state) -> ForecasterResult:
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return ForecasterResult(
        name=name,
        config=config,
        model=model,
        train_loss=np.asarray(hist["train_loss"]),
        val_loss=np.asarray(hist["val_loss"]),
        best_epoch=best_epoch,
        stopped_early=_since_best(hist["val_loss"], best_epoch) >= config.patience,
        seconds=float(sum(hist["epoch_seconds"])),
    )


def load_forecaster(path: str | os.PathLike, device: str = "cpu") -> ForecasterResult:
    """The result saved in a checkpoint: the model with its best weights, and the history.

    Parameters
    ----------
    path : str or PathLike
    device : str
        Where to put the model (``"auto"``, ``"cpu"``, ``"cuda"``...).
    """
    dev = resolve_device(device)
    ckpt = load_checkpoint(path, map_location=dev)
    config = ForecasterConfig(**ckpt["config"])
    model = make_model(ckpt["name"], int(ckpt["context"]), config.seed).to(dev)
    hist = {k: v.tolist() for k, v in ckpt["history"].items()}
    best = int(ckpt["best_epoch"])
    return _result(
        ckpt["name"], config, model, hist, best, ckpt["best_model"] if best >= 0 else None
    )


def _check_resumable(ckpt: dict, path: Path, name: str, context: int, config, sha256: str):
    """A ValueError unless the checkpoint has this model, config (but RESUME_NEUTRAL), data."""
    if ckpt["name"] != name or int(ckpt["context"]) != context:
        raise ValueError(
            f"checkpoint {path} is of model {ckpt['name']!r} with context {ckpt['context']}, "
            f"not {name!r} with context {context}"
        )
    from spinsa.baselines.train import check_same_config

    check_same_config(path, ckpt["config"], dataclasses.asdict(config), RESUME_NEUTRAL)
    if ckpt["data"]["sha256"] != sha256:
        raise ValueError(
            f"checkpoint {path} was trained on other data (shapes {ckpt['data']['shapes']}); "
            "pass the same x_train, y_train, x_val, y_val to resume, or remove it"
        )


# --------------------------------------------------------------------------- training


def train_forecaster(
    name: str,
    x_train,
    y_train,
    x_val,
    y_val,
    config: ForecasterConfig | None = None,
    *,
    checkpoint: str | os.PathLike | None = None,
    progress: bool = False,
    stop_after: int | None = None,
) -> ForecasterResult:
    """Train a forecaster by backpropagation with early stopping on the validation MSE.

    Parameters
    ----------
    name : {"rnn", "transformer", "s4d"}
    x_train : array_like, shape (n_train, context)
        Training windows of the normalised series (float32).
    y_train : array_like, shape (n_train,)
        The value after every window.
    x_val, y_val : array_like, shapes (n_val, context), (n_val,)
        Validation windows and targets.
    config : ForecasterConfig, optional
        The recipe (default: ``ForecasterConfig()``).
    checkpoint : str or PathLike, optional
        Checkpoint file, written every ``config.checkpoint_every`` epochs and at the end. If
        it exists, training continues from it (a finished one returns at once); it must be
        of the same model, context, config (except ``device``, ``checkpoint_every``) and data.
    progress : bool
        Show a progress bar over the epochs.
    stop_after : int, optional
        Stop (after writing the checkpoint) once this many epochs are done in total, as if
        the process were killed there; a later call with the same checkpoint continues.

    Returns
    -------
    ForecasterResult
        The model with the weights of the best validation epoch, in eval mode.

    Raises
    ------
    ValueError
        A bad name, config or data; a checkpoint of another model, config or data.
    """
    torch = import_torch()
    check_choice(name, "name", MODEL_NAMES)
    config = ForecasterConfig() if config is None else config
    if not isinstance(config, ForecasterConfig):
        raise ValueError(f"config must be a ForecasterConfig, got {type(config).__name__}")
    x_train, y_train = _check_windows(x_train, y_train, "x_train", "y_train")
    context = x_train.shape[1]
    x_val, y_val = _check_windows(x_val, y_val, "x_val", "y_val", context)
    end_epoch = config.epochs
    if stop_after is not None:
        end_epoch = min(end_epoch, check_count(stop_after, "stop_after", 1))
    path = Path(checkpoint) if checkpoint is not None else None
    device = resolve_device(config.device)
    sha256 = _fingerprint(x_train, y_train, x_val, y_val)

    model = make_model(name, context, config.seed).to(device)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def decays(param_name: str, p: Any) -> bool:
        return p.ndim >= 2 and param_name.rsplit(".", 1)[-1] not in SSM_PARAMETERS

    groups = [
        {"params": [p for n, p in named if decays(n, p)], "weight_decay": config.weight_decay},
        {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=config.lr, fused=device.type == "cuda")
    gen = torch.Generator().manual_seed(config.seed)
    hist: dict[str, list] = {k: [] for k in _HISTORY}
    best_epoch, best_state = -1, None

    def finished() -> bool:
        return len(hist["val_loss"]) >= config.epochs or (
            best_epoch >= 0 and _since_best(hist["val_loss"], best_epoch) >= config.patience
        )

    def save() -> None:
        state = {
            "format": CHECKPOINT_FORMAT,
            "name": name,
            "context": context,
            "config": dataclasses.asdict(config),
            "epoch": len(hist["val_loss"]),
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "best_model": best_state,
            "best_epoch": best_epoch,
            "history": {k: torch.tensor(v, dtype=torch.float64) for k, v in hist.items()},
            "rng_shuffle": gen.get_state(),
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "device_type": device.type,
            "data": {
                "sha256": sha256,
                "shapes": [list(a.shape) for a in (x_train, y_train, x_val, y_val)],
            },
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            torch.save(state, tmp)

    cuda_devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices):
        _seed_global(torch, device, config.seed + 1)
        if path is not None and path.exists():
            ckpt = load_checkpoint(path, map_location=device)
            _check_resumable(ckpt, path, name, context, config, sha256)
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            gen.set_state(ckpt["rng_shuffle"].cpu())
            torch.set_rng_state(ckpt["rng_cpu"].cpu())
            if device.type == "cuda" and ckpt["device_type"] == "cuda":
                torch.cuda.set_rng_state(ckpt["rng_cuda"].cpu(), device)
            elif device.type != ckpt["device_type"]:
                warnings.warn(
                    f"checkpoint {path} was written on {ckpt['device_type']}, resuming on "
                    f"{device.type}: the rest of the run differs from an uninterrupted one",
                    stacklevel=2,
                )
            hist = {k: v.tolist() for k, v in ckpt["history"].items()}
            best_epoch, best_state = int(ckpt["best_epoch"]), ckpt["best_model"]

        xt, yt = torch.from_numpy(x_train).to(device), torch.from_numpy(y_train).to(device)
        xv, yv = torch.from_numpy(x_val).to(device), torch.from_numpy(y_val).to(device)
        n, bs = len(x_train), config.batch_size
        start = len(hist["val_loss"])
        with progress_bar(max(0, end_epoch - start), name, "epoch", enabled=progress) as bar:
            for epoch in range(start, end_epoch):
                if finished():
                    break
                t0 = time.perf_counter()
                model.train()
                perm = torch.randperm(n, generator=gen).to(device)
                total = torch.zeros((), dtype=torch.float64, device=device)
                for i in range(0, n, bs):
                    idx = perm[i : i + bs]
                    loss = torch.nn.functional.mse_loss(model(xt[idx]), yt[idx])
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    total += loss.detach().double() * len(idx)
                hist["train_loss"].append(float(total) / n)  # one sync per epoch
                val = _mse(model, xv, yv)
                hist["val_loss"].append(val)
                if best_epoch < 0 or val < hist["val_loss"][best_epoch]:
                    best_epoch = epoch
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                hist["epoch_seconds"].append(time.perf_counter() - t0)
                bar.update(1)
                bar.set_postfix(train=f"{hist['train_loss'][-1]:.4g}", val=f"{val:.4g}")
                done = epoch + 1
                if path is not None and (
                    done % config.checkpoint_every == 0 or done == end_epoch or finished()
                ):
                    save()
    return _result(name, config, model, hist, best_epoch, best_state)
