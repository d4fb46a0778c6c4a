"""Atomic file writes: the one way spinsa puts a finished file on disk.

A file is written under a hidden temporary name next to its target
(``.NAME.tmp-<pid>-<hex>``), flushed to disk, and renamed onto the target with ``os.replace``,
atomic on POSIX file systems: a reader sees the previous file or the complete new one, never
half a file. A Python exception removes the temporary file; a process killed outright leaves
it behind, and :data:`TEMP_GLOB` finds such leftovers.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = [
    "TEMP_GLOB",
    "atomic_path",
    "atomic_write_text",
    "check_writable",
    "data_fingerprint",
    "refuse_existing",
]

#: Matches the temporary files of :func:`atomic_path` (for cleaning up after a kill).
TEMP_GLOB = ".*.tmp-*"


@contextlib.contextmanager
def atomic_path(final, *, overwrite: bool = True) -> Iterator[Path]:
    """A temporary path next to ``final``, moved onto it when the block ends without error.

    The caller creates the file at the yielded path (so it gets the usual permissions).

    Parameters
    ----------
    final : str or PathLike
        The target; its directory must exist.
    overwrite : bool
        False: raise ``FileExistsError`` instead of replacing a file that exists when the
        block ends (one that appeared while it was being written).

    Yields
    ------
    Path
    """
    final = Path(final)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        yield tmp
        with open(tmp, "rb") as fh:  # on disk before the rename makes it visible
            os.fsync(fh.fileno())
        if not overwrite and final.exists():
            raise FileExistsError(f"{final} already exists; pass overwrite=True to replace it")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def refuse_existing(path, flag: str = "overwrite=True") -> Path:
    """Raise ``FileExistsError`` if ``path`` exists: the one rule for outputs that exist.

    Parameters
    ----------
    path : str or PathLike
    flag : str
        How the caller asks for a replacement (``"--overwrite"`` on the command line,
        ``"overwrite=True"`` in Python), named in the message.

    Returns
    -------
    Path
        ``path``, when nothing is there yet.
    """
    path = Path(path)
    if path.exists():
        raise FileExistsError(
            f"{path} already exists; pass {flag} to replace it, or choose another path"
        )
    return path


def check_writable(path, overwrite: bool = False, flag: str = "--overwrite") -> Path:
    """Check, before any work, that a file can be written at ``path``.

    Refuses (``FileExistsError``) a file that exists unless ``overwrite``; refuses a
    directory, a missing directory (``FileNotFoundError``) and one that is not writable
    (``PermissionError``). Each error names the path, so the command line gives status 4.

    Parameters
    ----------
    path : str or PathLike
    overwrite : bool
    flag : str
        How the caller asks for a replacement, named in the message.

    Returns
    -------
    Path
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "is a directory, not a file", str(path))
    if not overwrite:
        refuse_existing(path, flag)
    parent = path.parent
    if not parent.is_dir():
        raise FileNotFoundError(2, f"directory {parent} does not exist", str(path))
    probe = parent / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:  # the one test that answers for read-only mounts, /proc and root alike
        probe.touch(exist_ok=False)
    except OSError as exc:
        raise PermissionError(13, f"cannot write in {parent} ({exc.strerror})", str(path)) from None
    probe.unlink()
    return path


def data_fingerprint(array) -> str:
    """SHA-1 of an array's bytes (C order) with its shape and dtype: what a checkpoint records
    of the data it was computed from, to refuse other data on resumption."""
    array = np.ascontiguousarray(array)
    h = hashlib.sha1()
    h.update(f"{array.shape}|{array.dtype.str}|".encode())
    h.update(memoryview(array).cast("B"))
    return h.hexdigest()
