"""Simple predictors that every reconstruction is read against (docs/model.md, 'References').

A model's error means little alone: the masked task is also solved, to some degree, by
filling the hole with the mean training image, and denoising by blurring. These functions
compute such predictions from the same corrupted inputs as the model, in the same pixel
space, with numpy and scipy only:

masked prediction (``pixel_mask`` True at masked pixels; visible pixels are kept)
    ``masked_input`` the input itself (masked pixels black), ``mean_fill`` the mean training
    image in the hole, ``harmonic`` the harmonic (neighbour-averaging) inpainting: every
    masked pixel equals the mean of its in-image 3x3 neighbours, solved exactly,
    ``nearest`` the training image nearest on the visible pixels, copied into the hole;
denoising
    ``noisy_input`` the input itself, ``mean_image`` the mean training image,
    ``blur`` a Gaussian blur of the input, ``knn_mean`` the mean of the k training images
    nearest to the input; sigma and k are chosen on corrupted training images (leave the
    image itself out), never on the test set.

:func:`task_references` returns every reference of a task with its per-image errors
(:func:`spinsa.tasks.reconstruction_errors`), ready to stand beside a model's curve.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spinsa._checks import check_choice
from spinsa.tasks import TASKS, ReconstructionErrors, reconstruction_errors

__all__ = [
    "REFERENCES",
    "BLUR_SIGMAS",
    "KNN_KS",
    "Reference",
    "mean_fill",
    "harmonic_inpaint",
    "nearest_fill",
    "gaussian_blur",
    "knn_mean",
    "choose_blur_sigma",
    "choose_k",
    "task_references",
]

#: The references of each task, in the order the reports list them, with their labels.
REFERENCES: dict[str, dict[str, str]] = {
    "masked": {
        "masked_input": "masked input",
        "mean_fill": "mean training image in the hole",
        "harmonic": "harmonic (neighbour-averaging) inpainting",
        "nearest": "nearest training image on the visible pixels",
    },
    "denoise": {
        "noisy_input": "noisy input",
        "mean_image": "mean training image",
        "blur": "Gaussian blur",
        "knn_mean": "mean of the k nearest training images",
    },
}
#: Candidate blur widths (pixels) and neighbour counts, chosen among on training images.
BLUR_SIGMAS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0)
KNN_KS = (1, 2, 3, 5, 10, 20, 50, 100)
_CHUNK = 256  # queries per distance block: 256 x M float32


@dataclass(frozen=True, eq=False)
class Reference:
    """One reference predictor's errors on a task's inputs.

    Attributes
    ----------
    name : str
        Key of :data:`REFERENCES`.
    label : str
    errors : ReconstructionErrors
        Per-image errors, fields of shape (P,).
    params : dict
        What was chosen (``sigma``, ``k``...) and on how many training images.
    """

    name: str
    label: str
    errors: ReconstructionErrors
    params: dict[str, Any] = field(default_factory=dict)


def _images(a, name: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 3:
        raise ValueError(f"{name} must have shape (P, H, W), got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return a


def _mask(pixel_mask, shape) -> np.ndarray:
    m = np.asarray(pixel_mask)
    if m.dtype != np.bool_ or m.shape != shape:
        raise ValueError(
            f"pixel_mask must be a bool array of shape {shape}, got {m.dtype} {m.shape}"
        )
    return m


# ------------------------------------------------------------------ masked prediction
def mean_fill(inputs, pixel_mask, mean_image) -> np.ndarray:
    """The mean training image in the masked pixels, the input elsewhere.

    Parameters
    ----------
    inputs : array_like, shape (P, H, W)
    pixel_mask : array_like of bool, shape (P, H, W)
    mean_image : array_like, shape (H, W)

    Returns
    -------
    ndarray, shape (P, H, W), float64
    """
    x = _images(inputs, "inputs")
    m = _mask(pixel_mask, x.shape)
    mean = np.asarray(mean_image, dtype=np.float64)
    if mean.shape != x.shape[1:]:
        raise ValueError(f"mean_image must have shape {x.shape[1:]}, got {mean.shape}")
    return np.where(m, mean, x)


_OFFSETS = [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if (dr, dc) != (0, 0)]


def harmonic_inpaint(inputs, pixel_mask, chunk: int = 1000) -> np.ndarray:
    """Harmonic inpainting: each masked pixel the mean of its in-image 3x3 neighbours.

    The fixed point of iterated 3x3 averaging of the masked pixels with the visible ones held,
    solved exactly: for masked p, deg(p) u_p - sum_{masked q ~ p} u_q = sum_{visible q ~ p}
    v_q, a sparse linear system per chunk of images (every connected hole touches a visible
    pixel unless the whole image is masked; such an image is filled with 0).

    Parameters
    ----------
    inputs : array_like, shape (P, H, W)
        The visible pixels are read; masked ones are ignored.
    pixel_mask : array_like of bool, shape (P, H, W)
    chunk : int
        Images per linear solve (memory).

    Returns
    -------
    ndarray, shape (P, H, W), float64
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.linalg import spsolve

    x = _images(inputs, "inputs")
    m = _mask(pixel_mask, x.shape)
    out = np.where(m, 0.0, x)
    P, H, W = x.shape
    solvable = ~m.reshape(P, -1).all(axis=1)
    for start in range(0, P, chunk):
        sl = np.arange(start, min(start + chunk, P))
        sl = sl[solvable[sl]]
        if sl.size == 0:
            continue
        hole = m[sl]
        ids = np.full(hole.shape, -1, dtype=np.int64)
        b, r, c = np.nonzero(hole)
        n = b.size
        if n == 0:
            continue
        ids[b, r, c] = np.arange(n)
        deg = np.zeros(n)
        rhs = np.zeros(n)
        rows, cols = [], []
        for dr, dc in _OFFSETS:
            r2, c2 = r + dr, c + dc
            inside = (r2 >= 0) & (r2 < H) & (c2 >= 0) & (c2 < W)
            deg += inside
            k = np.flatnonzero(inside)
            q = ids[b[k], r2[k], c2[k]]
            known = q < 0
            np.add.at(rhs, k[known], out[sl[b[k[known]]], r2[k[known]], c2[k[known]]])
            rows.append(k[~known])
            cols.append(q[~known])
        rows = np.concatenate(rows + [np.arange(n)])
        cols = np.concatenate(cols + [np.arange(n)])
        vals = np.concatenate([-np.ones(rows.size - n), deg])
        A = coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsc()
        out[sl[b], r, c] = spsolve(A, rhs)
    return out


