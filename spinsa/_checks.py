"""Input validation shared by the public functions.

Every public function checks its arguments here and raises a ``ValueError`` that names
the argument and says what was expected; kernels never validate.
"""

from __future__ import annotations

import numbers

import numpy as np

FLOAT_DTYPES = (np.float32, np.float64)


class MissingDependencyError(ImportError):
    """An optional dependency (torch, dask, xarray...) is missing; the message says what to
    install. The command line prints it in one line (exit status 2)."""


def import_xarray():
    """``import xarray``, or a :class:`MissingDependencyError` that says how to install it."""
    try:
        import xarray
    except ImportError:
        raise MissingDependencyError(
            'results as xarray need xarray: pip install "spinsa[cluster]" (or pip install xarray)'
        ) from None
    return xarray


def compute_dtype(*arrays) -> np.dtype:
    """float64 if any input is float64, else float32 (the library's default)."""
    for a in arrays:
        if np.asarray(a).dtype == np.float64:
            return np.dtype(np.float64)
    return np.dtype(np.float32)


def check_finite(a: np.ndarray, name: str) -> None:
    if not np.isfinite(a).all():
        bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
        raise ValueError(
            f"{name} contains {bad} NaN or infinite value(s); all entries must be finite"
        )


def check_spins(x, name: str = "x", dtype=None) -> np.ndarray:
    """A finite C-contiguous float array of shape (P, N, d)."""
    x = np.asarray(x)
    if x.ndim != 3:
        hint = f" (for one configuration of shape (N, d) pass {name}[None])" if x.ndim == 2 else ""
        raise ValueError(
            f"{name} must have shape (n_samples, n_tokens, d), got shape {x.shape}{hint}"
        )
    if x.shape[1] < 2:
        raise ValueError(f"{name} must have at least 2 tokens (axis 1), got {x.shape[1]}")
    if x.shape[2] < 1:
        raise ValueError(f"{name} must have spin dimension d >= 1 (axis 2), got {x.shape[2]}")
    if not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
        raise ValueError(f"{name} must be a real float array, got dtype {x.dtype}")
    x = np.ascontiguousarray(x, dtype=dtype or compute_dtype(x))
    check_finite(x, name)
    return x


def check_images(images, name: str = "images", shape: tuple | None = None, dtype=None):
    """A finite C-contiguous float array of images (P, ...) with pixel values in [0, 1].

    ``shape``: the shape of one image, e.g. (H, W) or (H, W, C) (default: any, at least 1-d);
    ``dtype``: the returned dtype (default: float64 for float64 input, float32 otherwise).
    """
    images = np.asarray(images)
    if shape is not None and images.shape[1:] != tuple(shape) or images.ndim < 2:
        want = "(P, ...)" if shape is None else f"(P, {', '.join(map(str, shape))})"
        hint = " (for a single image pass images[None])" if images.shape == shape else ""
        raise ValueError(f"{name} must have shape {want}, got shape {images.shape}{hint}")
    if images.dtype != np.bool_ and (
        not np.issubdtype(images.dtype, np.number) or np.iscomplexobj(images)
    ):
        raise ValueError(f"{name} must be a real array, got dtype {images.dtype}")
    images = np.ascontiguousarray(images, dtype=dtype or compute_dtype(images))
    check_finite(images, name)
    if images.size and (images.min() < 0 or images.max() > 1):
        lo, hi = float(images.min()), float(images.max())
        hint = " (8-bit images: divide by 255)" if hi > 1 and lo >= 0 else ""
        raise ValueError(
            f"{name} must have pixel values in [0, 1], got values in [{lo:g}, {hi:g}]{hint}"
        )
    return images


def check_couplings(
    J, n_tokens: int | None = None, d: int | None = None, dtype=None, name: str = "J"
) -> np.ndarray:
    """A finite C-contiguous float array of shape (N, N, d, d), matching the spins if given."""
    J = np.asarray(J)
    if J.ndim != 4 or J.shape[0] != J.shape[1] or J.shape[2] != J.shape[3]:
        raise ValueError(f"{name} must have shape (N, N, d, d), got shape {J.shape}")
    if n_tokens is not None and (J.shape[0] != n_tokens or J.shape[2] != d):
        raise ValueError(
            f"{name} has shape {J.shape} but the spins have N = {n_tokens} tokens of d = {d}; "
            f"expected {name}.shape == ({n_tokens}, {n_tokens}, {d}, {d})"
        )
    if not np.issubdtype(J.dtype, np.number) or np.iscomplexobj(J):
        raise ValueError(f"{name} must be a real float array, got dtype {J.dtype}")
    J = np.ascontiguousarray(J, dtype=dtype or compute_dtype(J))
    check_finite(J, name)
    return J


def check_spins_couplings(x, J, x_name: str = "x") -> tuple[np.ndarray, np.ndarray]:
    """Validate spins and couplings together; both come back in one dtype."""
    dtype = compute_dtype(x, J)
    x = check_spins(x, x_name, dtype)
    J = check_couplings(J, x.shape[1], x.shape[2], dtype)
    return x, J


