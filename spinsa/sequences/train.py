"""Training of the backprop forecasters: AdamW on the MSE, early stopping, checkpoints.

One epoch shuffles the training windows (a seeded CPU ``torch.Generator``), takes AdamW steps
on minibatches of the mean squared error of the next value, then measures the MSE on the
validation windows (a part of the series held out of training, never the test part). The
weights of the best validation epoch are kept; training stops by the rule of
:mod:`spinsa._convergence` (less than ``rel_tol`` relative improvement of the best validation
MSE over ``patience`` epochs: 0.5 % over 5 by default), or after ``epochs``, and the result
records whether it ``converged``.

The epochs, checkpoints and exact resumption are those of :func:`spinsa._training.train`:
the initial weights come from ``config.seed`` (:func:`~spinsa.sequences.models.make_model`),
the order of the windows from its CPU generator, dropout (the transformer) from torch's
global RNG, seeded there.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from spinsa._checks import check_choice, check_count, check_finite, check_positive
from spinsa._convergence import DEFAULT_PATIENCE, DEFAULT_REL_TOL, Convergence, check_rule
from spinsa._torch import import_torch, resolve_device
from spinsa._training import read_checkpoint, train

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

# 3: the stopping rule of spinsa._convergence and the convergence record
CHECKPOINT_FORMAT = "spinsa-forecaster/3"

#: Config fields that may change between a run and its resumption (they do not change the
#: numbers on one device type).
RESUME_NEUTRAL = ("device", "checkpoint_every")

_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


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
    rel_tol, patience : float, int
        The stopping rule (:func:`spinsa._convergence.stopping_epoch`): stop when the best
        validation MSE improved by less than ``rel_tol`` (relative) over the last
        ``patience`` epochs (0.005 and 5: less than 0.5 % over 5 epochs; ``rel_tol = 0``:
        ``patience`` epochs without a lower one).
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
    rel_tol: float = DEFAULT_REL_TOL
    patience: int = DEFAULT_PATIENCE
    seed: int = 0
    device: str = "auto"
    checkpoint_every: int = 1

    def __post_init__(self) -> None:
        for name, minimum in (
            ("epochs", 1),
            ("batch_size", 1),
            ("seed", 0),
            ("checkpoint_every", 1),
        ):
            check_count(getattr(self, name), name, minimum)
        check_positive(self.lr, "lr")
        object.__setattr__(self, "rel_tol", check_rule(self.rel_tol, self.patience)[0])
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
    convergence : spinsa._convergence.Convergence
        ``converged`` (the stopping rule held within ``config.epochs``), ``epochs_used``,
        ``best_epoch`` (the index into ``val_loss`` of the epoch whose weights ``model``
        holds) and the rule.
    seconds : float
        Wall time of the epochs done (summed over interrupted and resumed runs).
    """

    name: str
    config: ForecasterConfig
    model: Any
    train_loss: np.ndarray
    val_loss: np.ndarray
    convergence: Convergence
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
    def best_epoch(self) -> int:
        """The epoch (0-based) whose weights ``model`` holds."""
        return self.convergence.best_epoch

    @property
    def converged(self) -> bool:
        """The stopping rule held within ``config.epochs``."""
        return self.convergence.converged

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
    """Read a forecaster checkpoint (:func:`spinsa._training.read_checkpoint`).

    Parameters
    ----------
    path : str or PathLike
        The checkpoint file.
    map_location : str or torch.device
        Where torch puts the tensors it reads, as in ``torch.load``.

    Returns
    -------
    dict
        ``format``, ``identity`` (``name``, ``context``), ``config`` (a dict), ``epoch``
        (epochs done), ``model``, ``optimizer``, ``best_model`` (state dicts), ``best_epoch``,
        ``convergence`` (:meth:`spinsa._convergence.Convergence.to_attrs`), ``history``
        (``epoch_loss``, ``val_loss``, ``epoch_seconds``, ...),
        ``data`` and the RNG states (:func:`spinsa._training.train`).
    """
    return read_checkpoint(path, CHECKPOINT_FORMAT, map_location)


