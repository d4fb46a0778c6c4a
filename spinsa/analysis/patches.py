"""Texture of the predicted patches (D'Amico & Negri 2024, Fig. 2).

In the masked task, how much structure does a model put inside a patch it had to predict?
For every masked token of every image this module takes the pixels of that patch in the
predicted (decoded) image and computes their variance; a model that fills masked patches
with flat grey has variances near zero, a clean digit has many large ones. The distribution
of these variances is compared across models (fitted couplings, Hebbian couplings, a ViT...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from spinsa import _draw
from spinsa._checks import check_count, check_finite
from spinsa.analysis._results import AnalysisResult, bin_edges, labels

__all__ = [
    "PatchVarianceHistograms",
    "PatchVariances",
    "masked_patch_variances",
    "patch_pixels",
    "patch_variance_histograms",
]


def patch_pixels(images, patch: int) -> np.ndarray:
    """Pixels of every patch of images (P, H, W[, C]) -> (P, N, patch * patch * C).

    The side ``patch`` of the square patches must divide H and W. Tokens follow
    :class:`spinsa.PatchEmbedding`: token k = grid row ``k // (W / patch)``, grid column
    ``k % (W / patch)``; inside a token, pixels row-major, channels last.
    """
    images = np.asarray(images, dtype=np.float64)
    patch = check_count(patch, "patch", 1)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4:
        raise ValueError(f"images must have shape (P, H, W) or (P, H, W, C), got {images.shape}")
    P, H, W, C = images.shape
    if H % patch or W % patch:
        raise ValueError(f"patch = {patch} must divide the image height {H} and width {W}")
    check_finite(images, "images")
    gh, gw = H // patch, W // patch
    t = images.reshape(P, gh, patch, gw, patch, C).transpose(0, 1, 3, 2, 4, 5)
    return t.reshape(P, gh * gw, patch * patch * C)


@dataclass(frozen=True)
class PatchVariances(AnalysisResult):
    """Variance of the pixels inside every masked patch.

    Attributes
    ----------
    variance : ndarray of float64, shape (K,)
        One value per masked (image, token), in image-major order: the population variance
        (ddof = 0) of the patch's patch² · C pixel values.
    sample, token : ndarray of int64, shape (K,)
        Image and token of each value.
    patch : int
    """

    _same_shape = ("variance sample token",)
    variance: np.ndarray
    sample: np.ndarray
    token: np.ndarray
    patch: int = 1

    def plot(self, ax=None):
        """Histogram of the pixel variance of the masked patches (log counts)."""
        ax = _draw.axes(ax)
        ax.hist(self.variance, bins=50, color="C0", log=True)
        title = f"{self.variance.size} masked patches ({self.patch}×{self.patch} pixels)"
        _draw.finish(ax, title, "variance of the pixels of a patch", "patches")
        return ax


def masked_patch_variances(images, mask, patch: int) -> PatchVariances:
    """Variance of the predicted pixels inside each masked patch.

    Parameters
    ----------
    images, patch
        As in :func:`patch_pixels`: predicted images (e.g.
        ``embedding.decode(trajectory.final)``) or, for reference, the clean images.
    mask : ndarray of bool, shape (P, N)
        True for the masked tokens (as returned by :func:`spinsa.tasks.mask_tokens`).

    Returns
    -------
    PatchVariances
        One variance per masked (image, token), shape (K,) with K = ``mask.sum()``, with
        the image and token of each.
    """
    pixels = patch_pixels(images, patch)
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != pixels.shape[:2]:
        raise ValueError(
            f"mask must be a bool array of shape (P, N) = {pixels.shape[:2]}, "
            f"got {mask.dtype} array of shape {mask.shape}"
        )
    sample, token = np.nonzero(mask)
    variance = pixels[sample, token].var(axis=-1)
    return PatchVariances(variance, sample.astype(np.int64), token.astype(np.int64), int(patch))


@dataclass(frozen=True)
class PatchVarianceHistograms(AnalysisResult):
    """Distributions of masked-patch variances, one row per model.

    Attributes
    ----------
    bin_edges : ndarray of float64, shape (B + 1,)
    counts : ndarray of int64, shape (M, B)
    density : ndarray of float64, shape (M, B)
        Normalised so that sum(density * widths) = 1 per model (values outside the edges
        are left out of the counts but kept in the normalisation).
    mean, median : ndarray of float64, shape (M,)
    n_patches : ndarray of int64, shape (M,)
    models : tuple of str, length M
    """

    _coords = {"M": "models"}

    _same_shape = ("counts density", "mean median n_patches")
    bin_edges: np.ndarray
    counts: np.ndarray
    density: np.ndarray
    mean: np.ndarray
    median: np.ndarray
    n_patches: np.ndarray
    models: tuple[str, ...] = ()

    def __post_init__(self):
        super().__post_init__()
        expected = (len(self.models), self.bin_edges.shape[0] - 1)
        if self.counts.shape != expected:
            raise ValueError(f"counts and density must have shape (M, B) = {expected}")

    def plot(self, ax=None):
        """The variance densities of every model, the first (the clean images) in black."""
        ax = _draw.axes(ax, figsize=(6.5, 4.2))
        for m, model in enumerate(labels(self.models, self.density.shape[0])):
            color, ls = "0.2" if m == 0 else f"C{m - 1}", ("-", "--", ":", "-.")[m % 4]
            label = f"{model}: mean {self.mean[m]:.4g}"
            ax.stairs(self.density[m], self.bin_edges, color=color, lw=1.6, ls=ls, label=label)
        ax.set_yscale("log")
        title = f"{int(self.n_patches[0])} masked patches"
        _draw.finish(ax, title, "variance of the pixels of a masked patch", "probability density")
        return ax


def patch_variance_histograms(
    results: Mapping[str, PatchVariances], bins=50, range=None
) -> PatchVarianceHistograms:
    """Histograms of masked-patch variances for several models on common bins.

    Parameters
    ----------
    results : mapping of str to PatchVariances
        One entry per model, e.g. ``{"fitted": ..., "hebbian": ..., "clean": ...}``.
    bins : int or array_like
        Number of bins or explicit edges.
    range : (float, float), optional
        Range of the bins; default: 0 to the largest variance (at least 0.25, the largest
        possible variance of values in [0, 1]).

    Returns
    -------
    PatchVarianceHistograms
        Counts and densities of shape (M, B), one row per model in the order of
        ``results``, on common edges of shape (B + 1,); mean, median and number of patches
        of shape (M,).
    """
    if not results or not all(isinstance(v, PatchVariances) for v in results.values()):
        raise ValueError("results must be a non-empty mapping of names to PatchVariances")
    if range is None:
        top = max(float(v.variance.max(initial=0.0)) for v in results.values())
        range = (0.0, max(top, 0.25))
    edges = bin_edges(bins, float(range[0]), float(range[1]))
    variances = [v.variance for v in results.values()]
    counts = np.array([np.histogram(v, bins=edges)[0] for v in variances], dtype=np.int64)
    sizes = np.array([v.size for v in variances], dtype=np.int64)

    def stat(f) -> np.ndarray:
        return np.array([float(f(v)) if v.size else np.nan for v in variances])

    return PatchVarianceHistograms(
        bin_edges=edges,
        counts=counts,
        density=counts / (np.maximum(sizes, 1)[:, None] * np.diff(edges)),
        mean=stat(np.mean),
        median=stat(np.median),
        n_patches=sizes,
        models=tuple(str(m) for m in results),
    )
