"""The local cache of converted data sets: ``NAME.npz`` and its manifest ``NAME.json``.

The manifest records the sha256 of the ``.npz`` (checked on every read), the shape, dtype and
content sha256 of each array, where they came from, and when. Both files are written
atomically. The cache knows nothing of sources: callers pass ``how``, the command that fills
it, for the error messages.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from spinsa._files import atomic_path, atomic_write_text

#: Environment variable that overrides the cache directory.
DATA_ENV = "SPINSA_DATA"


class DataError(Exception):
    """Base class of the errors raised while fetching or loading a data set."""


class DataNotFoundError(DataError, FileNotFoundError):
    """A data set is not in the cache (or a source file is missing); says what to run."""


class DataCorruptError(DataError, ValueError):
    """A file does not match its checksum or its format; says how to re-create it."""


class DataFetchError(DataError, RuntimeError):
    """The download itself failed (no network, no pip); says how to fetch by hand."""


def data_dir() -> Path:
    """The absolute path of the cache: ``$SPINSA_DATA`` if set (and non-empty), else
    ``$XDG_CACHE_HOME/spinsa``, else ``~/.cache/spinsa``. Fetching creates it, not this."""
    env = os.environ.get(DATA_ENV, "").strip()
    if env:
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "spinsa").absolute()


def npz_path(name: str) -> Path:
    """Where the converted data set ``name`` lives: ``data_dir() / "NAME.npz"``."""
    return data_dir() / f"{name}.npz"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """A compressed ``.npz`` with fixed member timestamps (same arrays -> same bytes)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, a in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.ascontiguousarray(a), allow_pickle=False)


def write(name: str, arrays: dict[str, np.ndarray], source: dict[str, Any]) -> Path:
    """Put ``arrays`` in the cache as ``NAME.npz`` with its manifest; returns the npz path.

    ``source`` (JSON-serialisable) says where the arrays came from. The manifest is in place
    before the ``.npz`` appears, so a finished ``.npz`` always has one.
    """
    from spinsa._version import __version__

    npz = npz_path(name)
    npz.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(npz) as tmp:
        _write_npz(tmp, arrays)
        manifest = {
            "name": name,
            "file": npz.name,
            "sha256": sha256_file(tmp),
            "size": tmp.stat().st_size,
            # each array's own sha256, which unlike the file's does not depend on zlib
            "arrays": {
                key: {
                    "shape": list(a.shape),
                    "dtype": str(a.dtype),
                    "sha256": hashlib.sha256(np.ascontiguousarray(a)).hexdigest(),
                }
                for key, a in arrays.items()
            },
            "source": source,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "spinsa_version": __version__,
        }
        atomic_write_text(npz.with_suffix(".json"), json.dumps(manifest, indent=2) + "\n")
    return npz


def verify(name: str, how: str, content: bytes | None = None) -> dict[str, Any]:
    """The manifest of ``NAME.npz``, after checking the file's sha256 against it (the sha256
    of ``content``, the file's bytes when the caller has read them already)."""
    npz = npz_path(name)
    if content is None and not npz.is_file():
        raise DataNotFoundError(
            f"{name} is not in the data cache {npz.parent} (set {DATA_ENV} to use another "
            f"directory); fetch it with {how}"
        )
    json_path = npz.with_suffix(".json")
    try:
        manifest = json.loads(json_path.read_text())
        expected = manifest["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataCorruptError(
            f"{npz} has no readable manifest {json_path.name} ({exc}); re-create it with {how}"
        ) from None
    actual = sha256_file(npz) if content is None else hashlib.sha256(content).hexdigest()
    if actual != expected:
        raise DataCorruptError(
            f"{npz} is corrupt: its sha256 is {actual} but {json_path.name} records {expected}; "
            f"re-create it with {how}"
        )
    return manifest


def read(name: str, keys: list[str], how: str) -> dict[str, np.ndarray]:
    """The arrays ``keys`` of ``NAME.npz``, verified against its manifest first.

    The file is read once: the bytes whose sha256 is checked are the bytes loaded.
    """
    npz = npz_path(name)
    content = npz.read_bytes() if npz.is_file() else None
    verify(name, how, content)  # None: the file is missing, a DataNotFoundError
    try:
        with np.load(io.BytesIO(content), allow_pickle=False) as f:
            return {key: f[key] for key in keys}
    except (KeyError, ValueError, OSError, zipfile.BadZipFile) as exc:
        raise DataCorruptError(
            f"{npz} does not hold {', '.join(keys)} ({exc}); re-create it with {how}"
        ) from None
