"""Overlaps between spin configurations and stored patterns, in spin space and pixel space.

The overlap of a configuration x (N tokens of dimension d) with a pattern xi is

    m(x, xi) = (1/N) sum_i x_i . xi_i ,

equal to 1 when x = xi and both are made of unit spins. For T recorded times of P
trajectories and M patterns, all overlaps form the matrix product

    m = X Xi^T / N,   X: (T·P, N·d),   Xi: (M, N·d),

which is computed in row chunks with the BLAS of numpy (a matrix product of that shape runs
about ten times faster than a hand-written numba loop) or, with ``backend="torch"``, on a
GPU. The reductions (nearest pattern at every t) never hold the whole (T·P, M) matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from spinsa._checks import check_choice, check_count, check_finite, compute_dtype
from spinsa.analysis._results import AnalysisResult

__all__ = [
    "NearestPatterns",
    "OverlapTrace",
    "decoded_correlations",
    "mean_pattern",
    "nearest_patterns",
    "overlaps",
    "pixel_correlations",
    "target_overlaps",
    "trajectory_overlaps",
]

#: Memory for one chunk of the (rows, M) overlap block, in bytes.
CHUNK_BYTES = 64 * 2**20


# --------------------------------------------------------------------------- validation


def _check_configs(x, name: str, dtype=None, ndims=(3, 4)) -> np.ndarray:
    """A finite float array (P, N, d) or (T, P, N, d)."""
    x = np.asarray(x)
    if x.ndim not in ndims:
        shapes = {3: "(n_samples, n_tokens, d)", 4: "(n_records, n_samples, n_tokens, d)"}
        expected = " or ".join(shapes[k] for k in ndims)
        raise ValueError(f"{name} must have shape {expected}, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
        raise ValueError(f"{name} must be a real float array, got dtype {x.dtype}")
    x = np.ascontiguousarray(x, dtype=dtype or compute_dtype(x))
    check_finite(x, name)
    return x


def _check_patterns_like(x: np.ndarray, xi, name: str = "xi") -> np.ndarray:
    xi = _check_configs(xi, name, x.dtype, ndims=(3,))
    if xi.shape[1:] != x.shape[-2:]:
        raise ValueError(
            f"{name} must have shape (n_patterns, {x.shape[-2]}, {x.shape[-1]}) to match the "
            f"states' (n_tokens, d) = {x.shape[-2:]}, got shape {xi.shape}"
        )
    if xi.shape[0] < 1:
        raise ValueError(f"{name} must hold at least one pattern, got shape {xi.shape}")
    return xi


def _chunk_rows(chunk_size, n_patterns: int, itemsize: int) -> int:
    if chunk_size is None:
        return max(1, CHUNK_BYTES // max(1, n_patterns * itemsize))
    return check_count(chunk_size, "chunk_size", 1)


# --------------------------------------------------------------------------- overlaps


def mean_pattern(xi, project: bool = True) -> np.ndarray:
    """The mean of a set of patterns, optionally projected token by token on the sphere.

    Parameters
    ----------
    xi : ndarray, shape (M, N, d)
        Patterns.
    project : bool
        If True (default), every token of the mean is divided by its norm (tokens of zero
        norm stay zero): the extrinsic mean on S^{d-1}, a configuration of unit spins whose
        overlap with itself is 1. If False, the plain arithmetic mean (1/M) sum_mu xi^mu.

    Returns
    -------
    ndarray, shape (N, d)
    """
    xi = _check_configs(xi, "xi", ndims=(3,))
    m = xi.mean(axis=0)
    if project:
        n = np.linalg.norm(m, axis=-1, keepdims=True)
        m = np.divide(m, n, out=np.zeros_like(m), where=n > 0)
    return m


def overlaps(x, xi, *, chunk_size: int | None = None, backend: str = "numpy", device=None):
    """All overlaps m^mu = (1/N) sum_i x_i . xi^mu_i between configurations and patterns.

    Parameters
    ----------
    x : ndarray, shape (P, N, d) or (T, P, N, d)
        Configurations, e.g. ``Trajectory.states``.
    xi : ndarray, shape (M, N, d)
        Patterns (training set, test set...).
    chunk_size : int, optional
        Rows of ``x`` (configurations) per matrix product; by default as many as fit in
        64 MiB of output.
    backend : {"numpy", "torch"}
        ``"torch"`` runs the products with torch on ``device`` (default: CUDA if available).
    device : str, optional
        Torch device.

    Returns
    -------
    ndarray, shape (P, M) or (T, P, M)
        In the compute dtype (float32 unless an input is float64).
    """
    x = _check_configs(x, "x")
    xi = _check_patterns_like(x, xi)
    check_choice(backend, "backend", tuple(_BACKENDS))
    lead, N = x.shape[:-2], x.shape[-2]
    X = x.reshape(-1, x.shape[-2] * x.shape[-1])
    Y = xi.reshape(xi.shape[0], -1)
    out = np.empty((X.shape[0], Y.shape[0]), dtype=x.dtype)
    rows = _chunk_rows(chunk_size, Y.shape[0], x.dtype.itemsize)

    def keep(r0, r1, block):
        out[r0:r1] = block

    _BACKENDS[backend](X, Y, 1.0 / N, rows, keep, device)
    return out.reshape(*lead, Y.shape[0])


def target_overlaps(x, targets) -> np.ndarray:
    """Overlap of every configuration with its own target, m_p = (1/N) sum_i x_{p,i} . t_{p,i}.

    Parameters
    ----------
    x : ndarray, shape (P, N, d) or (T, P, N, d)
        Configurations; sample p of every record is compared with ``targets[p]``.
    targets : ndarray, shape (P, N, d)
        One target per sample (e.g. the clean image a corrupted trajectory started from).

    Returns
    -------
    ndarray, shape (P,) or (T, P)
    """
    x = _check_configs(x, "x")
    targets = _check_configs(targets, "targets", x.dtype, ndims=(3,))
    if targets.shape != x.shape[-3:]:
        raise ValueError(
            f"targets must have shape {x.shape[-3:]} (one target per sample), "
            f"got shape {targets.shape}"
        )
    N = x.shape[-2]
    flat = x.reshape(-1, *x.shape[-3:])
    out = np.empty(flat.shape[:2], dtype=x.dtype)
    for t in range(flat.shape[0]):  # one record at a time: no (T, P, N, d) temporary
        out[t] = np.einsum("pna,pna->p", flat[t], targets) / N
    return out.reshape(x.shape[:-2])


@dataclass(frozen=True)
class NearestPatterns(AnalysisResult):
    """The stored pattern closest to each configuration.

    Attributes
    ----------
    index : ndarray of int64, shape (P,) or (T, P)
        Index mu of the pattern of largest overlap (of largest |overlap| if ``absolute``).
    overlap : ndarray, shape like ``index``
        The (signed) overlap with that pattern.
    absolute : bool
        Whether the pattern was chosen by |m| (so that -xi counts as xi).
    n_patterns : int
        M, the number of patterns searched.
    """

    _arrays: ClassVar[tuple[str, ...]] = ("index", "overlap")
    index: np.ndarray
    overlap: np.ndarray
    absolute: bool = False
    n_patterns: int = 0

    def __post_init__(self):
        self._freeze_arrays()
        if self.index.shape != self.overlap.shape:
            raise ValueError(
                f"index and overlap must have the same shape, got {self.index.shape} and "
                f"{self.overlap.shape}"
            )


def nearest_patterns(
    x,
    xi,
    *,
    absolute: bool = False,
    chunk_size: int | None = None,
    backend: str = "numpy",
    device=None,
) -> NearestPatterns:
    """The pattern of largest overlap with every configuration, without the full matrix.

    Parameters
    ----------
    x : ndarray, shape (P, N, d) or (T, P, N, d)
        Configurations.
    xi : ndarray, shape (M, N, d)
        Stored patterns.
    absolute : bool
        Rank patterns by |m| instead of m. The energy is even in x (x -> -x leaves every
        score unchanged), so -xi is as much a stored state as xi; images, whose embedding
        lies in one orthant, never need this.
    chunk_size, backend, device
        As in :func:`overlaps`. Memory: one (chunk_size, M) block at a time.

    Returns
    -------
    NearestPatterns
        ``index`` and ``overlap`` of shape (P,) or (T, P); ties go to the lowest index.
    """
    x = _check_configs(x, "x")
    xi = _check_patterns_like(x, xi)
    check_choice(backend, "backend", tuple(_BACKENDS))
    lead, N = x.shape[:-2], x.shape[-2]
    X = x.reshape(-1, x.shape[-2] * x.shape[-1])
    Y = xi.reshape(xi.shape[0], -1)
    index = np.empty(X.shape[0], dtype=np.int64)
    value = np.empty(X.shape[0], dtype=x.dtype)
    rows = _chunk_rows(chunk_size, Y.shape[0], x.dtype.itemsize)

    def reduce(r0, r1, block):
        k = np.argmax(np.abs(block) if absolute else block, axis=1)
        index[r0:r1] = k
        value[r0:r1] = block[np.arange(r1 - r0), k]

    _BACKENDS[backend](X, Y, 1.0 / N, rows, reduce, device)
    return NearestPatterns(
        index=index.reshape(lead),
        overlap=value.reshape(lead),
        absolute=bool(absolute),
        n_patterns=int(Y.shape[0]),
    )


def _blocks_numpy(X, Y, scale, rows, sink: Callable, device) -> None:
    YT = Y.T
    buf = np.empty((min(rows, X.shape[0]), Y.shape[0]), dtype=X.dtype)
    for r0 in range(0, X.shape[0], rows):
        r1 = min(r0 + rows, X.shape[0])
        block = buf[: r1 - r0]
        np.matmul(X[r0:r1], YT, out=block)
        block *= scale
        sink(r0, r1, block)


def _blocks_torch(X, Y, scale, rows, sink: Callable, device) -> None:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError('backend="torch" needs PyTorch: pip install "spinsa[torch]"') from exc
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    Yt = torch.as_tensor(Y, device=device).T.contiguous()
    for r0 in range(0, X.shape[0], rows):
        r1 = min(r0 + rows, X.shape[0])
        block = torch.as_tensor(X[r0:r1], device=device) @ Yt
        sink(r0, r1, (block * scale).cpu().numpy())


_BACKENDS: dict[str, Callable[..., Any]] = {"numpy": _blocks_numpy, "torch": _blocks_torch}


# --------------------------------------------------------------------------- trajectories


@dataclass(frozen=True)
class OverlapTrace(AnalysisResult):
    """Overlaps along trajectories: with each one's target, and with the nearest pattern.

    Attributes
    ----------
    times : ndarray of int64, shape (T,)
        Recorded times.
    target : ndarray, shape (T, P), or None
        m(x_p(t), target_p).
    nearest_index : ndarray of int64, shape (T, P), or None
        Index of the stored pattern of largest overlap at each t.
    nearest_overlap : ndarray, shape (T, P), or None
        Its overlap.
    absolute : bool
        Whether the nearest pattern was chosen by |m|.
    """

    _arrays: ClassVar[tuple[str, ...]] = ("times", "target", "nearest_index", "nearest_overlap")
    times: np.ndarray
    target: np.ndarray | None = None
    nearest_index: np.ndarray | None = None
    nearest_overlap: np.ndarray | None = None
    absolute: bool = False

    def __post_init__(self):
        self._freeze_arrays()
        if self.times.ndim != 1:
            raise ValueError(f"times must be 1-d, got shape {self.times.shape}")
        for name in ("target", "nearest_index", "nearest_overlap"):
            a = getattr(self, name)
            if a is not None and (a.ndim != 2 or a.shape[0] != self.times.shape[0]):
                raise ValueError(
                    f"{name} must have shape (n_records = {self.times.shape[0]}, n_samples), "
                    f"got {a.shape}"
                )


def _check_times(times, n_records: int) -> np.ndarray:
    times = np.asarray(times)
    if times.shape != (n_records,) or not np.issubdtype(times.dtype, np.integer):
        raise ValueError(
            f"times must be an integer array of shape ({n_records},) (one per record), "
            f"got {times.dtype} array of shape {times.shape}"
        )
    if n_records > 1 and not np.all(np.diff(times) > 0):
        raise ValueError("times must be strictly increasing")
    return times.astype(np.int64)


def trajectory_overlaps(
    states,
    times,
    *,
    targets=None,
    patterns=None,
    absolute: bool = False,
    chunk_size: int | None = None,
    backend: str = "numpy",
    device=None,
) -> OverlapTrace:
    """Overlap curves of trajectories: with their own targets and with the nearest pattern.

    Parameters
    ----------
    states : ndarray, shape (T, P, N, d)
        Recorded states (``Trajectory.states``).
    times : ndarray of int, shape (T,)
        Their times (``Trajectory.times``).
    targets : ndarray, shape (P, N, d), optional
        One target per trajectory (the clean version of its initial condition).
    patterns : ndarray, shape (M, N, d), optional
        Stored patterns to search for the nearest one at every t.
    absolute, chunk_size, backend, device
        As in :func:`nearest_patterns`.

    Returns
    -------
    OverlapTrace
    """
    states = _check_configs(states, "states", ndims=(4,))
    times = _check_times(times, states.shape[0])
    if targets is None and patterns is None:
        raise ValueError("give targets, patterns or both: there is nothing to compare with")
    target = None if targets is None else target_overlaps(states, targets)
    index = value = None
    if patterns is not None:
        near = nearest_patterns(
            states,
            patterns,
            absolute=absolute,
            chunk_size=chunk_size,
            backend=backend,
            device=device,
        )
        index, value = near.index, near.overlap
    return OverlapTrace(
        times=times,
        target=target,
        nearest_index=index,
        nearest_overlap=value,
        absolute=bool(absolute),
    )


# --------------------------------------------------------------------------- pixel space


def pixel_correlations(images, clean) -> np.ndarray:
    """Pearson correlation over pixels between images and the clean image of their sample.

    Parameters
    ----------
    images : ndarray, shape (P, H, W[, C]) or (T, P, H, W[, C])
        Decoded images; sample p of every record is compared with ``clean[p]``.
    clean : ndarray, shape (P, H, W[, C])
        Reference images.

    Returns
    -------
    ndarray of float64, shape (P,) or (T, P)
        corr(a, b) = sum (a - <a>)(b - <b>) / sqrt(sum (a - <a>)^2 sum (b - <b>)^2); NaN
        where either image is constant (the correlation is undefined there).
    """
    clean = np.asarray(clean, dtype=np.float64)
    images = np.asarray(images, dtype=np.float64)
    if clean.ndim < 3:
        raise ValueError(f"clean must have shape (P, H, W[, C]), got shape {clean.shape}")
    if images.shape[-clean.ndim :] != clean.shape or images.ndim > clean.ndim + 1:
        raise ValueError(
            f"images must have shape {clean.shape} or (n_records, *{clean.shape}) to match "
            f"clean, got shape {images.shape}"
        )
    check_finite(images, "images")
    check_finite(clean, "clean")
    b = clean.reshape(clean.shape[0], -1)
    b = b - b.mean(axis=1, keepdims=True)
    bn = np.sqrt((b * b).sum(axis=1))
    a = images.reshape(*images.shape[: images.ndim - clean.ndim + 1], -1)
    a = a - a.mean(axis=-1, keepdims=True)
    an = np.sqrt((a * a).sum(axis=-1))
    num = (a * b).sum(axis=-1)
    den = an * bn
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return np.clip(r, -1.0, 1.0)


def decoded_correlations(states, clean_images, embedding) -> np.ndarray:
    """Correlation of decoded configurations with the clean images, record by record.

    Parameters
    ----------
    states : ndarray, shape (P, N, d) or (T, P, N, d)
        Configurations.
    clean_images : ndarray, shape (P, H, W[, C])
        The clean image of every sample.
    embedding : PatchEmbedding
        Anything with ``decode((P, N, d)) -> (P, H, W[, C])``.

    Returns
    -------
    ndarray of float64, shape (P,) or (T, P)
        See :func:`pixel_correlations`.
    """
    states = _check_configs(states, "states")
    if not callable(getattr(embedding, "decode", None)):
        raise ValueError("embedding must have a decode((P, N, d)) method, e.g. PatchEmbedding")
    flat = states.reshape(-1, *states.shape[-3:])
    out = np.stack([pixel_correlations(embedding.decode(s), clean_images) for s in flat])
    return out.reshape(states.shape[:-2])
