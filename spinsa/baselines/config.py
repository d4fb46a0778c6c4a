"""Configuration of the backprop baselines (torch-free, so that it loads without torch).

A :class:`BaselineConfig` describes one model (the recycled transformer block or the ViT) and
its training recipe. It is a frozen dataclass validated in ``__post_init__``, round-trips
through TOML (:meth:`BaselineConfig.from_toml`, :meth:`BaselineConfig.to_toml`) and is stored
with every checkpoint, so that a resumed run can refuse a changed recipe.

Example TOML (every key optional; a ``[baseline]`` table or top-level keys)::

    [baseline]
    model = "recycled"        # or "vit"
    patch = 4                 # 4x4 patches: N = 49 tokens on 28x28 images
    width = 128
    heads = 4
    value_activation = "none" # "gelu" or "swiglu" (MABViT)
    parallel = false
    epochs = 20
    schedule = "cosine"       # "step" or "constant"
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Literal

from spinsa._checks import check_choice, check_count, check_positive
from spinsa.tasks import TASKS

__all__ = [
    "BaselineConfig",
    "MODELS",
    "OUTPUTS",
    "SCHEDULES",
    "TASKS",
    "VALUE_ACTIVATIONS",
]

MODELS = ("recycled", "vit")
VALUE_ACTIVATIONS = ("none", "gelu", "swiglu")
SCHEDULES = ("cosine", "step", "constant")
OUTPUTS = ("clip", "sigmoid")

# Fields that may change between a run and its resumption (they do not change the numbers).
RESUME_NEUTRAL = ("device", "progress", "checkpoint_every")


def _check_fraction(value, name: str) -> float:
    value = check_positive(value, name)
    if not value < 1:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return value


def _check_nonnegative(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a real number >= 0, got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


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
        Hidden width of the MLP is ``round(mlp_ratio * width)`` (reduced for SwiGLU values,
        see :class:`spinsa.baselines.models.Block`).
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
        Passes over the training images.
    batch_size : int
        Images per optimiser step.
    lr : float
        Peak learning rate of AdamW.
    weight_decay : float
        AdamW's decoupled weight decay (applied to matrices only; biases, LayerNorm
        parameters are not decayed).
    schedule : {"cosine", "step", "constant"}
        Learning-rate schedule per optimiser step, after a linear warm-up of
        ``warmup_epochs``: cosine decay to 0 at the last step, or multiplication by
        ``step_gamma`` every ``step_epochs`` epochs, or constant.
    warmup_epochs : float
        Length of the linear warm-up, in epochs (0 for none).
    step_epochs : int
        Period of the step schedule, in epochs.
    step_gamma : float
        Factor of the step schedule.
    grad_clip : float
        Maximum global gradient norm; 0 disables clipping.
    mask_fraction : float
        Fraction of patches masked (set to zero pixels) in the masked task (0.3).
    noise_variance : float
        Variance of the Gaussian pixel noise of the denoising task (0.7).
    seed : int
        Seeds the initial weights and every random draw of training (order of the images,
        τ, masks, noise).
    device : str
        ``"auto"`` (CUDA when present, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    checkpoint_every : int
        Write the checkpoint every this many epochs (and always after the last one).
    progress : bool
        Show tqdm progress bars.
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
    seed: int = 0
    device: str = "auto"
    checkpoint_every: int = 1
    progress: bool = True

    def __post_init__(self) -> None:
        check_choice(self.model, "model", MODELS)
        shape = tuple(self.image_shape)
        if len(shape) != 2:
            raise ValueError(f"image_shape must be (H, W), got {self.image_shape!r}")
        H = check_count(shape[0], "image_shape[0] (H)", 1)
        W = check_count(shape[1], "image_shape[1] (W)", 1)
        object.__setattr__(self, "image_shape", (H, W))
        patch = check_count(self.patch, "patch", 1)
        if H % patch or W % patch:
            raise ValueError(
                f"patch = {patch} must divide the image height and width, got image_shape "
                f"= {(H, W)}"
            )
        if (H // patch) * (W // patch) < 2:
            raise ValueError(f"patch = {patch} leaves fewer than 2 tokens in a {H}x{W} image")
        width = check_count(self.width, "width", 1)
        heads = check_count(self.heads, "heads", 1)
        if width % heads:
            raise ValueError(f"width = {width} must be a multiple of heads = {heads}")
        floats = {"mlp_ratio": check_positive(self.mlp_ratio, "mlp_ratio")}
        check_choice(self.value_activation, "value_activation", VALUE_ACTIVATIONS)
        if not isinstance(self.parallel, bool):
            raise ValueError(f"parallel must be True or False, got {self.parallel!r}")
        check_count(self.n_blocks, "n_blocks", 1)
        check_choice(self.output, "output", OUTPUTS)
        tau_min = check_count(self.tau_min, "tau_min", 1)
        tau_max = check_count(self.tau_max, "tau_max", 1)
        if tau_max < tau_min:
            raise ValueError(f"tau_max = {tau_max} must be >= tau_min = {tau_min}")
        check_count(self.epochs, "epochs", 1)
        check_count(self.batch_size, "batch_size", 1)
        floats["lr"] = check_positive(self.lr, "lr")
        floats["weight_decay"] = _check_nonnegative(self.weight_decay, "weight_decay")
        check_choice(self.schedule, "schedule", SCHEDULES)
        floats["warmup_epochs"] = _check_nonnegative(self.warmup_epochs, "warmup_epochs")
        check_count(self.step_epochs, "step_epochs", 1)
        floats["step_gamma"] = check_positive(self.step_gamma, "step_gamma")
        floats["grad_clip"] = _check_nonnegative(self.grad_clip, "grad_clip")
        floats["mask_fraction"] = _check_fraction(self.mask_fraction, "mask_fraction")
        floats["noise_variance"] = check_positive(self.noise_variance, "noise_variance")
        for name, value in floats.items():
            object.__setattr__(self, name, value)
        check_count(self.seed, "seed", 0)
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(
                f"device must be a string such as 'auto' or 'cuda', got {self.device!r}"
            )
        check_count(self.checkpoint_every, "checkpoint_every", 1)
        if not isinstance(self.progress, bool):
            raise ValueError(f"progress must be True or False, got {self.progress!r}")

    # ----------------------------------------------------------------- derived sizes

    @property
    def n_tokens(self) -> int:
        """N = (H / patch) (W / patch)."""
        return (self.image_shape[0] // self.patch) * (self.image_shape[1] // self.patch)

    @property
    def n_masked(self) -> int:
        """Patches masked per image in the masked task: :func:`spinsa.tasks.masked_count`."""
        from spinsa.tasks import masked_count

        return masked_count(self.mask_fraction, self.n_tokens)

    # ----------------------------------------------------------------- presets

    @classmethod
    def quick(cls, **overrides: Any) -> BaselineConfig:
        """A small recipe that trains in seconds on a CPU (the ``--quick`` runs).

        Width 32, 2 heads, 2 epochs, batch 64, no warm-up, CPU; any field can be overridden.
        """
        base = dict(
            width=32,
            heads=2,
            epochs=2,
            batch_size=64,
            lr=2e-3,
            warmup_epochs=0.0,
            device="cpu",
        )
        base.update(overrides)
        return cls(**base)

    def replace(self, **changes: Any) -> BaselineConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # ----------------------------------------------------------------- TOML

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (tuples become lists), ready for TOML or HDF5 attributes."""
        d = dataclasses.asdict(self)
        d["image_shape"] = list(self.image_shape)
        return d

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BaselineConfig:
        """Build from a mapping; unknown keys raise a ValueError that lists the known ones."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(
                f"unknown baseline config key(s) {', '.join(map(repr, unknown))}; "
                f"known keys: {', '.join(known)}"
            )
        values = dict(values)
        if "image_shape" in values:
            values["image_shape"] = tuple(values["image_shape"])
        return cls(**values)

    @classmethod
    def from_toml(cls, source: str | os.PathLike) -> BaselineConfig:
        """Read a config from a TOML file (a path) or TOML text.

        The keys are the field names, either at the top level or in a ``[baseline]`` table.
        """
        try:
            import tomllib
        except ModuleNotFoundError:  # pragma: no cover - Python 3.10
            import tomli as tomllib

        if isinstance(source, os.PathLike) or (
            isinstance(source, str) and "=" not in source and "[" not in source
        ):
            with open(source, "rb") as fh:
                data = tomllib.load(fh)
        elif isinstance(source, str):
            data = tomllib.loads(source)
        else:
            raise ValueError(f"source must be a path or TOML text, got {type(source).__name__}")
        if "baseline" in data:
            extra = sorted(set(data) - {"baseline"})
            if extra:
                raise ValueError(
                    f"a TOML config with a [baseline] table must not have other top-level "
                    f"keys, got {', '.join(map(repr, extra))}"
                )
            data = data["baseline"]
        return cls.from_dict(data)

    def to_toml(self) -> str:
        """The config as TOML text under a ``[baseline]`` table (read back by from_toml)."""
        lines = ["[baseline]"]
        for key, value in self.to_dict().items():
            lines.append(f"{key} = {_toml_value(value)}")
        return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")
