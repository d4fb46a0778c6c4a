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

from dataclasses import dataclass

import numpy as np

from spinsa import _draw
from spinsa._checks import check_choice, check_count, check_finite
from spinsa._torch import import_torch, resolve_device
from spinsa.analysis._results import AnalysisResult, check_patterns, check_states, check_times
from spinsa.tasks import mean_sem

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


def mean_pattern(xi, project: bool = True) -> np.ndarray:
    """The mean (N, d) of patterns xi (M, N, d), optionally projected token by token.

    With ``project`` (default) every token of the mean is divided by its norm (tokens of zero
    norm stay zero): the extrinsic mean on S^{d-1}, a configuration of unit spins whose
    overlap with itself is 1. Otherwise the plain arithmetic mean (1/M) sum_mu xi^mu.
    """
    m = check_states(xi, "xi", ndims=(3,)).mean(axis=0)
    if project:
        n = np.linalg.norm(m, axis=-1, keepdims=True)
        m = np.divide(m, n, out=np.zeros_like(m), where=n > 0)
    return m


def _overlap_blocks(x, xi, chunk_size, backend, device):
    """Checked ``x`` and ``xi``, and an iterator over the row blocks (r0, r1, m[r0:r1]) of
    the overlap matrix m = X Xi^T / N of shape (rows of x, M)."""
    x = check_states(x, "x")
    xi = check_patterns(x, xi)
    check_choice(backend, "backend", tuple(_BACKENDS))
    M = xi.shape[0]
    if chunk_size is None:
        rows = max(1, CHUNK_BYTES // max(1, M * x.dtype.itemsize))
    else:
        rows = check_count(chunk_size, "chunk_size", 1)
    X = x.reshape(-1, x.shape[-2] * x.shape[-1])
    return x, xi, _BACKENDS[backend](X, xi.reshape(M, -1), 1.0 / x.shape[-2], rows, device)


def _blocks_numpy(X, Y, scale, rows, device):
    buf = np.empty((min(rows, X.shape[0]), Y.shape[0]), dtype=X.dtype)
    for r0 in range(0, X.shape[0], rows):
        r1 = min(r0 + rows, X.shape[0])
        block = buf[: r1 - r0]
        np.matmul(X[r0:r1], Y.T, out=block)
        block *= scale
        yield r0, r1, block


def _blocks_torch(X, Y, scale, rows, device):
    torch = import_torch()
    device = resolve_device("auto") if device is None else device
    Yt = torch.as_tensor(Y, device=device).T.contiguous()
    for r0 in range(0, X.shape[0], rows):
        r1 = min(r0 + rows, X.shape[0])
        block = torch.as_tensor(X[r0:r1], device=device) @ Yt
        yield r0, r1, (block * scale).cpu().numpy()


_BACKENDS = {"numpy": _blocks_numpy, "torch": _blocks_torch}


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

    Returns
    -------
    ndarray, shape (P, M) or (T, P, M)
        In the compute dtype (float32 unless an input is float64).
    """
    x, xi, blocks = _overlap_blocks(x, xi, chunk_size, backend, device)
    out = np.empty((*x.shape[:-2], xi.shape[0]), dtype=x.dtype)
    flat = out.reshape(-1, xi.shape[0])
    for r0, r1, block in blocks:
        flat[r0:r1] = block
    return out


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
    x = check_states(x, "x")
    targets = check_states(targets, "targets", x.dtype, ndims=(3,))
    if targets.shape != x.shape[-3:]:
        raise ValueError(
            f"targets must have shape {x.shape[-3:]} (one target per sample), "
            f"got shape {targets.shape}"
        )
    flat = x.reshape(-1, *x.shape[-3:])
    out = np.empty(flat.shape[:2], dtype=x.dtype)
    for t in range(flat.shape[0]):  # one record at a time: no (T, P, N, d) temporary
        out[t] = np.einsum("pna,pna->p", flat[t], targets) / x.shape[-2]
    return out.reshape(x.shape[:-2])


@dataclass(frozen=True)
class NearestPatterns(AnalysisResult):
    """The stored pattern closest to each configuration.

    Attributes
    ----------
    index : ndarray of int64, shape (P,) or (T, P)
        Index mu of the pattern of largest overlap (of largest |overlap| if ``absolute``;
        ties go to the lowest index).
    overlap : ndarray, shape like ``index``
        The (signed) overlap with that pattern.
    absolute : bool
    n_patterns : int
        M, the number of patterns searched.
    """

    _same_shape = ("index overlap",)
    index: np.ndarray
    overlap: np.ndarray
    absolute: bool = False
    n_patterns: int = 0

    def plot(self, ax=None):
        """The overlap with the nearest pattern: its mean ± s.e. against the record for
        (T, P) results, its histogram for (P,) ones.
        """
        ax = _draw.axes(ax)
        if self.overlap.ndim == 2:
            mean, sem, _ = mean_sem(self.overlap)
            _draw.band(ax, np.arange(mean.size), mean, sem, None, "C0")
            _draw.finish(ax, "nearest pattern", "record", "overlap with the nearest pattern")
        else:
            ax.hist(self.overlap, bins=30, color="C0")
            _draw.finish(ax, f"nearest of {self.n_patterns} patterns", "overlap", "count")
        return ax


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
    x, xi, chunk_size, backend, device
        As in :func:`overlaps`. Memory: one (chunk_size, M) block at a time.
    absolute : bool
        Rank patterns by |m| instead of m. The energy is even in x (x -> -x leaves every
        score unchanged), so -xi is as much a stored state as xi; images, whose embedding
        lies in one orthant, never need this.

    Returns
    -------
    NearestPatterns
        ``index`` and ``overlap`` of shape ``x.shape[:-2]``, (P,) or (T, P): the pattern
        of largest overlap with each configuration and that overlap.
    """
    x, xi, blocks = _overlap_blocks(x, xi, chunk_size, backend, device)
    index = np.empty(x.shape[:-2], dtype=np.int64)
    value = np.empty(x.shape[:-2], dtype=x.dtype)
    for r0, r1, block in blocks:
        k = np.argmax(np.abs(block) if absolute else block, axis=1)
        index.reshape(-1)[r0:r1] = k
        value.reshape(-1)[r0:r1] = block[np.arange(r1 - r0), k]
    return NearestPatterns(index, value, absolute=bool(absolute), n_patterns=int(xi.shape[0]))


@dataclass(frozen=True)
class OverlapTrace(AnalysisResult):
    """Overlaps along trajectories: with each one's target, and with the nearest pattern.

    Attributes
    ----------
    times : ndarray of int64, shape (T,)
    target : ndarray, shape (T, P), or None
        m(x_p(t), target_p).
    nearest_index, nearest_overlap : ndarray, shape (T, P), or None
        The stored pattern of largest overlap at each t, and that overlap.
    absolute : bool
        Whether the nearest pattern was chosen by |m|.
    """

    _coords = {"T": "times"}

    _same_shape = ("target nearest_index nearest_overlap",)
    times: np.ndarray
    target: np.ndarray | None = None
    nearest_index: np.ndarray | None = None
    nearest_overlap: np.ndarray | None = None
    absolute: bool = False

    def __post_init__(self):
        super().__post_init__()
        arrays = (self.target, self.nearest_index, self.nearest_overlap)
        shape = next((a.shape for a in arrays if a is not None), (self.times.size, 0))
        if self.times.ndim != 1 or len(shape) != 2 or shape[0] != self.times.size:
            raise ValueError(f"times must have shape (T,) and overlaps (T, P), got {shape}")

    def plot(self, ax=None, *, label: str = "", color: str = "C0"):
        """Mean over trajectories of the overlap with the target (solid) and with the
        nearest pattern (dashed) against t, with standard-error bands.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure when None.
        label, color
            Of the curves (to draw several traces on one axes).

        Returns
        -------
        matplotlib.axes.Axes
        """
        ax = _draw.axes(ax)
        prefix = f"{label}: " if label else ""
        for values, what, ls in ((self.target, "target", "-"),
                                 (self.nearest_overlap, "nearest pattern", "--")):  # fmt: skip
            if values is not None and values.shape[1]:
                mean, sem, _ = mean_sem(values)
                _draw.band(ax, self.times, mean, sem, prefix + what, color, ls=ls)
        _draw.finish(ax, "overlaps along the dynamics", ylabel="overlap")
        return ax


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
    states, times : ndarray, shape (T, P, N, d) and (T,)
        Recorded states and their times (``Trajectory.states``, ``Trajectory.times``).
    targets : ndarray, shape (P, N, d), optional
        One target per trajectory (the clean version of its initial condition).
    patterns : ndarray, shape (M, N, d), optional
        Stored patterns to search for the nearest one at every t.
    absolute, chunk_size, backend, device
        As in :func:`nearest_patterns`.

    Returns
    -------
    OverlapTrace
        ``times`` (T,); ``target`` (T, P), m(x_p(t), target_p), or None without
        ``targets``; ``nearest_index`` and ``nearest_overlap`` (T, P), the pattern of
        largest overlap at each t and that overlap, or None without ``patterns``.

    Raises
    ------
    ValueError
        If neither ``targets`` nor ``patterns`` is given, or a shape does not match.
    """
    states = check_states(states, "states", ndims=(4,))
    times = check_times(times, states.shape[0])
    if targets is None and patterns is None:
        raise ValueError("give targets, patterns or both: there is nothing to compare with")
    target = None if targets is None else target_overlaps(states, targets)
    index = value = None
    if patterns is not None:
        kw = dict(absolute=absolute, chunk_size=chunk_size, backend=backend, device=device)
        near = nearest_patterns(states, patterns, **kw)
        index, value = near.index, near.overlap
    return OverlapTrace(times, target, index, value, absolute=bool(absolute))


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
    a = images.reshape(*images.shape[: images.ndim - clean.ndim + 1], -1)
    a = a - a.mean(axis=-1, keepdims=True)
    den = np.sqrt((a * a).sum(axis=-1)) * np.sqrt((b * b).sum(axis=1))
    r = np.where(den > 0, (a * b).sum(axis=-1) / np.where(den > 0, den, 1.0), np.nan)
    return np.clip(r, -1.0, 1.0)


def decoded_correlations(states, clean_images, embedding) -> np.ndarray:
    """:func:`pixel_correlations` of decoded configurations, record by record.

    Parameters
    ----------
    states : ndarray, shape (P, N, d) or (T, P, N, d)
    clean_images : ndarray, shape (P, H, W[, C])
        The clean image of every sample.
    embedding : PatchEmbedding
        Anything with ``decode((P, N, d)) -> (P, H, W[, C])``.

    Returns
    -------
    ndarray of float64, shape (P,) or (T, P)
    """
    states = check_states(states, "states")
    if not callable(getattr(embedding, "decode", None)):
        raise ValueError("embedding must have a decode((P, N, d)) method, e.g. PatchEmbedding")
    flat = states.reshape(-1, *states.shape[-3:])
    out = np.stack([pixel_correlations(embedding.decode(s), clean_images) for s in flat])
    return out.reshape(states.shape[:-2])
