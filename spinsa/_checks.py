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


def check_lam(lam, x: np.ndarray, J: np.ndarray, name: str = "lam") -> float:
    """lam > 0 whose scaled scores stay finite in the spins' dtype.

    |lam s_ij| <= lam max_i |x_i|^2 max_ij |J_ij|_F must stay below the dtype's largest
    number, or the softmax would turn into NaN (a float64 lam of 1e39 is inf in float32).
    """
    lam = check_positive(lam, name)
    largest = float(np.finfo(x.dtype).max)
    if x.size and J.size:
        x_max = float(np.sqrt(np.einsum("pia,pia->pi", x, x, dtype=np.float64).max()))
        J_max = float(np.sqrt(np.einsum("ijab,ijab->ij", J, J, dtype=np.float64).max()))
        bound = lam * x_max * x_max * J_max
        if bound >= largest or not np.isfinite(x.dtype.type(lam)):
            raise ValueError(
                f"{name} = {lam:g} is too large for {x.dtype} spins: the scaled scores "
                f"lam x_i . J_ij x_j can reach {bound:.3g}, beyond {x.dtype}'s largest number "
                f"{largest:.3g}; use a smaller {name}, or float64 spins and couplings"
            )
    return lam


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