def _result(name, config, model, history, convergence) -> ForecasterResult:
    return ForecasterResult(
        name=name,
        config=config,
        model=model,
        train_loss=np.asarray(history["epoch_loss"]),
        val_loss=np.asarray(history["val_loss"]),
        convergence=convergence,
        seconds=float(sum(history["epoch_seconds"])),
    )


def load_forecaster(path: str | os.PathLike, device: str = "cpu") -> ForecasterResult:
    """The result saved in a checkpoint: the model with its best weights, and the history.

    Parameters
    ----------
    path : str or PathLike
    device : str
        Where to put the model (``"auto"``, ``"cpu"``, ``"cuda"``...).

    Returns
    -------
    ForecasterResult
        The model with the weights of its best validation epoch, and the history.
    """
    from spinsa.sequences.models import make_model

    dev = resolve_device(device)
    ckpt = load_checkpoint(path, map_location=dev)
    name, context = ckpt["identity"]["name"], int(ckpt["identity"]["context"])
    config = ForecasterConfig(**ckpt["config"])
    model = make_model(name, context, config.seed).to(dev)
    model.load_state_dict(ckpt["best_model"])
    model.eval()
    history = {k: v.tolist() for k, v in ckpt["history"].items()}
    return _result(name, config, model, history, Convergence.from_attrs(ckpt["convergence"]))


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
    """Train a forecaster by backpropagation with early stopping on the validation MSE
    (:mod:`spinsa._convergence`).

    Parameters
    ----------
    name : {"rnn", "transformer", "s4d"}
    x_train : array_like, shape (n_train, context)
        Training windows of the normalised series (float32).
    y_train : array_like, shape (n_train,)
        The value after every window.
    x_val, y_val : array_like, shapes (n_val, context), (n_val,)
        Validation windows and targets: held out of training (never the test windows);
        their MSE after every epoch is the validation curve.
    config : ForecasterConfig, optional
        The recipe (default: ``ForecasterConfig()``).
    checkpoint : str or PathLike, optional
        Checkpoint file, written every ``config.checkpoint_every`` epochs and at the end. If
        it exists, training continues from it (a finished one returns at once); it must be
        of the same model, context, config (except ``device``, ``checkpoint_every``) and data.
    progress : bool
        Show a progress bar.
    stop_after : int, optional
        Stop (after writing the checkpoint) once this many epochs are done in total, as if
        the process were killed there; a later call with the same checkpoint continues.

    Returns
    -------
    ForecasterResult
        The model with the weights of the best validation epoch, in eval mode, its curves
        and its convergence record.

    Raises
    ------
    ValueError
        A bad name, config or data; a checkpoint of another model, config or data.
    """
    torch = import_torch()
    from spinsa.sequences.models import MODEL_NAMES, SSM_PARAMETERS, make_model

    check_choice(name, "name", MODEL_NAMES)
    config = ForecasterConfig() if config is None else config
    if not isinstance(config, ForecasterConfig):
        raise ValueError(f"config must be a ForecasterConfig, got {type(config).__name__}")
    x_train, y_train = _check_windows(x_train, y_train, "x_train", "y_train")
    context = x_train.shape[1]
    x_val, y_val = _check_windows(x_val, y_val, "x_val", "y_val", context)
    device = resolve_device(config.device)
    model = make_model(name, context, config.seed).to(device)
    xt, yt = torch.from_numpy(x_train).to(device), torch.from_numpy(y_train).to(device)
    xv, yv = torch.from_numpy(x_val).to(device), torch.from_numpy(y_val).to(device)

    def step(idx, generator, history):
        return torch.nn.functional.mse_loss(model(xt[idx]), yt[idx])

    history, convergence = train(
        model,
        step,
        config,
        data={"x_train": x_train, "y_train": y_train, "x_val": x_val, "y_val": y_val},
        identity={"name": name, "context": context},
        fmt=CHECKPOINT_FORMAT,
        checkpoint=checkpoint,
        neutral=RESUME_NEUTRAL,
        stop_after=stop_after,
        no_decay=SSM_PARAMETERS,
        validate=lambda: _mse(model, xv, yv),
        rel_tol=config.rel_tol,
        patience=config.patience,
        per_example=True,
        desc=name,
        progress=progress,
    )
    return _result(name, config, model, history, convergence)
