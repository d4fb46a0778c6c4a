"""The retrieval tasks of D'Amico & Negri 2024 (§III): masking, noise, reconstruction errors.

These are array functions; the time loop lives in :func:`spinsa.run`. The plain way to
score states is to decode them with :meth:`spinsa.PatchEmbedding.decode_pixels` and hand the
decoded images to :func:`reconstruction_errors`; an evaluation does the same at every step
with :class:`StateScorer`, which decodes and scores in one compiled pass (the plain functions
are its reference and its ``"numpy"`` backend).

The task inputs of every evaluation, analysis and baseline come from :func:`task_inputs`:
image k of a data set gets its mask or its noise from its own stream,
``np.random.default_rng([seed, TASK_STREAMS[task], k])``, so it is corrupted the same way
wherever it is used. The lower-level :func:`mask_tokens` and :func:`corrupt_gaussian` take one
``rng`` for a whole batch: a Generator (used as is, so successive calls draw new numbers), an
int seed (a fresh ``np.random.default_rng(seed)``: same seed, same result) or ``None`` (fresh
OS entropy).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from spinsa._checks import (
    check_choice,
    check_count,
    check_finite,
    check_images,
    check_real,
    check_spins,
    compute_dtype,
)
from spinsa.embedding import PatchEmbedding

__all__ = [
    "TASKS",
    "TASK_TITLES",
    "TASK_STREAMS",
    "ReconstructionErrors",
    "ErrorSummary",
    "as_generator",
    "masked_count",
    "mask_tokens",
    "draw_masks",
    "draw_noisy",
    "task_inputs",
    "pixel_mask",
    "corrupt_gaussian",
    "noisy_starts",
    "reconstruction_errors",
    "mean_sem",
    "summarize",
    "image_correlation",
    "StateScores",
    "StateScorer",
    "SCORING_BACKENDS",
]

#: The two retrieval tasks of the paper (§III).
TASKS = ("masked", "denoise")
#: How figures and reports name each task.
TASK_TITLES = {"masked": "masked prediction", "denoise": "denoising"}
#: Random stream of each task: image k's corruption comes from default_rng([seed, stream, k]).
TASK_STREAMS = {"masked": 0, "denoise": 1}


def as_generator(rng, name: str = "rng") -> np.random.Generator:
    """A ``np.random.Generator`` from a Generator (returned as is), an int seed or ``None``."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (isinstance(rng, numbers.Integral) and not isinstance(rng, bool)):
        if rng is not None and rng < 0:
            raise ValueError(f"{name} must be a non-negative int seed, got {rng}")
        return np.random.default_rng(rng)
    raise ValueError(f"{name} must be a np.random.Generator, an int seed or None, got {rng!r}")


def _check_fraction(fraction) -> float:
    fraction = check_real(fraction, "fraction")
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    return fraction


def masked_count(fraction: float, n_tokens: int) -> int:
    """Tokens masked per image: ``int(fraction * N)``, as the published notebook counts them.

    (58 of 196 at the paper's 0.3.) A relative 1e-9 is added before truncating so that a
    product like 0.29 * 100 = 28.999999999999996 counts 29.
    """
    return int(_check_fraction(fraction) * n_tokens * (1 + 1e-9))


def mask_tokens(x, fraction: float = 0.3, rng=None) -> tuple[np.ndarray, np.ndarray]:
    """Set a random subset of each image's tokens to the zero spin (the masked task's input).

    Exactly ``k = masked_count(fraction, N)`` tokens (``int(fraction * N)``) are masked in
    every image, a uniformly random subset drawn independently per image.

    Parameters
    ----------
    x : array_like, shape (P, N, d)
        Spins (not modified).
    fraction : float in [0, 1]
        Fraction of the N tokens to mask (0.3 in the paper).
    rng : np.random.Generator, int or None
        Source of the random subsets (see the module docstring).

    Returns
    -------
    x_masked : ndarray, shape (P, N, d)
        A copy of ``x`` with the masked tokens set to 0.
    mask : ndarray, shape (P, N), bool
        True where a token is masked.
    """
    x = check_spins(x)
    fraction = _check_fraction(fraction)
    gen = as_generator(rng)
    P, N, _ = x.shape
    k = masked_count(fraction, N)
    order = np.argsort(gen.random((P, N)), axis=1)[:, :k]
    mask = np.zeros((P, N), dtype=bool)
    np.put_along_axis(mask, order, True, axis=1)
    x_masked = x.copy()
    x_masked[mask] = 0
    return x_masked, mask