def nearest_fill(inputs, pixel_mask, train, chunk: int = _CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """The training image nearest on the visible pixels, copied into the masked ones.

    Parameters
    ----------
    inputs : array_like, shape (P, H, W)
    pixel_mask : array_like of bool, shape (P, H, W)
    train : array_like, shape (M, H, W)
    chunk : int
        Queries per block of distances (memory: chunk x M floats).

    Returns
    -------
    prediction : ndarray, shape (P, H, W), float64
    index : ndarray of int64, shape (P,)
        The training image chosen for each input (squared distance over its visible pixels).
    """
    x = _images(inputs, "inputs")
    m = _mask(pixel_mask, x.shape)
    Y = np.asarray(train, dtype=np.float32).reshape(len(train), -1)
    if Y.shape[1] != x[0].size:
        raise ValueError(f"train must have shape (M, {x.shape[1]}, {x.shape[2]})")
    Y2 = Y * Y
    P = x.shape[0]
    index = np.empty(P, dtype=np.int64)
    for s in range(0, P, chunk):
        vis = (~m[s : s + chunk]).reshape(-1, Y.shape[1]).astype(np.float32)
        xv = x[s : s + chunk].reshape(-1, Y.shape[1]).astype(np.float32) * vis
        # sum_v (x - y)^2 = sum_v x^2 - 2 x.y + sum_v y^2; the first term is the same for all y
        dist = vis @ Y2.T - 2 * (xv @ Y.T)
        index[s : s + chunk] = np.argmin(dist, axis=1)
    nearest = Y[index].reshape(x.shape).astype(np.float64)
    return np.where(m, nearest, x), index


# ------------------------------------------------------------------ denoising
def gaussian_blur(images, sigma: float) -> np.ndarray:
    """Each image convolved with a Gaussian of width ``sigma`` pixels (edges reflected).

    Parameters
    ----------
    images : array_like, shape (P, H, W)
    sigma : float > 0

    Returns
    -------
    ndarray, shape (P, H, W), float64
    """
    from scipy.ndimage import gaussian_filter

    x = _images(images, "images")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return gaussian_filter(x, sigma=(0.0, float(sigma), float(sigma)), mode="reflect")


def _neighbours(x: np.ndarray, Y: np.ndarray, k: int, exclude, chunk: int) -> np.ndarray:
    """Indices (P, k) of the k training rows nearest to each query row (Euclidean)."""
    Yn = np.einsum("pk,pk->p", Y, Y, dtype=np.float64)
    out = np.empty((x.shape[0], k), dtype=np.int64)
    for s in range(0, x.shape[0], chunk):
        q = x[s : s + chunk].astype(np.float32)
        dist = Yn[None, :] - 2.0 * (q @ Y.T)
        if exclude is not None:
            dist[np.arange(q.shape[0]), exclude[s : s + chunk]] = np.inf
        part = np.argpartition(dist, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(dist, part, axis=1).argsort(axis=1)
        out[s : s + chunk] = np.take_along_axis(part, order, axis=1)
    return out


def knn_mean(inputs, train, k: int, *, exclude=None, chunk: int = _CHUNK) -> np.ndarray:
    """The mean of the k training images nearest to each input (all pixels, Euclidean).

    Parameters
    ----------
    inputs : array_like, shape (P, H, W)
    train : array_like, shape (M, H, W)
    k : int, 1 <= k < M
    exclude : array_like of int, shape (P,), optional
        A training image to leave out for each input (the input's own clean image when the
        queries are corrupted training images).

    Returns
    -------
    ndarray, shape (P, H, W), float64
    """
    x = _images(inputs, "inputs")
    Y = np.asarray(train, dtype=np.float32).reshape(len(train), -1)
    if not 1 <= k < Y.shape[0]:
        raise ValueError(f"k must be in [1, {Y.shape[0]}), got {k}")
    nb = _neighbours(x.reshape(x.shape[0], -1), Y, int(k), exclude, chunk)
    return Y[nb].mean(axis=1, dtype=np.float64).reshape(x.shape)


def _mse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean((a - b) ** 2))


def choose_blur_sigma(clean, noisy, sigmas=BLUR_SIGMAS) -> tuple[float, np.ndarray]:
    """The blur width with the smallest mean squared error on (clean, noisy) pairs.

    Parameters
    ----------
    clean, noisy : array_like, shape (P, H, W)
        Pairs of clean images and their corrupted versions.
    sigmas : sequence of float
        The candidate widths (in pixels) of :func:`gaussian_blur`.

    Returns
    -------
    sigma : float
    errors : ndarray, shape (len(sigmas),)
        Mean squared error of each candidate.
    """
    c, y = _images(clean, "clean"), _images(noisy, "noisy")
    errors = np.array([_mse(gaussian_blur(y, s), c) for s in sigmas])
    return float(sigmas[int(np.argmin(errors))]), errors


def choose_k(clean, noisy, train, ks=KNN_KS, exclude=None) -> tuple[int, np.ndarray]:
    """The neighbour count with the smallest mean squared error on (clean, noisy) pairs.

    ``exclude`` (one training index per pair) leaves each pair's own image out of its
    neighbours. One neighbour search at the largest k serves every candidate.

    Parameters
    ----------
    clean, noisy : array_like, shape (P, H, W)
        Pairs of clean images and their corrupted versions.
    train : array_like, shape (M, H, W)
        The images the neighbours are searched among.
    ks : sequence of int
        The candidate neighbour counts; those not below M are skipped.
    exclude : array_like of int, shape (P,), optional
        For each pair, the index in ``train`` of its own clean image.

    Returns
    -------
    k : int
    errors : ndarray, shape (len(ks),)
    """
    c, y = _images(clean, "clean"), _images(noisy, "noisy")
    Y = np.asarray(train, dtype=np.float32).reshape(len(train), -1)
    ks = [k for k in ks if k < Y.shape[0]]
    nb = _neighbours(y.reshape(y.shape[0], -1), Y, max(ks), exclude, _CHUNK)
    flat = c.reshape(c.shape[0], -1)
    errors = np.array([_mse(Y[nb[:, :k]].mean(axis=1, dtype=np.float64), flat) for k in ks])
    return int(ks[int(np.argmin(errors))]), errors


# ------------------------------------------------------------------ one task
def task_references(
    task: str,
    clean,
    inputs,
    train,
    *,
    pixel_mask=None,
    tune_clean=None,
    tune_noisy=None,
    tune_index=None,
) -> dict[str, Reference]:
    """Every reference of a task, with its per-image errors against the clean images.

    All images are in one pixel space (the embedding's: what the model's decoded states are
    compared with).

    Parameters
    ----------
    task : {"masked", "denoise"}
    clean : array_like, shape (P, H, W)
        The clean test images.
    inputs : array_like, shape (P, H, W)
        The corrupted inputs as the model sees them (decoded t = 0 states).
    train : array_like, shape (M, H, W)
        The training images (mean image, neighbours).
    pixel_mask : array_like of bool, shape (P, H, W)
        Masked task: True at masked pixels.
    tune_clean, tune_noisy : array_like, shape (K, H, W)
        Denoising: corrupted training images and their clean versions, to choose sigma and k.
    tune_index : array_like of int, shape (K,)
        Denoising: which training image each tuning pair is (left out of its neighbours).

    Returns
    -------
    dict
        ``name -> Reference`` in the order of :data:`REFERENCES`.
    """
    check_choice(task, "task", TASKS)
    clean = _images(clean, "clean")
    x = _images(inputs, "inputs")
    train = np.asarray(train, dtype=np.float32)
    mean_image = train.mean(axis=0, dtype=np.float64)
    preds: dict[str, tuple[np.ndarray, dict]] = {}
    if task == "masked":
        if pixel_mask is None:
            raise ValueError("the masked task's references need pixel_mask")
        pm = _mask(pixel_mask, x.shape)
        near, index = nearest_fill(x, pm, train)
        preds = {
            "masked_input": (x, {}),
            "mean_fill": (mean_fill(x, pm, mean_image), {}),
            "harmonic": (harmonic_inpaint(x, pm), {}),
            "nearest": (near, {"n_train": int(train.shape[0])}),
        }
    else:
        if tune_clean is None or tune_noisy is None:
            raise ValueError("the denoising references need tune_clean and tune_noisy")
        pm = None
        sigma, sig_err = choose_blur_sigma(tune_clean, tune_noisy)
        k, k_err = choose_k(tune_clean, tune_noisy, train, exclude=tune_index)
        n_tune = int(np.shape(tune_clean)[0])

        def tuned(name, value, candidates, errors) -> dict:
            return {name: value, "candidates": candidates, "tuning_mse": errors, "n_tune": n_tune}

        preds = {
            "noisy_input": (x, {}),
            "mean_image": (np.broadcast_to(mean_image, x.shape), {}),
            "blur": (gaussian_blur(x, sigma), tuned("sigma", sigma, list(BLUR_SIGMAS), sig_err)),
            "knn_mean": (
                knn_mean(x, train, k),
                tuned("k", k, [c for c in KNN_KS if c < train.shape[0]], k_err),
            ),
        }
    return {
        name: Reference(
            name=name,
            label=REFERENCES[task][name],
            errors=reconstruction_errors(pred, clean, pm),
            params=params,
        )
        for name, (pred, params) in preds.items()
    }