def check_positive(value, name: str) -> float:
    """A finite real number > 0 (lam, tolerances, scales)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number > 0, got {value!r}")
    value = float(value)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


# The softmax kernels start their running maximum at -1e30: scaled scores must stay well
# inside that, or a row whose scores all lie below it has no weight at all (NaN states).
SCORE_LIMIT = 1e29


def spin_norm_max(x: np.ndarray) -> float:
    """max_i |x_i| over the last axis (0 for an empty array)."""
    from spinsa.kernels.norms import max_norm  # numba loads with the first check

    return max_norm(np.ascontiguousarray(x), x.shape[-1])


def block_norm_max(J: np.ndarray) -> float:
    """max_ij |J_ij|_F of couplings (N, N, d, d) (0 for an empty array)."""
    from spinsa.kernels.norms import max_norm

    return max_norm(np.ascontiguousarray(J), J.shape[2] * J.shape[3])


def score_bound(x: np.ndarray, J: np.ndarray) -> float:
    """max_i |x_i|^2 max_ij |J_ij|_F, a bound on |x_i . J_ij x_j| (0 for empty arrays)."""
    return spin_norm_max(x) ** 2 * block_norm_max(J)


def check_lam(
    lam, x: np.ndarray, J: np.ndarray, name: str = "lam", bound=None, float64_hint: str = ""
) -> float:
    """lam > 0 whose scaled scores and energies stay finite in the spins' dtype.

    |lam s_ij| <= lam max_i |x_i|^2 max_ij |J_ij|_F (or ``bound``, when the couplings of a
    fit are known only by their norm) must stay below :data:`SCORE_LIMIT` and the dtype's
    largest number, or the softmax turns into NaN (a float64 lam of 1e39 is inf in float32);
    and lam must stay large enough that the energies, about N log N / lam, are finite.
    """
    lam = check_positive(lam, name)
    dtype = np.dtype(x.dtype)
    float64 = (
        ", or " + (float64_hint or "float64 spins and couplings") if dtype == np.float32 else ""
    )
    info = np.finfo(dtype)
    largest = float(info.max)
    limit = min(largest, SCORE_LIMIT)
    reach = lam * (score_bound(x, J) if bound is None else float(bound))
    if reach >= limit or not np.isfinite(dtype.type(lam)):
        raise ValueError(
            f"{name} = {lam:g} is too large for {dtype} spins: the scaled scores "
            f"lam x_i . J_ij x_j can reach {reach:.3g}, beyond {limit:.3g} (the largest the "
            f"softmax takes in {dtype}); use a smaller {name}{float64}"
        )
    n = max(int(x.shape[-2]) if x.ndim >= 2 else 2, 2)
    if dtype.type(lam) < info.tiny or lam * largest <= 10 * n * np.log(n):
        raise ValueError(
            f"{name} = {lam:g} is too small for {dtype} spins: the energies, about "
            f"N log N / {name}, would overflow {dtype} (or {name} rounds to zero); use a "
            f"larger {name}{float64}"
        )
    return lam


def check_gamma(gamma, x: np.ndarray, J: np.ndarray, norms: tuple[float, float]) -> float:
    """A finite gamma whose update h_i + gamma x_i stays finite in the spins' dtype.

    ``norms``: (:func:`spin_norm_max` of x, :func:`block_norm_max` of J)."""
    gamma = check_real(gamma, "gamma")
    largest = float(np.finfo(x.dtype).max)
    x_max, J_max = norms
    # |h_i + gamma x_i|^2 <= ((N max|J_ij| + |gamma|) |x|)^2 must not overflow the norm
    reach = (x.shape[-2] * J_max + abs(gamma)) * max(x_max, 1.0)
    if reach * reach >= largest:
        raise ValueError(
            f"gamma = {gamma:g} is too large for {x.dtype} spins: the update h_i + gamma x_i "
            f"can reach {reach:.3g}, whose square overflows {x.dtype}; use a smaller gamma"
        )
    return gamma


def check_lam_gamma(lam, gamma, x: np.ndarray, J: np.ndarray) -> tuple[float, float]:
    """:func:`check_lam` then :func:`check_gamma`, the norms of x and J taken once."""
    x_max, J_max = spin_norm_max(x), block_norm_max(J)
    lam = check_lam(lam, x, J, bound=x_max**2 * J_max)
    return lam, check_gamma(gamma, x, J, norms=(x_max, J_max))


def check_noise(noise_std: float, x: np.ndarray) -> float:
    """A noise scale whose noisy spins x + N(0, noise_std^2) can be normalised in x's dtype."""
    largest = float(np.finfo(x.dtype).max)
    # 10 standard deviations in each of d components, plus the spin itself
    reach = 10 * noise_std * np.sqrt(x.shape[-1]) + spin_norm_max(x)
    if reach * reach >= largest:
        raise ValueError(
            f"noise_std = {noise_std:g} is too large for {x.dtype} spins: the noisy spins "
            f"reach about {reach:.3g}, whose square overflows {x.dtype}; use a smaller "
            "noise_std (above about 3 the noise already hides the spins)"
        )
    return noise_std


