"""The two tasks in pixel space, for training the baselines on the device.

They follow :mod:`spinsa.tasks` exactly, batch by batch, with torch generators:

* masked prediction: k = int(fraction · N) patches of every image
  (:func:`spinsa.tasks.masked_count`), a uniformly random subset drawn independently per
  image, are set to zero pixels (the pixel-space counterpart of
  :func:`spinsa.tasks.mask_tokens`, which zeroes the tokens' spins);
* denoising: y = x + sqrt(variance) z, rescaled per image to the clean image's mean and
  standard deviation, clipped to [0, 1] (:func:`spinsa.tasks.corrupt_gaussian`).

Evaluation uses :mod:`spinsa.tasks` itself (numpy, seeded), so that the baselines and the
bare self-attention see the same corrupted test images.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from spinsa._checks import check_finite

__all__ = ["check_images", "mask_batch", "noise_batch", "token_index_map"]


def check_images(images, image_shape: tuple[int, int], name: str = "images") -> np.ndarray:
    """A finite float32 array of shape (P, H, W) with values in [0, 1].

    Raises
    ------
    ValueError
        Wrong shape, non-real dtype, NaN/inf, values outside [0, 1] or no image at all.
    """
    images = np.asarray(images)
    H, W = image_shape
    if images.ndim != 3 or images.shape[1:] != (H, W):
        hint = " (for a single image pass images[None])" if images.shape == (H, W) else ""
        raise ValueError(f"{name} must have shape (P, {H}, {W}), got {images.shape}{hint}")
    if images.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one image, got shape {images.shape}")
    if not np.issubdtype(images.dtype, np.number) or np.iscomplexobj(images):
        raise ValueError(f"{name} must be a real array, got dtype {images.dtype}")
    images = np.ascontiguousarray(images, dtype=np.float32)
    check_finite(images, name)
    lo, hi = float(images.min()), float(images.max())
    if lo < 0 or hi > 1:
        hint = " (8-bit images: divide by 255)" if hi > 1 and lo >= 0 else ""
        raise ValueError(
            f"{name} must have pixel values in [0, 1], got values in [{lo:g}, {hi:g}]{hint}"
        )
    return images


def token_index_map(image_shape: tuple[int, int], patch: int) -> np.ndarray:
    """(H, W) int64: the token (row-major patch index) of every pixel.

    The same map as :meth:`spinsa.PatchEmbedding.token_index_map`.
    """
    H, W = image_shape
    gw = W // patch
    r = np.arange(H)[:, None] // patch
    c = np.arange(W)[None, :] // patch
    return (r * gw + c).astype(np.int64)


def mask_batch(
    clean: Any, n_masked: int, index_map: Any, n_tokens: int, generator: Any
) -> tuple[Any, Any]:
    """Zero ``n_masked`` random patches of every image.

    Parameters
    ----------
    clean : torch.Tensor, shape (B, H, W)
    n_masked : int
        Patches masked per image (k).
    index_map : torch.Tensor, shape (H, W), int64, on clean's device
        :func:`token_index_map`.
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
    import torch

    B, N = clean.shape[0], n_tokens
    order = torch.rand((B, N), generator=generator, device=clean.device).argsort(dim=1)
    mask = torch.zeros((B, N), dtype=torch.bool, device=clean.device)
    mask.scatter_(1, order[:, :n_masked], True)
    pixel_mask = mask[:, index_map]
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
    import torch

    z = torch.randn(clean.shape, generator=generator, device=clean.device, dtype=clean.dtype)
    noisy = clean + math.sqrt(variance) * z
    dims = tuple(range(1, clean.ndim))
    m = clean.mean(dim=dims, keepdim=True)
    s = clean.std(dim=dims, keepdim=True, correction=0)
    my = noisy.mean(dim=dims, keepdim=True)
    sy = noisy.std(dim=dims, keepdim=True, correction=0)
    ratio = torch.where(sy > 0, s / sy.clamp_min(torch.finfo(sy.dtype).tiny), 0.0)
    return (m + (noisy - my) * ratio).clamp_(0.0, 1.0)
