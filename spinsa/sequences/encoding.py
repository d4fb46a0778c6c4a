"""Values of a series <-> vector spins, through :class:`spinsa.PatchEmbedding`.

A value v becomes the "pixel" p = clip((v - lo) / (hi - lo), 0, 1), with lo and hi the
training range, and p the unit 2-vector (p, 1 - p)/|.| as a pixel does (docs/model.md,
'Series as spin chains'). A window of L values is an image of one row: k consecutive
values are the k channels of one pixel, so one token holds k values and the embedding's
fixed orthonormal F lifts their 2k components to d. No second embedding is written here:
encoding and decoding are PatchEmbedding's, on the image (P, 1, N[, k]).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from spinsa._checks import check_count
from spinsa.embedding import PatchEmbedding

__all__ = ["SeriesEmbedding"]


@dataclass(frozen=True)
class SeriesEmbedding:
    """Windows of a scalar series as chains of unit spins, and back.

    Parameters
    ----------
    length : int
        Values per window L; a multiple of ``k``. N = L / k tokens.
    lo, hi : float
        The range mapped onto p in [0, 1] (the training part's minimum and maximum); values
        outside are clipped.
    k : int
        Consecutive values per token.
    d : int or None
        Spin dimension (None: the minimum, 2k).
    seed : int
        Seed of F.

    Examples
    --------
    >>> emb = SeriesEmbedding(51, lo=-2.0, hi=3.0)
    >>> x = emb.encode(windows)          # (P, 51) -> (P, 51, 2)
    >>> emb.decode(x)                    # (P, 51, 2) -> (P, 51), the clipped windows
    """

    length: int
    lo: float
    hi: float
    k: int = 1
    d: int | None = None
    seed: int = 0
    patches: PatchEmbedding = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        length, k = check_count(self.length, "length", 2), check_count(self.k, "k", 1)
        if length % k:
            raise ValueError(f"length {length} is not a multiple of k = {k} values per token")
        lo, hi = float(self.lo), float(self.hi)
        if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
            raise ValueError(f"need finite lo < hi, got lo = {self.lo!r}, hi = {self.hi!r}")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        emb = PatchEmbedding(
            image_shape=(1, length // k), patch=1, d=self.d, seed=self.seed, channels=k
        )
        object.__setattr__(self, "patches", emb)

    @property
    def n_tokens(self) -> int:
        return self.patches.n_tokens

    @property
    def dim(self) -> int:
        """The spin dimension d."""
        return self.patches.d

    def _image(self, pixels: np.ndarray) -> np.ndarray:
        shape = (pixels.shape[0], 1, self.n_tokens) + ((self.k,) if self.k > 1 else ())
        return pixels.reshape(shape)

    def encode(self, windows) -> np.ndarray:
        """(P, L) values -> (P, N, d) unit spins (float32)."""
        w = np.asarray(windows, dtype=np.float64)
        if w.ndim != 2 or w.shape[1] != self.length:
            raise ValueError(f"windows must have shape (P, {self.length}), got {w.shape}")
        p = np.clip((w - self.lo) / (self.hi - self.lo), 0.0, 1.0)
        return self.patches.encode(self._image(p)).astype(np.float32)

    def decode(self, x) -> np.ndarray:
        """(P, N, d) spins -> (P, L) values (a zero spin decodes to ``lo``)."""
        p = np.asarray(self.patches.decode(x), dtype=np.float64).reshape(len(x), self.length)
        return self.lo + p * (self.hi - self.lo)
