"""Lazy access to torch for the baselines (``import spinsa.baselines`` never imports it)."""

from __future__ import annotations

from typing import Any


def require_torch() -> Any:
    """Import and return torch, or raise an ImportError that says how to install it."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            'the backprop baselines (spinsa.baselines) need PyTorch: pip install "spinsa[torch]"'
        ) from exc
    return torch


def resolve_device(device: str) -> Any:
    """``"auto"`` -> CUDA when available, else CPU; ``"cpu"``/``"cuda"``/``"cuda:1"`` as given.

    Raises
    ------
    ValueError
        A CUDA device was asked for and none is available.
    """
    torch = require_torch()
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device = {device!r} was requested but CUDA is not available")
    return dev
