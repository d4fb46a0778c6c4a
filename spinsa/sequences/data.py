"""A scalar series split by time, normalised on its training part, cut into windows.

The ETT convention (Zhou et al. 2021): 12 / 4 / 4 months of 30 days for training,
validation and test (hourly: 8,640 / 2,880 / 2,880 rows), never shuffled across a boundary.
A validation or test window may look back ``context`` values into the part before it, as
the ETT benchmarks do; the values it predicts lie inside its own part. The series is
normalised with the training part's mean and standard deviation only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spinsa._checks import check_count, check_positive

__all__ = ["SeriesSplits", "split_series", "windows", "synthetic_series", "MONTH_DAYS"]

MONTH_DAYS = 30  # the ETT convention's month
# The magnitudes split_series can normalise: beyond the upper one the variance overflows
# float64, below the lower one a spread's square underflows to zero.
SCALABLE = (1e-150, 1e150)
SYNTHETIC = ("sines", "ar2")


@dataclass(frozen=True)
class SeriesSplits:
    """The three parts of a normalised series, each with the ``context`` values before it.

    Attributes
    ----------
    train, val, test : ndarray, shape (n_part + context,) except ``train`` (n_train,), float64
        Normalised values, (v - mean) / std; ``val`` and ``test`` start ``context`` values
        before their part (the history their first windows see).
    mean, std : float
        Of the raw training part.
    context : int
        Values a forecaster sees before the one it predicts.
    rows : (int, int, int)
        Rows of the three parts.
    """

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    mean: float
    std: float
    context: int
    rows: tuple[int, int, int]


def split_series(
    values, context: int, rows=None, *, step_seconds: float = 3600, months=(12, 4, 4)
) -> SeriesSplits:
    """Split a series by time and normalise it with the training part's statistics.

    Parameters
    ----------
    values : array_like, shape (T,)
        The raw series, oldest first.
    context : int
        Values before each prediction (>= 1).
    rows : (int, int, int), optional
        Rows of training, validation and test; default: ``months`` of 30 days at
        ``step_seconds`` per row (hourly ETT: 8,640 / 2,880 / 2,880).
    step_seconds : float
        Spacing of the rows in seconds (sub-second spacings too), for ``months``.
    months : (int, int, int)

    Returns
    -------
    SeriesSplits
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"values must be a 1-d series, got shape {values.shape}")
    if not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise ValueError(f"the series has a non-finite value at row {bad}; clean it first")
    context = check_count(context, "context", 1)
    if rows is None:
        per_month = int(MONTH_DAYS * 86_400 // check_positive(step_seconds, "step_seconds"))
        if per_month < 1:
            raise ValueError(
                f"the rows are {step_seconds} s apart, more than a 30-day month: give the "
                "rows of training, validation and test yourself (--rows TRAIN VAL TEST)"
            )
        rows = tuple(int(m) * per_month for m in months)
    if np.ndim(rows) != 1 or len(rows) != 3:
        raise ValueError(f"rows must be three counts (training, validation, test), got {rows!r}")
    n_train, n_val, n_test = (check_count(r, "rows", 1) for r in rows)
    need = n_train + n_val + n_test
    if values.size < need:
        raise ValueError(
            f"the series has {values.size} rows; the split needs {need} ({n_train} / {n_val} / "
            f"{n_test}): give a longer series or smaller parts (--rows TRAIN VAL TEST)"
        )
    if n_train <= 2 * context + 1:  # AR(context) needs more training windows than lags
        raise ValueError(
            f"the training part ({n_train} rows) must be longer than 2 x context + 1 "
            f"({2 * context + 1}): give a shorter --context or more training rows"
        )
    raw_train = values[:n_train]
    _check_scalable(values[:need], raw_train)
    mean, std = float(raw_train.mean()), float(raw_train.std())
    if not std > 0:
        raise ValueError("the training part is constant: it cannot be normalised")
    z = (values - mean) / std
    return SeriesSplits(
        train=z[:n_train],
        val=z[n_train - context : n_train + n_val],
        test=z[n_train + n_val - context : need],
        mean=mean,
        std=std,
        context=context,
        rows=(n_train, n_val, n_test),
    )


def _check_scalable(values: np.ndarray, raw_train: np.ndarray) -> None:
    """Refuse values whose mean and standard deviation would not be finite and non-zero."""
    big = float(np.abs(values).max())
    if big > SCALABLE[1]:
        raise ValueError(
            f"the series reaches {big:.3g}, outside the range that can be normalised "
            f"(|value| <= {SCALABLE[1]:g}: beyond it the variance overflows); rescale it first"
        )
    spread = float(raw_train.max() - raw_train.min())
    if 0 < spread < SCALABLE[0] * max(1.0, float(np.abs(raw_train).max())):
        raise ValueError(
            f"the training part varies by only {spread:.3g}, below the resolution that can be "
            f"normalised ({SCALABLE[0]:g} of its magnitude); rescale the series first"
        )


def windows(series, length: int) -> np.ndarray:
    """Every window of ``length`` consecutive values, stride 1: (T - length + 1, length)."""
    series = np.asarray(series)
    length = check_count(length, "length", 1)
    if series.size < length:
        raise ValueError(f"a series of {series.size} values has no window of {length}")
    return np.lib.stride_tricks.sliding_window_view(series, length).copy()


def synthetic_series(kind: str, n: int, seed: int = 0) -> np.ndarray:
    """A test series made in code: ``"sines"`` (three sinusoids of periods 24, 168 and 37.3
    plus N(0, 0.1²) noise) or ``"ar2"`` (x_t = 1.6 x_{t-1} - 0.8 x_{t-2} + N(0, 1)).
    Shape (n,), float64."""
    n = check_count(n, "n", 3)
    rng = np.random.default_rng(seed)
    if kind == "sines":
        t = np.arange(n)
        periodic = sum(np.sin(2 * np.pi * t / p + k) for k, p in enumerate((24.0, 168.0, 37.3)))
        return periodic + 0.1 * rng.standard_normal(n)
    if kind == "ar2":
        x, e = np.zeros(n), rng.standard_normal(n)
        for i in range(2, n):
            x[i] = 1.6 * x[i - 1] - 0.8 * x[i - 2] + e[i]
        return x
    raise ValueError(f"kind must be one of {SYNTHETIC}, got {kind!r}")
