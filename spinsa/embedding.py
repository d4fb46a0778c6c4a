"""Images to vector spins and back (D'Amico & Negri 2024, §V-A).

Each pixel value p in [0, 1] becomes the unit 2-vector

    (p, 1 - p) / sqrt(p**2 + (1 - p)**2),

the image is cut into non-overlapping ``patch x patch`` squares (a = patch**2 pixels), a
patch's pixel 2-vectors are concatenated into s_i in R^{2a}, and a fixed random matrix
F in R^{d x 2a} with orthonormal columns scaled by 1/sqrt(a) maps it to the token spin
x_i = F s_i, so that |x_i| = 1. Decoding inverts the map: s_i = a F^T x_i; each pixel's
pair (u, v) is first clamped to [0, 1] componentwise, then p = u / (u + v) (0 where both
vanish, e.g. for the zero spin of a masked token). Clamping first matters for states the
dynamics moved off the image manifold: u > 0 > v means "white" (p = 1), while the ratio
taken before clamping could have any sign.

Conventions
-----------
* Tokens are numbered row-major over the grid of patches: token ``k`` is the patch in grid
  row ``k // (W // patch)`` and grid column ``k % (W // patch)``.
* Inside a token's vector s_i, pixels are row-major inside the patch, then channels, then the
  two components of the pixel's 2-vector: component ``((r * patch + c) * C + ch) * 2 + t`` is
  component ``t`` (0 for p, 1 for 1 - p) of channel ``ch`` of the pixel at row ``r``, column
  ``c`` of the patch.
* Images with one channel are arrays ``(P, H, W)``; with ``channels = C > 1`` they are
  ``(P, H, W, C)`` (channels last). A single image is not accepted on its own: pass
  ``image[None]``. With C channels s_i has 2aC components, F is scaled by 1/sqrt(aC) and
  ``d >= 2aC`` is required.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from spinsa._checks import check_choice, check_count, check_finite, check_images, compute_dtype

__all__ = ["PatchEmbedding"]

SCALES = ("paper", "damico2024")


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


@dataclass(frozen=True)
class PatchEmbedding:
    """Fixed random embedding of image patches as unit vector spins (and its inverse).

    Parameters
    ----------
    image_shape : (int, int)
        Image height and width (H, W) in pixels.
    patch : int
        Side of the square patches; it must divide both H and W.
    d : int or None
        Spin dimension; ``None`` means the minimum, 2·a·channels. Smaller values raise.
    seed : int
        Seed of the Gaussian matrix whose QR decomposition gives F (``np.random.default_rng``).
    channels : int
        Number of colour channels C (images are ``(P, H, W, C)`` when C > 1).
    scale : {"paper", "damico2024"}
        ``"paper"``: F has orthonormal columns times 1/sqrt(aC), so |x_i| = 1.
        ``"damico2024"``: the published notebook's variant: pixels are first mapped to
        q = min(2p, 1), and F is scaled by 1/sqrt(2aC), so |x_i| = 1/sqrt(2). The map
        min(2p, 1) is invertible only below the clipping: ``decode`` returns q/2, which equals p
        for p <= 1/2 and is 1/2 for every p >= 1/2.

    Attributes
    ----------
    n_tokens : int
        N = (H / patch) · (W / patch).
    a : int
        Pixels per patch, patch**2.
    grid_shape : (int, int)
        (H / patch, W / patch).
    F : ndarray, shape (d, 2·a·C), float64, read-only
        The embedding matrix: F^T F = I / (aC) (``"paper"``) or I / (2aC) (``"damico2024"``).

    Examples
    --------
    >>> emb = PatchEmbedding(image_shape=(28, 28), patch=2)
    >>> emb.n_tokens, emb.d
    (196, 8)
    >>> x = emb.encode(images)          # (P, 28, 28) -> (P, 196, 8)
    >>> emb.decode(x)                   # (P, 196, 8) -> (P, 28, 28), equal to images
    """

    image_shape: tuple[int, int] = (28, 28)
    patch: int = 2
    d: int | None = None
    seed: int = 0
    channels: int = 1
    scale: Literal["paper", "damico2024"] = "paper"

    def __post_init__(self) -> None:
        shape = tuple(np.atleast_1d(self.image_shape).tolist())
        if len(shape) != 2:
            raise ValueError(f"image_shape must be (H, W), got {self.image_shape!r}")
        H = check_count(shape[0], "image_shape[0] (H)", 1)
        W = check_count(shape[1], "image_shape[1] (W)", 1)
        patch = check_count(self.patch, "patch", 1)
        channels = check_count(self.channels, "channels", 1)
        seed = check_count(self.seed, "seed", 0)
        check_choice(self.scale, "scale", SCALES)
        bad = [f"{name} = {n}" for name, n in (("height H", H), ("width W", W)) if n % patch]
        if bad:
            common = [k for k in _divisors(H) if W % k == 0]
            raise ValueError(
                f"patch = {patch} does not tile the image: it does not divide the "
                f"{' nor the '.join(bad)}; patch sizes that tile a {H}x{W} image: "
                f"{', '.join(map(str, common))}"
            )
        a = patch * patch
        minimum = 2 * a * channels
        if self.d is None:
            d = minimum
        else:
            d = check_count(self.d, "d", 1)
            if d < minimum:
                raise ValueError(
                    f"d = {d} is too small: a {patch}x{patch} patch has a = {a} pixels"
                    f"{f' x {channels} channels' if channels > 1 else ''}, so the minimum is "
                    f"d = 2*a{'*channels' if channels > 1 else ''} = {minimum}"
                )
        for name, value in (
            ("image_shape", (H, W)),
            ("patch", patch),
            ("d", d),
            ("seed", seed),
            ("channels", channels),
        ):
            object.__setattr__(self, name, value)

    # ----------------------------------------------------------------- geometry

    @property
    def a(self) -> int:
        """Pixels per patch, ``patch**2``."""
        return self.patch * self.patch

    @property
    def grid_shape(self) -> tuple[int, int]:
        """(H / patch, W / patch): the grid of tokens."""
        return (self.image_shape[0] // self.patch, self.image_shape[1] // self.patch)

    @property
    def n_tokens(self) -> int:
        """N, the number of tokens (patches) per image."""
        gh, gw = self.grid_shape
        return gh * gw

    @property
    def n_components(self) -> int:
        """2·a·C, the length of a patch's concatenated pixel 2-vectors s_i."""
        return 2 * self.a * self.channels

    def token_positions(self, anchor: Literal["corner", "center"] = "corner") -> np.ndarray:
        """Pixel coordinates (row, column) of every token, in token order.

        Parameters
        ----------
        anchor : {"corner", "center"}
            ``"corner"``: the patch's top-left pixel (int64); ``"center"``: the patch's centre,
            ``corner + (patch - 1) / 2`` (float64).

        Returns
        -------
        ndarray, shape (N, 2)
        """
        check_choice(anchor, "anchor", ("corner", "center"))
        gh, gw = self.grid_shape
        rows, cols = np.divmod(np.arange(gh * gw), gw)
        corner = np.stack([rows, cols], axis=1).astype(np.int64) * self.patch
        if anchor == "corner":
            return corner
        return corner + (self.patch - 1) / 2.0

    def token_index_map(self) -> np.ndarray:
        """The token each pixel belongs to.

        Returns
        -------
        ndarray, shape (H, W), int64
            ``out[r, c]`` = index of the token that holds pixel (r, c).
        """
        H, W = self.image_shape
        gw = self.grid_shape[1]
        r = np.arange(H)[:, None] // self.patch
        c = np.arange(W)[None, :] // self.patch
        return (r * gw + c).astype(np.int64)

    def token_pixels(self) -> np.ndarray:
        """Where each token's pixels sit in a flattened image, in the order of s_i's pairs.

        Returns
        -------
        ndarray, shape (N, a·C), int64
            ``out[i, k]`` is the index into ``image.ravel()`` (of shape (H, W) or (H, W, C))
            of the pixel whose pair is (s_i[2k], s_i[2k + 1]).
        """
        H, W = self.image_shape
        flat = np.arange(H * W * self.channels, dtype=np.int64).reshape(1, H, W, self.channels)
        return self._to_tokens(np.stack([flat, flat], axis=-1))[0, :, 0::2].copy()

    # ----------------------------------------------------------------- the matrix F

    @property
    def _norm2(self) -> int:
        """c such that F^T F = I / c."""
        c = self.a * self.channels
        return 2 * c if self.scale == "damico2024" else c

    @cached_property
    def _basis(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        G = rng.standard_normal((self.d, self.n_components))
        Q, R = np.linalg.qr(G)
        # QR is unique once diag(R) > 0; fixing the signs makes F independent of LAPACK.
        signs = np.where(np.diag(R) < 0, -1.0, 1.0)
        F = (Q * signs) / math.sqrt(self._norm2)
        F.setflags(write=False)
        return F

    @property
    def F(self) -> np.ndarray:
        """The (d, 2·a·C) float64 embedding matrix (a read-only view)."""
        view = self._basis.view()
        view.setflags(write=False)
        return view

    def decode_map(self) -> tuple[np.ndarray, float]:
        """What :meth:`decode` applies to a token, for compiled decoders.

        Returns
        -------
        B : ndarray, shape (d, 2·a·C), float64
            c F, so that s_i = x_i @ B.
        top : float
            The clamp of each pixel's pair: 1 (``"paper"``) or c (``"damico2024"``).
        """
        top = float(self._norm2) if self.scale == "damico2024" else 1.0
        return self._basis * float(self._norm2), top

    # ----------------------------------------------------------------- encode / decode

    def _image_shape_full(self) -> tuple[int, ...]:
        H, W = self.image_shape
        return (H, W) if self.channels == 1 else (H, W, self.channels)

    def _check_images(self, images) -> np.ndarray:
        return check_images(images, "images", self._image_shape_full())

    def _to_tokens(self, pixels: np.ndarray) -> np.ndarray:
        """(P, H, W, C, 2) -> (P, N, 2aC) in the documented order."""
        P = pixels.shape[0]
        (gh, gw), p, C = self.grid_shape, self.patch, self.channels
        t = pixels.reshape(P, gh, p, gw, p, C, 2).transpose(0, 1, 3, 2, 4, 5, 6)
        return t.reshape(P, gh * gw, self.n_components)

    def _to_pixels(self, tokens: np.ndarray) -> np.ndarray:
        """(P, N, 2aC) -> (P, H, W, C, 2), the inverse of ``_to_tokens``."""
        P = tokens.shape[0]
        (gh, gw), p, C = self.grid_shape, self.patch, self.channels
        t = tokens.reshape(P, gh, gw, p, p, C, 2).transpose(0, 1, 3, 2, 4, 5, 6)
        return t.reshape(P, gh * p, gw * p, C, 2)

    def encode(self, images) -> np.ndarray:
        """Spins of a batch of images.

        Parameters
        ----------
        images : array_like, shape (P, H, W) (or (P, H, W, C) when channels > 1)
            Pixel values in [0, 1]; float64 input gives float64 spins, anything else float32.

        Returns
        -------
        x : ndarray, shape (P, N, d)
            x_i = F s_i with s_i the patch's concatenated 2-vectors (p, 1-p)/sqrt(p²+(1-p)²);
            |x_i| = 1 (1/sqrt(2) with ``scale="damico2024"``).

        Raises
        ------
        ValueError
            Wrong shape, NaN or infinite values, or values outside [0, 1].
        """
        images = self._check_images(images)
        dtype = images.dtype
        q = images if self.scale == "paper" else np.minimum(2 * images, 1)
        q = q.reshape(*q.shape[:3], self.channels)
        norm = np.sqrt(q * q + (1 - q) * (1 - q))  # >= 1/sqrt(2): never zero
        pairs = np.stack([q / norm, (1 - q) / norm], axis=-1)
        return self._to_tokens(pairs) @ self._basis.T.astype(dtype)

    def pixel_space(self, images) -> np.ndarray:
        """Images as this embedding reads them: p (``"paper"``) or min(2p, 1) (``"damico2024"``).

        The space in which decoded states are compared with clean images
        (:meth:`decode_pixels`).

        Parameters
        ----------
        images : array_like, shape (P, H, W) (or (P, H, W, C))

        Returns
        -------
        ndarray, same shape, float32 (float64 for float64 input)
        """
        images = self._check_images(images)
        return images if self.scale == "paper" else np.minimum(2 * images, 1)

    def decode_pixels(self, x) -> np.ndarray:
        """:meth:`decode` into the embedding's own pixel space, [0, 1] for both scales.

        ``decode(x)`` for ``"paper"``; ``2 decode(x)``, the notebook's pixel q, for
        ``"damico2024"`` (so that ``decode_pixels(encode(images)) = pixel_space(images)``).

        Parameters
        ----------
        x : array_like, shape (P, N, d)

        Returns
        -------
        ndarray, shape (P, H, W) (or (P, H, W, C))
        """
        q = self.decode(x)
        return q * q.dtype.type(2) if self.scale == "damico2024" else q

    def decode(self, x) -> np.ndarray:
        """Images of a batch of spin configurations (the inverse of ``encode``).

        s_i = c F^T x_i with c = aC (``"paper"``) or 2aC (``"damico2024"``); each pixel's
        pair (u, v) is clamped componentwise to [0, 1] first, then q = u / (u + v), and
        q = 0 where both clamped components vanish (the zero spin of a masked token decodes
        to black, without warnings). So u > 0 > v gives 1, u < 0 < v gives 0. With
        ``scale="damico2024"`` the clamp acts on F^T x_i = s_i / c, as in the published
        notebook's ``de_embed`` (so on s_i it is [0, c]), and the pixel is q / 2: the
        inverse of min(2p, 1) below its clipping (pixels above 1/2 encode like 1/2 and decode
        to 1/2).

        Parameters
        ----------
        x : array_like, shape (P, N, d)
            Spins; they need not be unit vectors (the dynamics may move them off the image
            manifold; only directions within the range of F are read).

        Returns
        -------
        images : ndarray, shape (P, H, W) (or (P, H, W, C) when channels > 1)
            In [0, 1]; float64 for float64 spins, float32 otherwise.
        """
        x = np.asarray(x)
        if x.ndim != 3 or x.shape[1:] != (self.n_tokens, self.d):
            hint = " (for one configuration pass x[None])" if x.ndim == 2 else ""
            raise ValueError(
                f"x must have shape (P, N, d) = (P, {self.n_tokens}, {self.d}), "
                f"got shape {x.shape}{hint}"
            )
        if not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
            raise ValueError(f"x must be a real float array, got dtype {x.dtype}")
        dtype = compute_dtype(x)
        x = np.asarray(x, dtype=dtype)
        check_finite(x, "x")
        s = (x @ self._basis.astype(dtype)) * dtype.type(self._norm2)
        pairs = self._to_pixels(s)
        # clamp the components first (the notebook clamps F^T x = s / c; docs/model.md,
        # 'Embedding images', clamps s)
        top = dtype.type(self._norm2 if self.scale == "damico2024" else 1)
        u, v = np.clip(pairs[..., 0], 0, top), np.clip(pairs[..., 1], 0, top)
        den = u + v
        q = np.zeros_like(u)
        np.divide(u, den, out=q, where=den > 0)
        if self.scale == "damico2024":
            q *= 0.5
        return q[..., 0] if self.channels == 1 else q
