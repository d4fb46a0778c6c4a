"""Transformer baselines trained by backpropagation (D'Amico & Negri 2024, §V-C).

* :class:`RecycledBlock` — one pre-LN transformer block iterated τ times (τ ∈ {3..7} per
  training step), evaluated at every t = 1..T like the spin dynamics;
* :class:`ViT` — 5 distinct blocks applied once (a constant in t);
* MABViT options on the block: value activation ``"none" | "gelu" | "swiglu"`` and the
  parallel block x' = x + SA(LN(x)) + MLP(LN(x)).

Typical use::

    from spinsa.baselines import BaselineConfig, train_baseline, evaluate_baseline
    config = BaselineConfig(model="recycled", patch=4, epochs=20)
    model, history = train_baseline(config, images_train, "masked", checkpoint="rb.pt",
                                     resume=True)
    result = evaluate_baseline(model, images_test, "masked", T=20, seed=0)
    curve = result.summary().mean.all          # (T,) mean squared error vs t

Importing this package does not import torch; the names below load their module (and torch)
on first use, and say ``pip install "spinsa[torch]"`` when it is missing.
"""

from __future__ import annotations

import importlib
from typing import Any

from spinsa.baselines.config import BaselineConfig as BaselineConfig

_MODULES = {
    "models": ("Block", "RecycledBlock", "ViT", "build_model", "count_parameters"),
    "train": ("TrainHistory", "load_checkpoint", "train_baseline"),
    "evaluate": (
        "BaselineEvaluation",
        "corrupt_images",
        "evaluate_baseline",
        "load_baseline",
        "predict_trajectory",
    ),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}

__all__ = ["BaselineConfig", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"spinsa.baselines.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'spinsa.baselines' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
