"""Configuration of the backprop baselines, and the image check they share (no torch here).

A :class:`BaselineConfig` describes one model (the recycled transformer block or the ViT) and
its training recipe. It is a frozen dataclass validated in ``__post_init__``, round-trips
through TOML (:meth:`BaselineConfig.from_toml`, :meth:`BaselineConfig.to_toml`) and is stored
with every checkpoint, so that a resumed run can refuse a changed recipe.

Example TOML (every key optional; a ``[baseline]`` table or top-level keys)::

    [baseline]
    model = "recycled"        # or "vit"
    patch = 4                 # 4x4 patches: N = 49 tokens on 28x28 images
    value_activation = "gelu" # "none" or "swiglu" (MABViT)
    epochs = 20               # the most epochs; early stopping usually ends sooner
    val_fraction = 0.1        # training images held out for the validation curve
    rel_tol = 0.005           # stop below 0.5 % relative improvement of the best
    patience = 5              # validation loss over 5 epochs
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from spinsa._checks import check_choice, check_count, check_positive, check_real
from spinsa._checks import check_images as _check_images
from spinsa._config import check_keys, config_from_dict, config_to_dict, read_toml
from spinsa._convergence import DEFAULT_PATIENCE, DEFAULT_REL_TOL, check_rule
from spinsa.embedding import PatchEmbedding
from spinsa.tasks import TASKS, masked_count

__all__ = [
    "BaselineConfig",
    "MODELS",
    "OUTPUTS",
    "RESUME_NEUTRAL",
    "SCHEDULES",
    "TASKS",
    "VALUE_ACTIVATIONS",
    "check_images",
    "resume_neutral",
]

MODELS = ("recycled", "vit")
VALUE_ACTIVATIONS = ("none", "gelu", "swiglu")
SCHEDULES = ("cosine", "step", "constant")
OUTPUTS = ("clip", "sigmoid")

# Fields that may change between a run and its resumption (they do not change the numbers).
RESUME_NEUTRAL = ("device", "progress", "checkpoint_every")


def resume_neutral(config: BaselineConfig) -> tuple[str, ...]:
    """The fields of ``config`` that may change on resumption: :data:`RESUME_NEUTRAL`, and the
    cap ``epochs`` when the schedule does not depend on it ("constant", "step"), so that a
    run that reached its cap can go on under a higher one with the result of a run that had
    the higher cap from the start."""
    return RESUME_NEUTRAL + (("epochs",) if config.schedule != "cosine" else ())


# Validation tables of BaselineConfig: (field, minimum) of the integers, and the reals.
_COUNTS = {
    "width": 1, "heads": 1, "n_blocks": 1, "tau_min": 1, "tau_max": 1, "epochs": 1,
    "batch_size": 1, "step_epochs": 1, "seed": 0, "checkpoint_every": 1,
}  # fmt: skip
_POSITIVE = ("mlp_ratio", "lr", "step_gamma", "noise_variance", "mask_fraction")
_NONNEGATIVE = ("weight_decay", "warmup_epochs", "grad_clip")
_CHOICES = {"model": MODELS, "value_activation": VALUE_ACTIVATIONS, "output": OUTPUTS,
            "schedule": SCHEDULES}  # fmt: skip


@dataclass(frozen=True)
class BaselineConfig:
    """Model and training recipe of a backprop baseline.

    Parameters
    ----------
    model : {"recycled", "vit"}
        ``"recycled"``: one pre-LN transformer block iterated τ times (paper §V-C);
        ``"vit"``: ``n_blocks`` distinct pre-LN blocks applied once.
    image_shape : (int, int)
        (H, W) of the single-channel images, in pixels.
    patch : int
        Side of the square patches (4 by default: N = 49 tokens on 28×28 images; 2 gives
        N = 196). It must divide H and W.
    width : int
        Token width D (a multiple of ``heads``).
    heads : int
        Attention heads; each has D / heads dimensions.
    mlp_ratio : float
        Hidden width of the MLP over D (less with SwiGLU values: ``models.mlp_hidden_width``).
    value_activation : {"none", "gelu", "swiglu"}
        MABViT value activation applied to the attention values before the softmax average.
    parallel : bool
        MABViT/PaLM parallel block x' = x + SA(LN(x)) + MLP(LN(x)) instead of the serial
        pre-LN block.
    n_blocks : int
        Number of distinct blocks of the ViT (ignored by the recycled block).
    output : {"clip", "sigmoid"}
        ``"clip"``: the head F_out is linear, trained on its raw output, and predictions are
        clipped to [0, 1]; ``"sigmoid"``: a sigmoid follows F_out.
    tau_min, tau_max : int
        Training iterations τ of the recycled block, drawn uniformly from
        {tau_min, ..., tau_max} at every optimiser step (3..7 in the paper).
    epochs : int
        The most passes over the training images (the schedule spans them all); training
        stops sooner when the stopping rule holds (docs/convergence.md).
    batch_size : int
        Images per optimiser step.
    lr : float
        Peak learning rate of AdamW.
    weight_decay : float
        AdamW's decoupled weight decay (applied to matrices only; biases, LayerNorm
        parameters are not decayed).
    schedule : {"cosine", "step", "constant"}
        Learning rate per optimiser step after a linear warm-up of ``warmup_epochs``: cosine
        decay to 0 at the last step, × ``step_gamma`` every ``step_epochs`` epochs, or constant.
    warmup_epochs : float
        Length of the linear warm-up, in epochs (0 for none).
    step_epochs, step_gamma : int, float
        Period (in epochs) and factor of the step schedule.
    grad_clip : float
        Maximum global gradient norm; 0 disables clipping.
    mask_fraction : float
        Fraction of patches masked (set to zero pixels) in the masked task (0.3).
    noise_variance : float
        Variance of the Gaussian pixel noise of the denoising task (0.7).
    val_fraction : float
        Fraction of the training images held out as the validation set, a seeded random
        subset (``numpy.random.default_rng(seed)``; at least one image when > 0): its loss
        after every epoch is the validation curve that decides early stopping and which
        epoch's weights are kept. 0: train on every image, for ``epochs`` epochs, never
        ``converged``.
    rel_tol, patience : float, int
        The stopping rule (:func:`spinsa._convergence.stopping_epoch`): stop when the best
        validation loss improved by less than ``rel_tol`` (relative) over the last
        ``patience`` epochs; 0.005 and 5 by default.
    seed : int
        Seeds the initial weights, the validation split and every random draw of training
        (order of the images, τ, masks, noise; the validation set's masks and noise are
        drawn once, from ``seed + 2``).
    device : str
        ``"auto"`` (CUDA when present, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    checkpoint_every : int
        Write the checkpoint every this many epochs (and always after the last one).
    progress : bool
        Show the training progress (:func:`spinsa._progress.progress`).
    """

    model: Literal["recycled", "vit"] = "recycled"
    image_shape: tuple[int, int] = (28, 28)
    patch: int = 4
    width: int = 128
    heads: int = 4
    mlp_ratio: float = 4.0
    value_activation: Literal["none", "gelu", "swiglu"] = "none"
    parallel: bool = False
    n_blocks: int = 5
    output: Literal["clip", "sigmoid"] = "clip"
    tau_min: int = 3
    tau_max: int = 7
    epochs: int = 20
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.05
    schedule: Literal["cosine", "step", "constant"] = "cosine"
    warmup_epochs: float = 1.0
    step_epochs: int = 10
    step_gamma: float = 0.1
    grad_clip: float = 1.0
    mask_fraction: float = 0.3
    noise_variance: float = 0.7
    val_fraction: float = 0.1
    rel_tol: float = DEFAULT_REL_TOL
    patience: int = DEFAULT_PATIENCE
    seed: int = 0
    device: str = "auto"
    checkpoint_every: int = 1
    progress: bool = True

    def __post_init__(self) -> None:
        for name, choices in _CHOICES.items():
            check_choice(getattr(self, name), name, choices)
        for name in ("parallel", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        grid = PatchEmbedding(image_shape=self.image_shape, patch=self.patch)  # checks both
        if grid.n_tokens < 2:
            H, W = grid.image_shape
            raise ValueError(f"patch = {grid.patch} leaves fewer than 2 tokens in a {H}x{W} image")
        values = {"image_shape": grid.image_shape, "patch": grid.patch}
        values |= {name: check_count(getattr(self, name), name, m) for name, m in _COUNTS.items()}
        values |= {name: check_positive(getattr(self, name), name) for name in _POSITIVE}
        for name in _NONNEGATIVE:
            values[name] = check_real(getattr(self, name), name)
            if values[name] < 0:
                raise ValueError(f"{name} must be >= 0, got {values[name]!r}")
        if values["width"] % values["heads"]:
            raise ValueError(f"width = {self.width} must be a multiple of heads = {self.heads}")
        if values["tau_max"] < values["tau_min"]:
            raise ValueError(f"tau_max = {self.tau_max} must be >= tau_min = {self.tau_min}")
        if not values["mask_fraction"] < 1:
            raise ValueError(f"mask_fraction must be in (0, 1), got {self.mask_fraction!r}")
        values["val_fraction"] = check_real(self.val_fraction, "val_fraction")
        if not 0 <= values["val_fraction"] < 1:
            raise ValueError(
                f"val_fraction must be in [0, 1) (0.1 holds out a tenth of the training "
                f"images; 0 none), got {self.val_fraction!r}"
            )
        values["rel_tol"], values["patience"] = check_rule(self.rel_tol, self.patience)
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"device must be a name such as 'auto' or 'cuda', got {self.device!r}")
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def n_tokens(self) -> int:
        """N = (H / patch) (W / patch)."""
        return (self.image_shape[0] // self.patch) * (self.image_shape[1] // self.patch)

    @property
    def n_masked(self) -> int:
        """Patches masked per image in the masked task: :func:`spinsa.tasks.masked_count`."""
        return masked_count(self.mask_fraction, self.n_tokens)

    @classmethod
    def quick(cls, **overrides: Any) -> BaselineConfig:
        """A small recipe that trains in seconds on a CPU (the ``--quick`` runs).

        Width 32, 2 heads, 2 epochs, batch 64, lr 2e-3, no warm-up, CPU; any field can be
        overridden.
        """
        base = dict(width=32, heads=2, epochs=2, batch_size=64, lr=2e-3, warmup_epochs=0.0)
        return cls(**{**base, "device": "cpu", **overrides})

    def replace(self, **changes: Any) -> BaselineConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (tuples become lists), ready for TOML or HDF5 attributes."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BaselineConfig:
        """Build from a mapping; an unknown key raises a ValueError that lists the known ones."""
        return config_from_dict(cls, values, "the baseline config")

    @classmethod
    def from_toml(cls, source: str | os.PathLike) -> BaselineConfig:
        """Read a config from a TOML file (a path) or TOML text (:func:`spinsa._config.read_toml`).

        The keys are the field names, either at the top level or in a ``[baseline]`` table
        (then the only top-level key).
        """
        data = read_toml(source)
        if "baseline" not in data:
            return cls.from_dict(data)
        check_keys(data, ["baseline"], "a TOML config with a [baseline] table")
        return config_from_dict(cls, data["baseline"], "[baseline]")

    def to_toml(self) -> str:
        """The config as TOML text under a ``[baseline]`` table (read back by from_toml)."""
        # JSON writes booleans, numbers, strings and lists of numbers as TOML does.
        items = self.to_dict().items()
        return "[baseline]\n" + "".join(f"{key} = {json.dumps(v)}\n" for key, v in items)


def check_images(images, image_shape: tuple[int, int], name: str = "images") -> np.ndarray:
    """A finite, C-contiguous float32 array of at least one image (P, H, W) in [0, 1]."""
    images = _check_images(images, name, tuple(image_shape), np.float32)
    if images.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one image, got shape {images.shape}")
    return images