class NonFiniteResultError(ValueError):
    """A computation produced NaN or infinity; the message names the inputs that caused it.
    On the command line: exit status 2, as the user's input is what to change."""


def check_result(a, what: str, cause: str) -> None:
    """Raise :class:`NonFiniteResultError` if ``a`` (an array or a number) is not all finite.

    ``what`` names the result ("the fitted couplings J"), ``cause`` the parameters that made
    it non-finite and what to do ("lower lam, or use float64").
    """
    a = np.asarray(a)
    if a.size and not np.isfinite(a).all():
        bad = int(a.size - np.count_nonzero(np.isfinite(a)))
        raise NonFiniteResultError(
            f"{what} came out non-finite ({bad} of {a.size} values NaN or infinite): {cause}"
        )


def check_real(value, name: str) -> float:
    """A finite real number (gamma, offsets)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


def check_count(value, name: str, minimum: int = 0) -> int:
    """An integer >= minimum (steps, record_every, sizes); floats like 3.0 are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def check_choice(value, name: str, choices) -> str:
    if value not in choices:
        known = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {known}; got {value!r}")
    return value


# Floating-point operations of the dynamics a fit may run before it is refused as too
# costly: ~1e16 is days on one CPU core and hours on a GPU.
DYNAMICS_FLOP_LIMIT = 1e16


def check_fit_inputs(xi: np.ndarray, J: np.ndarray, targets: np.ndarray, config) -> None:
    """Before a fit: lam, BPTT's noise and the dynamics' cost that stay in range.

    ``xi`` (P, N, d) the patterns as fitted, ``J`` the starting couplings, ``targets`` the
    norm(s) the fit keeps (|J_ij|_F can reach the largest), ``config`` a FitConfig.
    """
    J_max = max(block_norm_max(J), float(np.max(targets, initial=0.0)))
    hint = "dtype='float64' (--set fit.dtype=float64)"
    check_lam(config.lam, xi, J, bound=spin_norm_max(xi) ** 2 * J_max, float64_hint=hint)
    if config.method == "bptt" and config.task == "denoise":
        check_noise(config.noise_std, xi)
    if config.method == "pl" or not config.check_memory:
        return
    P, N, d = xi.shape
    sweeps = config.k if config.method == "cd" else 3 * config.tau_max  # forward + backward
    batches = config.epochs * -(-P // min(config.batch_size, P)) if P else 0
    flops = 4.0 * N * N * d * d * min(config.batch_size, P) * sweeps * batches
    if flops > DYNAMICS_FLOP_LIMIT:
        what = f"k = {config.k}" if config.method == "cd" else f"tau_max = {config.tau_max}"
        raise ValueError(
            f"{what} makes the {config.method} fit run about {flops:.2g} floating-point "
            f"operations of the dynamics (more than {DYNAMICS_FLOP_LIMIT:.0e}: days of "
            f"compute); lower {what.split()[0]} or the epochs, or pass check_memory=False "
            "(--set fit.check_memory=false) to run it anyway"
        )


def check_fit_result(J: np.ndarray, losses, config) -> None:
    """After a fit: the couplings and the last losses are finite, else an error naming the
    options that made them non-finite."""
    cause = f"lam = {config.lam:g} in {config.dtype}"
    if config.method == "bptt" and config.task == "denoise":
        cause += f", noise_std = {config.noise_std:g}"
    cause += ", lr = " + (f"{config.lr:g}" if config.backend == "torch" else "(L-BFGS)")
    cause += "; lower lam (or lr), or use dtype='float64'"
    check_result(J, "the fitted couplings J", cause)
    check_result(np.asarray(losses, dtype=np.float64), "the fit's loss", cause)


# The largest lr, l2, weight_decay and momentum a fit accepts, and the largest lr ·
# weight_decay: the torch optimisers turn them into float32 scalars (Adam's first step is
# lr / (1 - 0.9), AdamW's decay 1 - lr · weight_decay, the penalty's gradient l2 · J), and
# float32 ends at 3.4e38. Long before this bound every value is past any useful one.
OPTIMISER_MAX = 1e30


def check_optimiser_value(value, name: str, zero: bool = False, hint: str = "") -> float:
    """A finite real number in (0, :data:`OPTIMISER_MAX`] (with ``zero``: [0, ...]).

    ``hint`` says which values are useful, for the message of a value beyond the bound.
    """
    value = check_real(value, name) if zero else check_positive(value, name)
    if zero and value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if value > OPTIMISER_MAX:
        useful = f"; {hint}" if hint else ""
        raise ValueError(
            f"{name} = {value:g} is too large: it must be at most {OPTIMISER_MAX:g} (the "
            f"optimisers' float32 arithmetic overflows beyond that){useful}"
        )
    return value