def pixel_mask(mask, embedding: PatchEmbedding) -> np.ndarray:
    """Pixel masks of token masks: a pixel is masked when its token is.

    Parameters
    ----------
    mask : array_like of bool, shape (P, N)
        Token mask, as returned by :func:`mask_tokens`.
    embedding : PatchEmbedding
        The embedding that defines which pixels form each token.

    Returns
    -------
    ndarray, shape (P, H, W), bool
        The same for every channel when the images have several.
    """
    if not isinstance(embedding, PatchEmbedding):
        raise ValueError(f"embedding must be a PatchEmbedding, got {type(embedding).__name__}")
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise ValueError(f"mask must be a bool array, got dtype {mask.dtype}")
    if mask.ndim != 2 or mask.shape[1] != embedding.n_tokens:
        raise ValueError(
            f"mask must have shape (P, N) = (P, {embedding.n_tokens}), got shape {mask.shape}"
        )
    return mask[:, embedding.token_index_map()]


def corrupt_gaussian(images, variance: float = 0.7, rng=None, clip: bool = True) -> np.ndarray:
    """Gaussian corruption of the denoising task, with each image's statistics restored.

    For every image (mean m, standard deviation s over all its pixels and channels):

    1. y = image + sqrt(variance) · z, with z i.i.d. standard normal per pixel;
    2. y' = m + (y - mean(y)) · s / std(y), so that y' has exactly the original mean and
       variance (a constant result m where std(y) = 0);
    3. y' is clipped to [0, 1] (``clip=True``; clipping lowers the variance again).

    Parameters
    ----------
    images : array_like, shape (P, ...)
        Images with pixel values in [0, 1] (any trailing shape: (P, H, W) or (P, H, W, C)).
    variance : float >= 0
        Variance of the added noise (0.7 in the paper).
    rng : np.random.Generator, int or None
        Source of the noise (see the module docstring); noise is drawn in float64.
    clip : bool
        Clip the result to [0, 1]; ``False`` returns step 2 (for tests and analyses).

    Returns
    -------
    ndarray, same shape as ``images``
        float64 for float64 input, float32 otherwise.
    """
    images, variance = _check_noise_inputs(images, variance)
    noise = as_generator(rng).standard_normal(images.shape)
    return _restore_statistics(images, noise, variance, clip)


