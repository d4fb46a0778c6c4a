"""Torch on first use: the one import that says how to install it, and device resolution.

``import spinsa`` never imports torch; the functions that need it call :func:`import_torch`.
"""

from __future__ import annotations

from typing import Any

from spinsa._checks import MissingDependencyError

__all__ = ["import_torch", "resolve_device", "device_name"]


def import_torch() -> Any:
    """``import torch``, or a :class:`MissingDependencyError` that says how to install it."""
    try:
        import torch
    except ImportError:
        raise MissingDependencyError(
            'this needs PyTorch, which is not installed: pip install "spinsa[torch]" (or the '
            "CUDA build of torch that matches your driver)"
        ) from None
    return torch


def resolve_device(device: str = "auto") -> Any:
    """A ``torch.device``: ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``,
    ``"cuda:<k>"``.

    Parameters
    ----------
    device : str
        One of the names above.

    Returns
    -------
    torch.device

    Raises
    ------
    ValueError
        An unknown name, or CUDA asked for when torch sees no CUDA device.
    """
    torch = import_torch()
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        return torch.device("cpu")
    if isinstance(device, str) and (device == "cuda" or device.startswith("cuda:")):
        if not torch.cuda.is_available():
            built = torch.version.cuda or "no CUDA (a CPU-only build)"
            raise ValueError(
                f"device={device!r} was requested but CUDA is not available (torch "
                f"{torch.__version__}, built with {built}); use device='cpu' or 'auto', or "
                "install the CUDA build of torch that matches your driver"
            )
        return torch.device(device)
    raise ValueError(f"device must be one of 'auto', 'cpu', 'cuda', 'cuda:<k>'; got {device!r}")


def device_name(dev) -> str:
    """A readable description of a torch device: ``"cuda:0 (NVIDIA H100 ...)"``, ``"cpu (...)"``."""
    torch = import_torch()
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return f"cpu (torch, {torch.get_num_threads()} threads)"
