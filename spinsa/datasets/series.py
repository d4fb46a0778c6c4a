"""Time series: a column of ETTh1 from the cache, or of any CSV file with a time column.

:func:`load_series` reads a cached data set (``spinsa data fetch etth1``); :func:`read_series_csv`
reads a file the user has (ETTh1, ETTh2, ETTm1, ETTm2 or any CSV with ISO times and numeric
columns) in place: spinsa never writes or modifies a CSV file (the ETT licence, CC BY-ND 4.0,
allows exact copies only).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spinsa._checks import check_choice
from spinsa.datasets import sources
from spinsa.datasets._cache import DataNotFoundError
from spinsa.datasets.sources import ETT_COLUMNS, read_cached, read_time_csv

__all__ = ["ETT_COLUMNS", "SERIES_DATASETS", "Series", "load_series", "read_series_csv"]

#: The cached data sets that are time series, and their value columns (in the cache's order).
SERIES_DATASETS: dict[str, tuple[str, ...]] = {"etth1": ETT_COLUMNS}


@dataclass(frozen=True, eq=False)
class Series:
    """One column of a time series, its times, and where it came from.

    Parameters
    ----------
    values : array_like of float, shape (T,)
        Finite; stored as a read-only float64 array.
    timestamps : array_like of int or float, shape (T,)
        Seconds since 1970-01-01 00:00 UTC, strictly increasing; stored read-only as int64,
        or as float64 when they are not whole seconds (a CSV with sub-second times).
    column : str
        The column's name (``"OT"``: the oil temperature of the ETT files).
    source : str
        The data set (``"etth1"``) or the path of the CSV file.

    Attributes
    ----------
    step_seconds : int or float
        The median spacing of ``timestamps`` (the lower median for an even number of steps,
        so always one of the spacings): 3600 for ETTh1, 900 for ETTm1.
    """

    values: np.ndarray
    timestamps: np.ndarray
    column: str
    source: str
    step_seconds: int = field(init=False)

    def __post_init__(self):
        values = np.array(self.values, dtype=np.float64)  # a copy, then read-only
        times = np.array(self.timestamps)
        if values.ndim != 1 or values.size < 2:
            raise ValueError(f"values must have shape (T,) with T >= 2, got {values.shape}")
        if not np.isfinite(values).all():
            raise ValueError("values must be finite")
        if times.shape != values.shape or not np.issubdtype(times.dtype, np.number):
            raise ValueError(
                f"timestamps must be numbers (seconds) of shape {values.shape}, got "
                f"{times.dtype} of shape {times.shape}"
            )
        whole = np.issubdtype(times.dtype, np.integer)  # sub-second times stay float64
        times = times.astype(np.int64 if whole else np.float64)
        if not np.isfinite(times).all():
            raise ValueError("timestamps must be finite")
        steps = np.diff(times)
        if (steps <= 0).any():
            raise ValueError("timestamps must increase strictly")
        for a in (values, times):
            a.flags.writeable = False
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "timestamps", times)
        object.__setattr__(self, "column", str(self.column))
        object.__setattr__(self, "source", str(self.source))
        step = np.sort(steps)[(steps.size - 1) // 2]
        object.__setattr__(self, "step_seconds", int(step) if whole else float(step))

    def __len__(self) -> int:
        return int(self.values.size)

    @property
    def datetimes(self) -> np.ndarray:
        """``timestamps`` as ``datetime64[s]`` (UTC), shape (T,)."""
        return self.timestamps.astype("datetime64[s]")


def load_series(name: str = "etth1", column: str = "OT", *, fetch: bool = True) -> Series:
    """One column of a cached time series data set.

    Parameters
    ----------
    name : {"etth1"}
        ETTh1: 17,420 hourly rows (2016-07-01 to 2018-06-26) of an electricity transformer.
    column : str
        One of :data:`ETT_COLUMNS`: ``"OT"`` (oil temperature, the usual target) or a load
        (``"HUFL"``, ``"HULL"``, ``"MUFL"``, ``"MULL"``, ``"LUFL"``, ``"LULL"``).
    fetch : bool
        Fetch the data set first if the cache has none (``spinsa data fetch etth1``: downloads
        the pinned sdist ``momentfm==0.1.4``, about 6 MB); False raises instead.

    Returns
    -------
    Series
        ``source`` is ``name``.

    Raises
    ------
    ValueError
        Unknown name or column (the message lists the known ones).
    DataNotFoundError
        Nothing in the cache and ``fetch=False``; says what to run.
    DataCorruptError
        The cached file does not match its manifest; says how to re-create it.
    """
    columns = SERIES_DATASETS[check_choice(name, "name", tuple(SERIES_DATASETS))]
    check_choice(column, "column", columns)  # before any download
    if fetch and not sources.dataset_path(name).is_file():
        sources.fetch(name)
    arrays = read_cached(name, ["values", "timestamps"])
    return Series(arrays["values"][:, columns.index(column)], arrays["timestamps"], column, name)


def read_series_csv(path: str | os.PathLike, column: str) -> Series:
    """One column of a CSV time series: an ETT file (ETTh1, ETTh2, ETTm1, ETTm2) or any CSV
    file with a header row, a time column and numeric columns. The file is only read.

    The time column is the one named ``date``, ``time``, ``timestamp`` or ``datetime`` (any
    case), else the first; its ISO dates (``2016-07-01 00:00:00``, with ``T``, ``Z`` or an
    offset such as ``+01:00`` too) are read with numpy's ``datetime64``, those without an
    offset as UTC, and must increase strictly. The values of ``column`` must be finite
    numbers; other columns are not read.

    Parameters
    ----------
    path : path
    column : str
        The header's name of the column (for the ETT files one of :data:`ETT_COLUMNS`).

    Returns
    -------
    Series
        ``source`` is ``path``.

    Raises
    ------
    DataNotFoundError
        No file at ``path``.
    ValueError
        ``column`` is not in the file (the message lists the columns that are).
    DataCorruptError
        An empty file, fewer than 2 rows, a time that is not an ISO date or not after the one
        before, a value that is missing, not a number or NaN; each names the line.
    """
    if not isinstance(column, str):
        raise ValueError(f"column must be a column name (str), got {column!r}")
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataNotFoundError(f"no CSV file at {path}")
    timestamps, values, _ = read_time_csv(path.read_bytes(), str(path), [column])
    return Series(values[:, 0], timestamps, column, str(path))