def noisy_starts(xi, noise: float = 0.0, flip: float = 0.0, rng=None) -> np.ndarray:
    """Starting states near stored patterns: flipped sites, Gaussian noise, back on the sphere.

    For every pattern ξ (N unit spins in R^d):

    1. exactly ``round(flip * N)`` sites, drawn without replacement, are reversed
       (ξ_i → −ξ_i: for d = 1, the spin flips of the Hopfield model), so the overlap
       m = (1/N) Σ_i x_i·ξ_i starts at 1 − 2 round(flip N)/N;
    2. Gaussian noise of std ``noise`` is added to every component;
    3. every spin is put back on the unit sphere (a spin that lands exactly on zero keeps
       its value of step 1).

    The Gaussian draws come first (always, shape (P, N, d)), then the flipped sites (only
    when ``flip > 0``): with ``flip=0`` a seed gives the starts of the synthetic scan
    points written before flips existed.

    Parameters
    ----------
    xi : array_like, shape (P, N, d)
        Patterns (unit spins).
    noise : float >= 0
        Standard deviation of the noise per spin component.
    flip : float in [0, 1]
        Fraction of the sites reversed in every pattern.
    rng : np.random.Generator, int or None
        Source of the noise and of the flipped sites (see :func:`as_generator`).

    Returns
    -------
    ndarray, shape (P, N, d)
        Unit spins, in the dtype of ``xi``.

    Examples
    --------
    >>> x0 = spinsa.tasks.noisy_starts(xi, flip=0.2, rng=0)   # m(0) = 0.6
    """
    xi = check_spins(xi, "xi")
    noise = check_real(noise, "noise")
    if not noise >= 0:
        raise ValueError(f"noise must be >= 0 (a standard deviation), got {noise}")
    flip = check_real(flip, "flip")
    if not 0 <= flip <= 1:
        raise ValueError(f"flip must be a fraction of the sites in [0, 1], got {flip}")
    rng = as_generator(rng)
    z = rng.standard_normal(xi.shape).astype(xi.dtype)
    x = xi.copy()
    P, N, _ = xi.shape
    n_flip = int(round(flip * N))
    if flip > 0:
        for mu in range(P):
            x[mu, rng.choice(N, size=n_flip, replace=False)] *= -1
    y = x + noise * z
    norms = np.linalg.norm(y, axis=-1, keepdims=True)
    return np.where(norms > 0, y / np.where(norms > 0, norms, 1), x).astype(xi.dtype)


def _check_noise_inputs(images, variance) -> tuple[np.ndarray, float]:
    images, variance = check_images(images), check_real(variance, "variance")
    if variance < 0:
        raise ValueError(f"variance must be >= 0, got {variance}")
    return images, variance


def _restore_statistics(images, noise, variance: float, clip: bool) -> np.ndarray:
    """Steps 1-3 of :func:`corrupt_gaussian` with the standard normal ``noise`` given."""
    clean = images.astype(np.float64)
    axes = tuple(range(1, clean.ndim))
    noisy = clean + np.sqrt(variance) * noise
    m, s = clean.mean(axis=axes, keepdims=True), clean.std(axis=axes, keepdims=True)
    my, sy = noisy.mean(axis=axes, keepdims=True), noisy.std(axis=axes, keepdims=True)
    ratio = np.zeros_like(s)
    np.divide(s, sy, out=ratio, where=sy > 0)
    out = m + (noisy - my) * ratio
    if clip:
        np.clip(out, 0, 1, out=out)
    return out.astype(images.dtype)


# --------------------------------------------------------------------- task inputs
def _image_index(index, n_images: int) -> np.ndarray:
    if index is None:
        return np.arange(n_images, dtype=np.int64)
    index = np.asarray(index)
    if index.shape != (n_images,) or not np.issubdtype(index.dtype, np.integer):
        raise ValueError(
            f"index must hold one integer per image, shape ({n_images},); got "
            f"{index.dtype} of shape {index.shape}"
        )
    if index.size and index.min() < 0:
        raise ValueError("index must hold non-negative image numbers")
    return index.astype(np.int64)


def _image_rng(seed: int, task: str, k) -> np.random.Generator:
    return np.random.default_rng([seed, TASK_STREAMS[task], int(k)])


def draw_masks(index, n_tokens: int, fraction: float = 0.3, seed: int = 0) -> np.ndarray:
    """The masked task's token masks, one per image, each from the image's own stream.

    Image ``index[p]`` masks ``masked_count(fraction, N)`` tokens drawn uniformly without
    replacement from ``np.random.default_rng([seed, TASK_STREAMS["masked"], index[p]])``: an
    image gets the same mask whatever the other images of the batch, its position or the
    patch-level harness (spin dynamics or pixel baselines) that asks.

    Parameters
    ----------
    index : array_like of int, shape (P,)
        The images' numbers in their data set (test split order).
    n_tokens : int
        N.
    fraction : float in [0, 1]
    seed : int

    Returns
    -------
    ndarray of bool, shape (P, N)
        True at masked tokens.
    """
    index = _image_index(index, np.shape(index)[0])
    k = masked_count(fraction, n_tokens)
    seed = check_count(seed, "seed")
    mask = np.zeros((index.size, n_tokens), dtype=bool)
    for p, key in enumerate(index):
        mask[p, _image_rng(seed, "masked", key).permutation(n_tokens)[:k]] = True
    return mask


def draw_noisy(images, index=None, variance: float = 0.7, seed: int = 0) -> np.ndarray:
    """:func:`corrupt_gaussian` of every image with noise from the image's own stream.

    Image ``index[p]`` draws its noise from
    ``np.random.default_rng([seed, TASK_STREAMS["denoise"], index[p]])``.

    Parameters
    ----------
    images : array_like, shape (P, H, W) or (P, H, W, C)
        Clean images in [0, 1].
    index : array_like of int, shape (P,), optional
        The images' numbers in their data set (default 0..P-1).
    variance : float >= 0
    seed : int

    Returns
    -------
    ndarray, same shape as ``images``
        Clipped to [0, 1]; float64 for float64 input, float32 otherwise.
    """
    images, variance = _check_noise_inputs(images, variance)
    index = _image_index(index, images.shape[0])
    seed = check_count(seed, "seed")
    noise = np.empty(images.shape, dtype=np.float64)
    for p, key in enumerate(index):
        noise[p] = _image_rng(seed, "denoise", key).standard_normal(images.shape[1:])
    return _restore_statistics(images, noise, variance, clip=True)


def task_inputs(
    task: str,
    images,
    embedding: PatchEmbedding,
    *,
    index=None,
    seed: int = 0,
    mask_fraction: float = 0.3,
    noise_variance: float = 0.7,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The corrupted inputs of a task: the one definition every evaluation and analysis uses.

    ``"masked"``: the embedded images with :func:`draw_masks`'s tokens set to the zero spin;
    ``"denoise"``: the embedding of :func:`draw_noisy`'s images. Each image's corruption
    depends only on (``seed``, task, its ``index``), so an image is corrupted the same way
    in ``spinsa evaluate``, ``spinsa analyze`` and the baselines, whatever subset it is in.

    Parameters
    ----------
    task : {"masked", "denoise"}
    images : array_like, shape (P, H, W)
        Clean images in [0, 1].
    embedding : PatchEmbedding
    index : array_like of int, shape (P,), optional
        The images' numbers in their data set (default 0..P-1).
    seed : int
    mask_fraction, noise_variance : float

    Returns
    -------
    x0 : ndarray, shape (P, N, d)
    mask : ndarray of bool, shape (P, N), or None
        The masked tokens (None for denoising).
    """
    check_choice(task, "task", TASKS)
    if not isinstance(embedding, PatchEmbedding):
        raise ValueError(f"embedding must be a PatchEmbedding, got {type(embedding).__name__}")
    images = np.asarray(images)
    index = _image_index(index, images.shape[0] if images.ndim else 0)
    if task == "denoise":
        return embedding.encode(draw_noisy(images, index, noise_variance, seed)), None
    x0 = embedding.encode(images)
    mask = draw_masks(index, embedding.n_tokens, mask_fraction, seed)
    x0[mask] = 0
    return x0, mask


@dataclass(frozen=True, eq=False)
class ReconstructionErrors:
    """Mean squared pixel errors, per recorded time and per image.

    Attributes
    ----------
    all : ndarray, shape (T, P) (or (P,) without a time axis), float64
        Mean over all pixels (and channels) of (decoded - clean)².
    masked : ndarray, same shape
        Mean over the masked pixels only; NaN when no mask was given or the image has none.
    visible : ndarray, same shape
        Mean over the visible (unmasked) pixels; NaN when no mask was given or the image
        has none.

    The same class holds the over-images summaries of :func:`summarize` (shape (T,)).
    """

    all: np.ndarray
    masked: np.ndarray
    visible: np.ndarray

    def __post_init__(self) -> None:
        shape = None
        for name in ("all", "masked", "visible"):
            value = np.asarray(getattr(self, name))
            if not np.issubdtype(value.dtype, np.number):
                raise ValueError(f"{name} must be a real array, got dtype {value.dtype}")
            if shape is not None and value.shape != shape:
                raise ValueError(
                    f"all, masked and visible must have one shape; {name} has {value.shape}, "
                    f"all has {shape}"
                )
            shape = value.shape
            value = value.copy() if value is getattr(self, name) else value
            value.setflags(write=False)
            object.__setattr__(self, name, value)


@dataclass(frozen=True, eq=False)
class ErrorSummary:
    """Means over images and their standard errors, at every recorded time.

    Attributes
    ----------
    mean, sem : ReconstructionErrors
        Mean over images and standard error of the mean (std with ddof=1 over sqrt(n)),
        each field of shape (T,). NaN entries (images without masked or visible pixels)
        are left out; the mean is NaN when no image counts, the sem when fewer than two do.
    count : ReconstructionErrors
        Number of images that entered each mean (int64, shape (T,)).
    """

    mean: ReconstructionErrors
    sem: ReconstructionErrors
    count: ReconstructionErrors

    def __post_init__(self) -> None:
        for name in ("mean", "sem", "count"):
            if not isinstance(getattr(self, name), ReconstructionErrors):
                raise ValueError(f"{name} must be a ReconstructionErrors")


def _flat_pixel_mask(pixel_mask, clean_shape) -> np.ndarray:
    """A checked bool mask (P, H, W) of images of ``clean_shape`` (P, H, W[, C]), broadcast
    over the channels and flattened to (P, H W [C])."""
    m = np.asarray(pixel_mask)
    if m.dtype != np.bool_:
        raise ValueError(f"pixel_mask must be a bool array, got dtype {m.dtype}")
    if m.shape != tuple(clean_shape[:3]):
        raise ValueError(
            f"pixel_mask must have shape (P, H, W) = {tuple(clean_shape[:3])}, got shape {m.shape}"
        )
    if len(clean_shape) == 4:
        m = np.broadcast_to(m[..., None], clean_shape)
    return m.reshape(clean_shape[0], -1)


def reconstruction_errors(decoded, clean, pixel_mask=None) -> ReconstructionErrors:
    """Mean squared pixel error of decoded images against the clean ones (paper §III).

    Parameters
    ----------
    decoded : array_like, shape (T, P, *image) or (P, *image)
        Decoded images at T recorded times (``emb.decode`` of each recorded state), or at one
        time. ``image`` is (H, W) or (H, W, C), the shape of one clean image.
    clean : array_like, shape (P, *image)
        The original images.
    pixel_mask : array_like of bool, shape (P, H, W), optional
        True at masked pixels (:func:`pixel_mask`); with channels it applies to all of them.

    Returns
    -------
    ReconstructionErrors
        Fields of shape (T, P), or (P,) when ``decoded`` has no time axis:
        ``all[t, p] = mean_pixels (decoded[t, p] - clean[p])²``, ``masked`` and ``visible``
        the same mean restricted to masked / visible pixels (NaN without a mask, or for an
        image with no masked / no visible pixel). Computed in float64.
    """
    clean = np.asarray(clean)
    decoded = np.asarray(decoded)
    for name, arr in (("clean", clean), ("decoded", decoded)):
        if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
            raise ValueError(f"{name} must be a real array, got dtype {arr.dtype}")
    if clean.ndim not in (3, 4):
        raise ValueError(
            f"clean must have shape (P, H, W) or (P, H, W, C), got shape {clean.shape}"
        )
    single = decoded.shape == clean.shape
    if not single and decoded.shape[1:] != clean.shape:
        raise ValueError(
            f"decoded must have shape (T, *clean.shape) = (T, {', '.join(map(str, clean.shape))})"
            f" or clean's shape {clean.shape}, got shape {decoded.shape}"
        )
    check_finite(clean, "clean")
    check_finite(decoded, "decoded")
    stack = decoded[None] if single else decoded
    T, P = stack.shape[:2]
    pixels_per_image = int(np.prod(clean.shape[1:]))

    if pixel_mask is not None:
        m = _flat_pixel_mask(pixel_mask, clean.shape)
        n_masked = m.sum(axis=1)
        n_visible = pixels_per_image - n_masked

    total = np.empty((T, P))
    masked = np.full((T, P), np.nan)
    visible = np.full((T, P), np.nan)
    ref = clean.reshape(P, -1).astype(np.float64)
    for t in range(T):  # one time at a time keeps the float64 temporaries small
        sq = (stack[t].reshape(P, -1).astype(np.float64) - ref) ** 2
        sum_all = sq.sum(axis=1)
        total[t] = sum_all / pixels_per_image
        if pixel_mask is not None:
            sum_masked = np.where(m, sq, 0.0).sum(axis=1)
            np.divide(sum_masked, n_masked, out=masked[t], where=n_masked > 0)
            np.divide(sum_all - sum_masked, n_visible, out=visible[t], where=n_visible > 0)
    if single:
        total, masked, visible = total[0], masked[0], visible[0]
    return ReconstructionErrors(all=total, masked=masked, visible=visible)


def mean_sem(values, axis: int = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, standard error of the mean and count over ``axis``, NaN entries left out.

    The one definition every summary in spinsa uses: sem = std(ddof=1) / sqrt(n) over the
    n non-NaN values; the mean is NaN when n = 0 and the sem when n < 2.

    Parameters
    ----------
    values : array_like
    axis : int

    Returns
    -------
    mean, sem : ndarray of float64
        ``values``'s shape without ``axis`` (0-d arrays for 1-d input).
    count : ndarray of int64
    """
    values = np.moveaxis(np.asarray(values, dtype=np.float64), axis, -1)
    ok = ~np.isnan(values)
    n = ok.sum(axis=-1)
    v = np.where(ok, values, 0.0)
    mean = np.full(n.shape, np.nan)
    np.divide(v.sum(axis=-1), n, out=mean, where=n > 0)
    dev2 = np.where(ok, (values - mean[..., None]) ** 2, 0.0).sum(axis=-1)
    sem = np.full(n.shape, np.nan)
    np.divide(dev2, n * (n - 1.0), out=sem, where=n > 1)
    return mean, np.sqrt(sem), n.astype(np.int64)


def summarize(errors: ReconstructionErrors) -> ErrorSummary:
    """Error curves: mean over images and its standard error at every recorded time.

    Parameters
    ----------
    errors : ReconstructionErrors
        Fields of shape (T, P) (or (P,)).

    Returns
    -------
    ErrorSummary
        ``mean``, ``sem`` and ``count``, each a ReconstructionErrors with fields of shape (T,)
        (or () for (P,) input); sem = std(ddof=1) / sqrt(n) over the n non-NaN images.
    """
    if not isinstance(errors, ReconstructionErrors):
        raise ValueError(
            f"errors must be a ReconstructionErrors (from reconstruction_errors), "
            f"got {type(errors).__name__}"
        )
    parts = (mean_sem(getattr(errors, name)) for name in ("all", "masked", "visible"))
    stats = zip(*parts, strict=True)
    return ErrorSummary(*(ReconstructionErrors(*s) for s in stats))  # mean, sem, count


# --------------------------------------------------------------------- scoring states
def image_correlation(images, target) -> np.ndarray:
    """Pearson correlation of every image with one target image, in float64.

    Parameters
    ----------
    images : array_like, shape (P, *image)
    target : array_like, shape image, e.g. (H, W)

    Returns
    -------
    ndarray, shape (P,), float64
        sum (a - mean a)(b - mean b) / (|a - mean a| |b - mean b|) over pixels; NaN where the
        image or the target is constant.
    """
    a = np.asarray(images, dtype=np.float64)
    a = a.reshape(a.shape[0], -1)
    a = a - a.mean(axis=1, keepdims=True)
    b = np.asarray(target, dtype=np.float64).ravel()
    b = b - b.mean()
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b)
    out = np.full(a.shape[0], np.nan)
    np.divide(a @ b, den, out=out, where=den > 0)
    return out


@dataclass(frozen=True, eq=False)
class StateScores:
    """What :class:`StateScorer` measures of one batch of states.

    Attributes
    ----------
    errors : ReconstructionErrors
        Fields of shape (P,), as :func:`reconstruction_errors` of the decoded images.
    correlation : ndarray, shape (P,), or None
        :func:`image_correlation` of the decoded images with the target (None without one).
    step : ndarray, shape (P,), or None
        Mean over tokens of |x_i - prev_i| (None without ``prev``).
    decoded : ndarray, shape (P, H, W) (or (P, H, W, C)), or None
        :meth:`PatchEmbedding.decode_pixels` of the states, when asked for.
    """

    errors: ReconstructionErrors
    correlation: np.ndarray | None
    step: np.ndarray | None
    decoded: np.ndarray | None


SCORING_BACKENDS = ("numba", "numpy")


class StateScorer:
    """Decode states and score them against fixed clean images, at every step of a run.

    ``"numba"`` (the default) decodes and scores in one compiled pass over the states
    (:mod:`spinsa.kernels.decode`); ``"numpy"`` composes the plain functions:
    :meth:`PatchEmbedding.decode_pixels`, :func:`reconstruction_errors`,
    :func:`image_correlation` and ``np.linalg.norm``. Both give the same numbers to float
    rounding (float32 states: the decoded pixels agree to float32 rounding). The fixed
    arrays are checked once here; each call checks the states' shape, the compiled pass
    their finiteness.

    Parameters
    ----------
    embedding : PatchEmbedding
    clean : array_like, shape (P, H, W) (or (P, H, W, C))
        The clean images in the embedding's pixel space (:meth:`PatchEmbedding.pixel_space`).
    pixel_mask : array_like of bool, shape (P, H, W), optional
        Masked pixels (:func:`pixel_mask`); without it ``masked`` and ``visible`` are NaN.
    target : array_like, shape (H, W) (or (H, W, C)), optional
        The image correlated with every decoded state (the mean training image).
    backend : {"numba", "numpy"}

    Examples
    --------
    >>> scorer = StateScorer(emb, clean, pmask, target=mean_image)
    >>> first = scorer(x0, decode=True)        # t = 0: errors, correlation, the inputs
    >>> later = scorer(x1, prev=x0)            # t = 1: ... and the step size
    """

    def __init__(self, embedding, clean, pixel_mask=None, target=None, *, backend="numba"):
        if not isinstance(embedding, PatchEmbedding):
            raise ValueError(f"embedding must be a PatchEmbedding, got {type(embedding).__name__}")
        self.backend = check_choice(backend, "backend", SCORING_BACKENDS)
        self.embedding = emb = embedding
        shape = emb._image_shape_full()
        self.clean = check_images(clean, "clean", shape)
        P = self.clean.shape[0]
        self.n_pixels = int(np.prod(shape))
        self.pixel_mask, self.target, self.n_masked = None, None, np.zeros(P)
        # the kernel reads pixels in token-minor order: pixel k of token i at [k, i]
        self._pix = emb.token_pixels()
        order = self._pix.T
        self._clean = np.ascontiguousarray(self.clean.reshape(P, -1)[:, order])
        if pixel_mask is not None:
            m = _flat_pixel_mask(pixel_mask, self.clean.shape)
            self.pixel_mask = np.asarray(pixel_mask)
            self._mask = np.ascontiguousarray(m[:, order])
            self.n_masked = m.sum(axis=1).astype(np.float64)
        if target is not None:
            t = np.asarray(target, dtype=np.float64)
            if t.shape != shape:
                raise ValueError(f"target must have one image's shape {shape}, got {t.shape}")
            check_finite(t, "target")
            self.target = t
            centred = t.ravel() - t.mean()
            self._target = np.ascontiguousarray(centred[order])
            self._target_norm = float(np.linalg.norm(centred))
        basis, self._top = emb.decode_map()
        self._basis_u = np.ascontiguousarray(basis[:, 0::2])
        self._basis_v = np.ascontiguousarray(basis[:, 1::2])

    def _check_states(self, x, name: str) -> np.ndarray:
        emb, P = self.embedding, self.clean.shape[0]
        x = np.asarray(x)
        want = (P, emb.n_tokens, emb.d)
        if x.shape != want:
            raise ValueError(f"{name} must have shape (P, N, d) = {want}, got shape {x.shape}")
        if not np.issubdtype(x.dtype, np.floating):
            raise ValueError(f"{name} must be a real float array, got dtype {x.dtype}")
        return np.ascontiguousarray(x, dtype=compute_dtype(x))

    def __call__(self, x, prev=None, *, decode: bool = False) -> StateScores:
        """Score the states ``x`` (P, N, d); ``prev`` (P, N, d): the states of the step
        before, for the step size; ``decode``: also return the decoded images.

        Raises
        ------
        ValueError
            A wrong shape, or NaN or infinite values in ``x`` or ``prev``.
        """
        x = self._check_states(x, "x")
        prev = None if prev is None else self._check_states(prev, "prev")
        if self.backend == "numpy":
            return self._plain(x, prev, decode)
        from spinsa.kernels.decode import decode_scores

        P, n = x.shape[0], self.n_pixels
        has_mask, has_target = self.pixel_mask is not None, self.target is not None
        flags = np.array([has_mask, has_target, prev is not None, decode])
        errors, corr, step = np.empty((3, P)), np.empty(P), np.empty(P)
        decoded = np.empty((P, n) if decode else (0, 0), dtype=x.dtype)
        bad = np.zeros(P, dtype=np.bool_)
        mask = self._mask if has_mask else np.zeros((0, 0, 0), dtype=np.bool_)
        target = self._target if has_target else np.zeros((0, 0))
        decode_scores(
            x, x if prev is None else prev, self._basis_u, self._basis_v, self._top, self._pix,
            x.dtype == np.float32, self._clean, mask, target,
            self._target_norm if has_target else 0.0, flags, errors, corr, step, decoded, bad,
        )  # fmt: skip
        if bad.any():
            raise ValueError(
                f"x contains NaN or infinite values (in {int(bad.sum())} of {P} states); "
                "all entries must be finite"
            )
        if prev is not None and not np.isfinite(step).all():
            raise ValueError("prev contains NaN or infinite values; all entries must be finite")
        masked, visible = np.full(P, np.nan), np.full(P, np.nan)
        if has_mask:
            n_visible = n - self.n_masked
            np.divide(errors[1], self.n_masked, out=masked, where=self.n_masked > 0)
            np.divide(errors[2], n_visible, out=visible, where=n_visible > 0)
        return StateScores(
            errors=ReconstructionErrors(all=errors[0], masked=masked, visible=visible),
            correlation=corr if has_target else None,
            step=step if prev is not None else None,
            decoded=decoded.reshape(self.clean.shape) if decode else None,
        )

    def _plain(self, x, prev, decode: bool) -> StateScores:
        """The ``"numpy"`` backend: the plain functions, one after the other."""
        if prev is not None:
            check_finite(prev, "prev")
        dec = self.embedding.decode_pixels(x)
        return StateScores(
            errors=reconstruction_errors(dec, self.clean, self.pixel_mask),
            correlation=None if self.target is None else image_correlation(dec, self.target),
            step=None if prev is None else np.linalg.norm(x - prev, axis=2).mean(axis=1),
            decoded=dec if decode else None,
        )
