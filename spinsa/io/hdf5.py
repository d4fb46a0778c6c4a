"""Reading and writing spinsa HDF5 files safely.

New files (:func:`write_file`) are atomic: written under a hidden temporary name next to
the target (``.NAME.tmp-<pid>-<hex>``), flushed to disk, and renamed onto it
(:func:`spinsa._files.atomic_path`). A reader sees the previous file or the complete new
one; a process killed outright leaves at worst the hidden temporary file.

Groups added to an existing file (:func:`write_group`) are written in place, not by copying
the file. HDF5 has no journal: a process killed while HDF5 rewrites the metadata of an
existing group (the B-tree and heap of a group with many members, an object header that
grows) can leave that group unreadable; killed before each of its system calls, a plain
in-place write did so in 24 of 310 trials. So HDF5 never writes the old bytes itself:

1. the new group is built as an anonymous HDF5 group (no name reaches it) through h5py's
   ``fileobj`` driver (:class:`_HeldWrites`): bytes past the old end of the file go to disk,
   writes to older bytes are held in memory; flush, fsync;
2. the group is linked under its name; flush: the held writes are now the whole change;
3. if that change fits in one 4 KiB page (or in the superblock, written first, and one
   other page), it is written with one ``pwrite`` inside each page, and fsynced: a killed
   process leaves whole pages, so the group appears whole or not at all. If it does not
   (mostly a parent that already has 8 members: HDF5 keeps the links of a larger group in a
   B-tree and a heap), the old bytes are untouched: the file is copied, the group added to
   the copy, and the copy renamed onto the file.

Safety, and what remains. A process that dies at any point (``kill -9``, a Slurm time limit,
the out-of-memory killer, Ctrl-C) leaves the file as it was or with the group complete, and
no temporary group for readers to skip: killed before each of the 426 system calls that
change files in 15 kinds of change, the file was always one of the two, and so it was after
400 kills at random times (tests/test_io.py runs both, smaller). What a killed writer wrote
past the end of the file is reused by the next write; a replaced group (and, if the writer
was killed between the last two writes, its new group) stays as unreachable bytes, which
only ``h5repack`` reclaims. Not covered: power loss or a kernel crash just as a page
is written, where the one-page write relies on the disk writing a 4 KiB page whole (most
SSDs do; disks with 512-byte sectors may not); bugs of HDF5; writers that bypass spinsa.io.

One writer at a time. The writer holds the exclusive lock that HDF5 takes for writers
(``flock``), and HDF5 readers take a shared one: a read waits for a write, and a write waits
for readers (another process, or an ``h5py.File`` still open in this one) to close the file,
each up to ``LOCK_WAIT_S`` seconds, then raises ``BlockingIOError``. With
``HDF5_USE_FILE_LOCKING=FALSE`` (file systems without locks) nothing keeps two writers, or a
reader and a writer, apart; do not read a file while spinsa writes to it there.

Every byte is under a checksum. HDF5 checksums the metadata of this format itself (object
headers with their attributes, the B-trees and heaps); every dataset's data is chunked with
the Fletcher-32 filter, so a changed byte is an error on read (:func:`verify` reads them
all). Strings are stored as fixed-length UTF-8 and 0-d arrays inside their object header,
so that no data lie outside a checksum. Chunks run along the first axis (about 1 MiB a
chunk, so that reading ``states[t]`` reads one chunk); arrays of 64 KiB or more are
compressed with gzip level 4 after byte shuffling. gzip rather than lzf so that plain HDF5 tools
(``h5dump``, HDFView, other languages) read the files too. Files use the HDF5 1.8 format
(readable by any HDF5 since 2008), which lifts the 64 KiB limit on an attribute. (The newer
format would not help here: its superblock marks a file open for writing, and a file whose
writer was killed then refuses to open until ``h5clear`` is run.)
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from spinsa._config import config_to_dict, flatten
from spinsa._files import atomic_path
from spinsa.io.schema import (
    COUPLINGS_DTYPE,
    COUPLINGS_NAME,
    GROUP_PROVENANCE_KEYS,
    RESERVED_KEYS,
    RESERVED_PREFIXES,
    SpinsaFileError,
    check_schema,
    decode_attr,
    encode_attr,
    now_utc,
    provenance,
    spinsa_version,
    to_json,
)

COMPRESS_MIN_BYTES = 64 * 1024
CHUNK_TARGET_BYTES = 1024 * 1024
LIBVER = ("v108", "v108")
PAGE = 4096  # bytes the kernel writes whole: a killed write leaves whole pages
MAX_COMPACT_LINKS = 8  # HDF5's default: a group with more keeps its links in dense storage
LOCK_WAIT_S = 30.0  # how long a read or a write waits for another process to close the file

# --------------------------------------------------------------------------- writing


def write_file(
    path: str | os.PathLike,
    arrays: Mapping[str, Any],
    attrs: Mapping[str, Any] | None = None,
    *,
    kind: str,
    config: Any = None,
    seeds: Mapping[str, int | None] | None = None,
    group_attrs: Mapping[str, Mapping[str, Any]] | None = None,
    mode: str = "x",
    overwrite: bool = False,
) -> Path:
    """Write a complete spinsa file in one go, atomically.

    Parameters
    ----------
    path : str or PathLike
        Target file; its directory must exist.
    arrays : mapping
        ``name -> array``. A nested mapping becomes a group (``{"trajectory": {"states": x}}``),
        and so does a name with slashes (``{"trajectory/states": x}``). Numeric, boolean and
        string arrays; a dataset whose last name is ``J`` is stored float32.
    attrs : mapping, optional
        The caller's root attributes (any value of :mod:`spinsa.io.schema`'s rules).
    kind : str
        What the file is: ``"run"``, ``"fit"``, ``"evaluation"``, ``"scan-point"``...
    config : dataclass or mapping, optional
        Stored whole as ``config_json`` and flattened as ``config.<key>`` attributes. A
        dataclass config, also one inside the mapping (``{"fit": FitConfig()}``), is stored
        as its fields (``config.fit.lam``...), as :func:`spinsa._config.config_to_dict`
        gives them.
    seeds : mapping, optional
        ``name -> seed``, stored as ``seeds.<name>`` attributes.
    group_attrs : mapping, optional
        ``group path -> attributes`` for groups (created if absent).
    mode : {"x", "w"}
        ``"x"`` (default) refuses to replace an existing file; ``"w"`` replaces it.
    overwrite : bool
        ``True`` is the same as ``mode="w"``.

    Returns
    -------
    Path
        The path written.
    """
    path = Path(path)
    if mode not in ("x", "w"):
        raise ValueError(f"mode must be 'x' (refuse to overwrite) or 'w' (overwrite), got {mode!r}")
    replace = mode == "w" or bool(overwrite)
    root = _root_attrs(kind, attrs, config, seeds)
    entries = _entries(arrays, "arrays")
    _refuse_non_finite_fit(path, entries, attrs or {})
    groups = {
        _clean_name(g, "group_attrs"): _encode_attrs(
            a, f"group_attrs[{g!r}]", reserved=GROUP_PROVENANCE_KEYS, prefixes=()
        )
        for g, a in (group_attrs or {}).items()
    }
    if path.is_dir():
        raise IsADirectoryError(
            f"{path} is a directory; give a file name such as {path / 'run.h5'}"
        )
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: directory {path.parent} does not exist")
    if path.exists() and not replace:
        raise FileExistsError(
            f"{path} already exists; pass overwrite=True (or mode='w') to replace it"
        )
    with atomic_path(path, overwrite=replace) as tmp:
        with h5py.File(tmp, "x", libver=LIBVER) as f:
            f.attrs.update(root)
            _write_entries(f, entries)
            for name, group_attr in groups.items():
                f.require_group(name).attrs.update(group_attr)
    return path


def write_group(
    path: str | os.PathLike,
    group: str,
    arrays: Mapping[str, Any],
    attrs: Mapping[str, Any] | None = None,
    *,
    overwrite: bool = False,
) -> None:
    """Add a group (an analysis, say) to an existing spinsa file, in place.

    Only the group is written, not the whole file, and readers see the whole group or none
    of it wherever the writer is killed (how, and when the file is copied instead: the module
    docstring). Replacing a group does not shrink the file (``h5repack`` reclaims the space).

    Parameters
    ----------
    path : str or PathLike
        A spinsa file.
    group : str
        Path of the group, e.g. ``"analysis/overlaps"``; missing parents are created (and
        become visible with it, not before).
    arrays : mapping
        ``name -> array`` (nested mappings become subgroups), as in :func:`write_file`.
    attrs : mapping, optional
        Attributes of the group; ``created`` and ``spinsa_version`` are added.
    overwrite : bool
        Replace the group if it exists (default: refuse).

    Raises
    ------
    SpinsaFileError
        ``path`` is not a spinsa file this version can write to.
    BlockingIOError
        Another process kept the file open for longer than ``LOCK_WAIT_S`` seconds.
    """
    path = Path(path)
    group = _clean_name(group, "group")
    group_attr = _encode_attrs(attrs, "attrs", reserved=GROUP_PROVENANCE_KEYS, prefixes=())
    group_attr.update(created=now_utc(), spinsa_version=spinsa_version())
    entries = _entries(arrays, "arrays")
    # Checked in a read-only session of its own: reading the root attributes would load the
    # heap block their strings live in, and HDF5 would add the group's strings to that block.
    check_file(path)
    with _locked(path) as fd:
        held = _HeldWrites(fd)
        try:
            with h5py.File(held, "r+", libver=LIBVER) as f:
                link = _link_name(f, path, group, overwrite)
                # Past 8 members HDF5 keeps a group's links in a B-tree and a heap, and a
                # new link rewrites several pages of them: no use trying.
                parent = f[link.rpartition("/")[0] or "/"]
                crowded = link not in f and len(parent) >= MAX_COMPACT_LINKS
                if not crowded:
                    _add_group(f, link, group, group_attr, entries, flushed=held.checkpoint)
        except BaseException:
            os.ftruncate(fd, held.size)  # the old bytes are untouched; drop the new ones
            raise
        if not crowded and held.commit():
            return
        os.ftruncate(fd, held.size)
        # The change spans several pages of the old bytes (a crowded parent, a header that
        # must grow): copy the file, add the group to the copy, rename it onto the file.
        with atomic_path(path) as tmp:
            shutil.copy2(path, tmp)
            with h5py.File(tmp, "r+", libver=LIBVER) as f:
                _add_group(f, link, group, group_attr, entries, flushed=lambda: None)


def _link_name(f: h5py.File, path: Path, group: str, overwrite: bool) -> str:
    """The name to link the new group under: ``group`` itself, or its first missing parent."""
    parts = group.split("/")
    for i in range(1, len(parts) + 1):
        name = "/".join(parts[:i])
        if name not in f:
            return name
        if not isinstance(f[name], h5py.Group):
            raise ValueError(f"{path}: {name!r} is a dataset, not a group")
    if not overwrite:
        raise ValueError(f"{path} already has a group {group!r}; pass overwrite=True to replace it")
    return group


def _add_group(
    f: h5py.File,
    link: str,
    group: str,
    attrs: dict[str, Any],
    entries: list[tuple[str, np.ndarray | None]],
    *,
    flushed: Callable[[], None],
) -> None:
    """Write the group unnamed, then link it (or its first missing parent) as ``link``.

    ``flushed`` runs after each flush: after the unnamed group, then after the link.
    """
    staged = f.create_group(None)  # anonymous: no name reaches it until it is linked
    leaf = staged if link == group else staged.create_group(group[len(link) + 1 :])
    leaf.attrs.update(attrs)
    _write_entries(leaf, entries)
    f.flush()
    flushed()
    old = f.get(link)  # held open: HDF5 frees a replaced group when it is closed, after
    if old is not None:  # the last flush, so that freeing it is no part of the change
        del f[link]
    f[link] = staged
    f.flush()
    flushed()


class _HeldWrites:
    """An open file as h5py's ``fileobj`` driver sees it, with its old bytes held back.

    HDF5 reads and writes the file through this object. Bytes past the end of the file's
    allocated space when it was opened (``size``) go to disk at once: nothing refers to them
    yet. Writes to older bytes are kept in memory (and reads see them), so HDF5 sees its own
    changes while the disk keeps the old file until :meth:`commit`.
    """

    def __init__(self, fd: int):
        self.fd = fd
        self.size = os.fstat(fd).st_size
        _, allocated = _superblock(fd)
        if allocated is not None:  # past it lies only what a killed writer left
            self.size = min(self.size, allocated)
        self.end = self.size
        self.pos = 0
        self.held: list[tuple[int, bytes]] = []
        self.n_commit = 0

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        self.pos = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.end}[whence] + pos
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int) -> bytes:
        start = self.pos
        data = bytearray(os.pread(self.fd, n, start))
        data.extend(bytes(max(0, min(n, self.end - start) - len(data))))
        _overlay(data, start, self.held)
        self.pos += len(data)
        return bytes(data)

    def write(self, b: bytes) -> int:
        start, b = self.pos, bytes(b)
        cut = min(max(self.size - start, 0), len(b))
        if cut:
            self.held.append((start, b[:cut]))
        if cut < len(b):
            os.pwrite(self.fd, b[cut:], start + cut)
        self.pos += len(b)
        self.end = max(self.end, self.pos)
        return len(b)

    def truncate(self, size: int) -> int:
        if size >= self.size:  # never cut old bytes: HDF5 ignores a tail past its end
            os.ftruncate(self.fd, size)
        self.end = max(size, self.size)
        return size

    def flush(self) -> None:
        pass

    def checkpoint(self) -> None:
        """After an HDF5 flush: the new bytes to disk; the changes held so far will commit.

        Old bytes that HDF5 writes after the last checkpoint (it frees a replaced group as
        it closes the file) are left out, except the superblock: that group is unreachable
        by then, and its bytes are only lost space.
        """
        os.fsync(self.fd)
        self.n_commit = len(self.held)

    def commit(self) -> bool:
        """Write the held changes if they fit in one page; False (nothing written) if not.

        A process killed in ``pwrite`` leaves whole pages written, so a change inside one
        page lands whole or not at all. Allowed: one changed page, or the superblock's own
        bytes (its end-of-file address, which alone changes nothing visible), made durable
        first, then one other page.
        """
        sb, _ = _superblock(self.fd)
        late = [(o, c) for o, c in self.held[self.n_commit :] if o == 0 and len(c) == sb]
        writes = self.held[: self.n_commit] + late
        touched = {p for o, c in writes for p in range(o // PAGE, (o + len(c) - 1) // PAGE + 1)}
        spans = []  # (offset, new bytes) of the changed part of each page
        for page in sorted(touched):
            old = os.pread(self.fd, PAGE, page * PAGE)
            new = bytearray(old)
            _overlay(new, page * PAGE, writes)
            diff = np.flatnonzero(np.frombuffer(new, np.uint8) != np.frombuffer(old, np.uint8))
            if diff.size:
                lo, hi = int(diff[0]), int(diff[-1]) + 1
                spans.append((page * PAGE + lo, bytes(new[lo:hi])))
        if len(spans) > 2 or (len(spans) == 2 and spans[0][0] + len(spans[0][1]) > sb):
            return False
        for offset, data in spans:
            os.pwrite(self.fd, data, offset)
            os.fsync(self.fd)
        return True


def _overlay(buf: bytearray, start: int, writes: list[tuple[int, bytes]]) -> None:
    """Apply ``writes`` (offset, bytes), in order, to ``buf``, which holds bytes from ``start``."""
    for offset, chunk in writes:
        lo, hi = max(offset, start), min(offset + len(chunk), start + len(buf))
        if lo < hi:
            buf[lo - start : hi - start] = chunk[lo - offset : hi - offset]


def _superblock(fd: int) -> tuple[int, int | None]:
    """The size of the file's superblock, and the end of the space it allocates.

    Superblocks of version 2 and 3 (HDF5 1.8 and later formats); ``(0, None)`` for others.
    """
    head = os.pread(fd, 12, 0)
    if head[:8] != b"\x89HDF\r\n\x1a\n" or head[8] not in (2, 3):
        return 0, None
    n = head[9]  # bytes of an address; four addresses follow the 12 fixed bytes
    end = os.pread(fd, n, 12 + 2 * n)  # the third: end of the allocated space
    return 12 + 4 * n + 4, int.from_bytes(end, "little")


@contextmanager
def _locked(path: Path) -> Iterator[int]:
    """``path`` opened for writing, under the exclusive lock that HDF5 takes for writers.

    Waits (up to ``LOCK_WAIT_S``) while others have the file open; with
    ``HDF5_USE_FILE_LOCKING=FALSE`` takes no lock, as HDF5 itself (module docstring).
    """
    use_locks = os.environ.get("HDF5_USE_FILE_LOCKING", "").upper() not in ("FALSE", "0")
    deadline = time.monotonic() + LOCK_WAIT_S
    delay = 0.01
    while True:
        fd = os.open(path, os.O_RDWR)
        try:
            if not use_locks or _lock(fd):
                if os.fstat(fd).st_ino == os.stat(path).st_ino:  # not replaced meanwhile
                    break
            elif time.monotonic() > deadline:
                raise BlockingIOError(errno.EWOULDBLOCK, _busy_message(path, "write"))
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        time.sleep(delay)
        delay = min(2 * delay, 0.5)
    try:
        yield fd
    finally:
        os.close(fd)


def _lock(fd: int) -> bool:
    """``flock(fd, LOCK_EX | LOCK_NB)`` as HDF5 locks files; False while others hold it."""
    import fcntl  # POSIX, as the pread/pwrite of _HeldWrites

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # a file system without locks: go on, as HDF5's BEST_EFFORT does
        pass
    return True


def _refuse_non_finite_fit(path: Path, entries, attrs: Mapping[str, Any]) -> None:
    """No file is written with non-finite couplings J or a non-finite ``loss`` attribute: a
    ValueError naming them, before the file is touched."""
    for name, data in entries:
        if data is not None and name.rsplit("/", 1)[-1] == COUPLINGS_NAME:
            if np.issubdtype(data.dtype, np.number) and not np.isfinite(data).all():
                raise ValueError(f"refusing to write {path}: its couplings {name} hold NaN or "
                                 "infinite values")  # fmt: skip
    loss = attrs.get("loss")
    if isinstance(loss, (int, float, np.number)) and not np.isfinite(loss):
        raise ValueError(f"refusing to write {path}: its loss is {loss}")


def _entries(
    arrays: Mapping[str, Any], where: str, prefix: str = ""
) -> list[tuple[str, np.ndarray | None]]:
    """``(path, array)`` for every dataset, ``(path, None)`` for every group, all checked.

    Everything is converted before a file is touched, so a bad array leaves no trace.
    """
    if not isinstance(arrays, Mapping):
        raise TypeError(
            f"{where} must be a mapping of names to arrays, got {type(arrays).__name__}"
        )
    out: list[tuple[str, np.ndarray | None]] = []
    for key, value in arrays.items():
        name = prefix + _clean_name(key, where)
        if isinstance(value, Mapping):
            out.append((name, None))
            out.extend(_entries(value, f"{where}[{key!r}]", name + "/"))
        else:
            out.append((name, _dataset_array(name, value, f"{where}[{key!r}]")))
    return out


def _dataset_array(name: str, value: Any, where: str) -> np.ndarray:
    """The array as it will be stored: J as float32; numeric, boolean or string only."""
    data = np.asarray(value)
    if name.rsplit("/", 1)[-1] == COUPLINGS_NAME:
        if data.dtype.kind not in "iuf":
            raise TypeError(f"{where} holds couplings and must be real, got dtype {data.dtype}")
        data = data.astype(COUPLINGS_DTYPE, copy=False)
    if data.dtype.kind not in "biufcSU":
        raise TypeError(
            f"{where} has dtype {data.dtype}; HDF5 datasets hold numeric, boolean or string arrays"
        )
    return data


def _write_entries(group: h5py.Group, entries: list[tuple[str, np.ndarray | None]]) -> None:
    for name, data in entries:
        if data is None:
            group.require_group(name)
        else:
            _write_dataset(group, name, data)


def _write_dataset(group: h5py.Group, name: str, data: np.ndarray) -> None:
    """One dataset, its bytes under a checksum: chunked with Fletcher-32, big ones compressed.

    Strings are stored as fixed-length UTF-8 (variable-length strings live in HDF5's global
    heap, which no checksum covers). A 0-d array cannot be chunked: it is stored compact, in
    its object header, whose checksum HDF5 verifies on every open. An empty array has no
    bytes to protect.
    """
    if data.dtype.kind == "U":
        utf8 = np.char.encode(data, "utf-8")
        data = utf8.astype(h5py.string_dtype("utf-8", max(utf8.dtype.itemsize, 1)))
    if data.ndim == 0:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        dtype = h5py.h5t.py_create(data.dtype, logical=True)
        space = h5py.h5s.create(h5py.h5s.SCALAR)
        h5py.h5d.create(group.id, name.encode(), dtype, space, dcpl=dcpl).write(
            h5py.h5s.ALL, h5py.h5s.ALL, data
        )
        return
    if data.size == 0:
        group.create_dataset(name, data=data)
        return
    compress = data.nbytes >= COMPRESS_MIN_BYTES
    group.create_dataset(
        name,
        data=data,
        chunks=_chunks(data.shape, data.itemsize),
        fletcher32=True,
        compression="gzip" if compress else None,
        compression_opts=4 if compress else None,
        shuffle=compress,
    )


def _chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...] | bool:
    """Whole trailing axes, as many leading rows as fit in ~1 MiB; h5py's guess if a row won't."""
    row_bytes = itemsize * int(np.prod(shape[1:], dtype=np.int64))
    if row_bytes > CHUNK_TARGET_BYTES:
        return True
    rows = max(1, min(shape[0], CHUNK_TARGET_BYTES // max(row_bytes, 1)))
    return (rows, *shape[1:])


def _root_attrs(kind: str, attrs: Mapping | None, config: Any, seeds: Mapping | None) -> dict:
    out = _encode_attrs(provenance(kind), "provenance", reserved=(), prefixes=())
    if config is not None:
        is_dataclass = dataclasses.is_dataclass(config) and not isinstance(config, type)
        if not (is_dataclass or isinstance(config, Mapping)):
            raise TypeError(
                f"config must be a dataclass instance or a mapping, got {type(config).__name__}"
            )
        cfg = config_to_dict(config if is_dataclass else dict(config))  # nested configs too
        try:
            out["config_json"] = to_json(cfg)
        except (TypeError, ValueError) as err:
            raise TypeError(f"config cannot be stored as JSON: {err}") from None
        if is_dataclass:  # "module.Class"
            out["config_type"] = f"{type(config).__module__}.{type(config).__qualname__}"
        for key, value in flatten(cfg).items():
            out[f"config.{key}"] = encode_attr(value, f"config.{key}")
    for key, value in (seeds or {}).items():
        out[f"seeds.{key}"] = encode_attr(value, f"seeds.{key}")
    out.update(_encode_attrs(attrs, "attrs"))
    return out


def _encode_attrs(
    attrs: Mapping | None, where: str, reserved=RESERVED_KEYS, prefixes=RESERVED_PREFIXES
) -> dict[str, Any]:
    if attrs is None:
        return {}
    if not isinstance(attrs, Mapping):
        raise TypeError(f"{where} must be a mapping, got {type(attrs).__name__}")
    out = {}
    for key, value in attrs.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: attribute names must be non-empty strings, got {key!r}")
        if key in reserved or key.startswith(tuple(prefixes)):
            raise ValueError(
                f"{where}: {key!r} is written by spinsa.io itself (reserved: {', '.join(reserved)}"
                f"{', and names starting with ' + ', '.join(prefixes) if prefixes else ''}); "
                "rename it, or pass config= / seeds="
            )
        out[key] = encode_attr(value, key)
    return out


def _clean_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not name.strip("/"):
        raise ValueError(
            f"{where}: names must be non-empty strings like 'trajectory/states', got {name!r}"
        )
    return name.strip("/")


# --------------------------------------------------------------------------- reading


@dataclasses.dataclass(frozen=True)
class RunFile:
    """What a spinsa file holds, without its arrays (read those with :meth:`array`).

    Attributes
    ----------
    path : Path
    kind : str
        ``"run"``, ``"fit"``, ...
    attrs : dict
        Every root attribute, decoded: provenance, ``config.*``, ``seeds.*`` and the writer's.
    config : dict
        The config as written (from ``config_json``); ``{}`` when the file has none.
    seeds : dict
        ``name -> seed`` from the ``seeds.*`` attributes.
    datasets : dict
        ``"trajectory/states" -> (shape, dtype)`` for every dataset; nothing is loaded.
    groups : tuple of str
        Every group's path, sorted (``"analysis"``, ``"analysis/overlaps"``, ...).
    """

    path: Path
    kind: str
    attrs: dict[str, Any]
    config: dict[str, Any]
    seeds: dict[str, Any]
    datasets: dict[str, tuple[tuple[int, ...], np.dtype]]
    groups: tuple[str, ...]

    def array(self, name: str, sl: Any = None) -> np.ndarray:
        """The dataset ``name`` (or the slice ``sl`` of it); see :func:`read_array`."""
        return read_array(self.path, name, sl)


def read(path: str | os.PathLike) -> RunFile:
    """The attributes, config and table of contents of a spinsa file (no array is loaded).

    Raises :class:`SpinsaFileError` if the path is not a readable spinsa file.
    """
    path = Path(path)
    datasets: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    groups: list[str] = []
    with open_file(path) as f:
        attrs = {key: decode_attr(value) for key, value in f.attrs.items()}

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                is_str = h5py.check_string_dtype(obj.dtype) is not None
                datasets[name] = (obj.shape, np.dtype(str) if is_str else obj.dtype)
            else:
                groups.append(name)

        f.visititems(visit)
    return RunFile(
        path=path,
        kind=attrs.get("kind", ""),
        attrs=attrs,
        config=json.loads(attrs["config_json"]) if "config_json" in attrs else {},
        seeds={k[len("seeds.") :]: v for k, v in attrs.items() if k.startswith("seeds.")},
        datasets=datasets,
        groups=tuple(sorted(groups)),
    )


def read_array(path: str | os.PathLike, name: str, sl: Any = None) -> np.ndarray:
    """One dataset, or a slice of it read from disk without loading the rest.

    Parameters
    ----------
    path : str or PathLike
    name : str
        Dataset path, e.g. ``"trajectory/states"``.
    sl : index, optional
        Anything h5py accepts: ``5``, ``slice(0, 10)``, ``(slice(None), 0)``,
        ``np.s_[::10, :3]``. ``None`` (default) reads everything.

    Returns
    -------
    ndarray
        String datasets come back as ``str`` arrays.
    """
    path = Path(path)
    with open_file(path) as f:
        return _read_dataset(f, path, name.strip("/"), sl)


def read_group(path: str | os.PathLike, group: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays directly in ``group`` (loaded) and the group's attributes (decoded).

    The mirror of :func:`write_group`; subgroups are not descended into.
    """
    return _read_group(Path(path), group, nested=False)


def read_attrs(path: str | os.PathLike, group: str = "/") -> dict[str, Any]:
    """The attributes of ``group`` (decoded), without loading any of its arrays: what
    :func:`read_group` returns second, for a group that holds large datasets (couplings)."""
    group = group.strip("/") or "/"
    with open_file(path) as f:
        if group not in f or not isinstance(f[group], h5py.Group):
            raise KeyError(f"{path} has no group {group!r}; its groups: {_members(f, h5py.Group)}")
        return {k: decode_attr(v) for k, v in f[group].attrs.items()}


def _read_group(path: Path, group: str, nested: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The datasets of ``group`` (and, if ``nested``, of its subgroups, as dicts) and its attrs."""

    def load(g: h5py.Group) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in g:  # g[k], not g.items(): h5py's items() says None for a damaged member
            if isinstance(g[k], h5py.Dataset):
                out[k] = _read_dataset(g, path, k, None)
            elif nested:
                out[k] = load(g[k])
        return out

    group = group.strip("/") or "/"
    with open_file(path) as f:
        if group not in f or not isinstance(f[group], h5py.Group):
            raise KeyError(f"{path} has no group {group!r}; its groups: {_members(f, h5py.Group)}")
        return load(f[group]), {k: decode_attr(v) for k, v in f[group].attrs.items()}


def check_file(path: str | os.PathLike) -> None:
    """Raise :class:`SpinsaFileError` unless ``path`` is a spinsa file this version can read."""
    with open_file(path):
        pass


@contextmanager
def open_file(path: str | os.PathLike) -> Iterator[h5py.File]:
    """The file opened read-only with h5py, after the checks of :func:`check_file`.

    A checksum that fails while the body reads (changed bytes in a dataset or an object
    header) raises :class:`SpinsaFileError` with reason ``"corrupt"``. ::

        with spinsa.io.open_file("run.h5") as f:
            x_T = f["trajectory/states"][-1]
    """
    path = Path(path)
    f = _open_checked(path)
    try:
        yield f
    except (OSError, KeyError, RuntimeError) as err:  # what h5py makes of HDF5's errors
        if _checksum_failed(err):
            raise SpinsaFileError(
                f"{path}: a checksum failed ({err}): bytes of this file changed after spinsa "
                "wrote it (a disk or copy error, or an edit outside spinsa). Copy it again from "
                "a good copy or re-run what produced it.",
                "corrupt",
            ) from err
        raise
    finally:
        f.close()


def verify(path: str | os.PathLike) -> None:
    """Read every object, attribute and dataset of ``path``, checking every checksum.

    Raises :class:`SpinsaFileError` (reason ``"corrupt"``) naming the first object whose
    bytes changed since spinsa wrote them. In files written before spinsa stored checksums
    (datasets without the Fletcher-32 filter) only HDF5's metadata checksums are checked.
    """
    path = Path(path)
    with open_file(path) as f:
        names: list[str] = []
        f.visit(names.append)
        for name in names:
            obj = f[name]
            dict(obj.attrs)
            if isinstance(obj, h5py.Dataset) and (obj.ndim == 0 or obj.size == 0):
                obj[()]
            elif isinstance(obj, h5py.Dataset):  # a few chunks at a time
                step = obj.chunks[0] if obj.chunks else obj.shape[0]
                for start in range(0, obj.shape[0], step):
                    obj[start : start + step]


def _checksum_failed(err: Exception) -> bool:
    # HDF5 says so in the message only: "filter returned failure during read" (Fletcher-32
    # of a data chunk), "incorrect metadata checksum" (an object header or heap).
    text = str(err)
    return "checksum" in text or "filter returned failure" in text


def _open_checked(path: Path) -> h5py.File:
    if not path.exists():
        leftovers = sorted(path.parent.glob(f".{path.name}.tmp-*")) if path.parent.is_dir() else []
        hint = (
            f" A temporary file {leftovers[0].name} is there: the write that was making it "
            "did not finish (it crashed or is still running)."
            if leftovers
            else f" Check the path (relative paths start from {Path.cwd()})."
        )
        raise SpinsaFileError(f"{path}: no such file.{hint}", "missing")
    if path.is_dir():
        raise SpinsaFileError(f"{path} is a directory, not an HDF5 file", "not-hdf5")
    with open(path, "rb"):  # a PermissionError is what it says; do not call it corruption
        pass
    if not h5py.is_hdf5(path):
        raise SpinsaFileError(
            f"{path} is not an HDF5 file ({path.stat().st_size} bytes, no HDF5 signature). "
            "spinsa reads the .h5 files it wrote with spinsa.io; was this one saved as text, "
            "npz or pickle, or is it an HTML error page from a download?",
            "not-hdf5",
        )
    try:
        f = _open_waiting(path)
    except BlockingIOError:
        raise
    except OSError as err:
        raise SpinsaFileError(_corrupt_message(path, err), "corrupt") from err
    try:
        check_schema(f.attrs.get("schema"), path)
    except Exception as err:
        f.close()
        if isinstance(err, SpinsaFileError):
            raise
        raise SpinsaFileError(_corrupt_message(path, err), "corrupt") from err
    return f


def _open_waiting(path: Path) -> h5py.File:
    """``h5py.File(path, "r")``, waiting (up to ``LOCK_WAIT_S``) while a writer has it open."""
    deadline = time.monotonic() + LOCK_WAIT_S
    delay = 0.01
    while True:
        try:
            return h5py.File(path, "r")
        except BlockingIOError as err:
            if time.monotonic() > deadline:
                raise BlockingIOError(err.errno, _busy_message(path, "read")) from err
            time.sleep(delay)
            delay = min(2 * delay, 0.5)


def _busy_message(path: Path, what: str) -> str:
    return (
        f"{path} is open elsewhere (a running spinsa command, an h5py.File in a notebook or "
        f"still open in this process): HDF5's file lock kept this {what} waiting "
        f"{LOCK_WAIT_S:g} s. Close it there, or let the command finish, and try again."
    )


def _corrupt_message(path: Path, err: Exception) -> str:
    return (
        f"{path} has an HDF5 signature but cannot be read ({err}): it is truncated or "
        "corrupt, e.g. an interrupted copy. Copy it again or re-run what produced it."
    )


def _read_dataset(group: h5py.Group, path: Path, name: str, sl: Any) -> np.ndarray:
    """The dataset ``name`` of ``group`` (or the slice ``sl``); strings as ``str`` arrays."""
    if name not in group or not isinstance(group[name], h5py.Dataset):
        names = _members(group.file, h5py.Dataset)
        raise KeyError(f"{path} has no dataset {name!r}; its datasets: {names}")
    obj = group[name]
    try:
        if h5py.check_string_dtype(obj.dtype) is not None:
            return np.asarray(obj.asstr()[() if sl is None else sl], dtype=str)
        return obj[() if sl is None else sl]
    except OSError as err:
        if _checksum_failed(err):
            raise
        raise SpinsaFileError(_corrupt_message(path, err), "corrupt") from err


def _members(f: h5py.File, kind: type) -> list[str]:
    """The path of every member of ``f`` of this kind (``h5py.Group`` or ``h5py.Dataset``)."""
    names: list[str] = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, kind) else None)
    return names


# --------------------------------------------------------------------------- trajectories


def save_trajectory(
    path: str | os.PathLike,
    traj: Any,
    *,
    J: np.ndarray | None = None,
    extra_attrs: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Save a :class:`spinsa.model.Trajectory` (and its couplings) as a ``kind="run"`` file.

    Layout: every array field of the trajectory under ``trajectory/`` (``states``
    (n_records, P, N, d), ``times`` (n_records,), ``energies`` (steps + 1, P)), its other
    fields as attributes of that group, its ``DynamicsConfig`` as the file's config, its seed
    as ``seeds.dynamics``, and ``J`` (N, N, d, d) stored float32 at ``/J``.
    """
    from spinsa._checks import check_couplings
    from spinsa.model import Trajectory

    if not isinstance(traj, Trajectory):
        raise TypeError(f"traj must be a spinsa.model.Trajectory, got {type(traj).__name__}")
    arrays: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(traj):
        if field.name == "config" or not field.init:
            continue
        value = getattr(traj, field.name)
        if isinstance(value, np.ndarray):
            arrays[f"trajectory/{field.name}"] = value
        else:
            fields[field.name] = value
    if J is not None:
        _, _, n_tokens, d = np.shape(traj.states)
        arrays["J"] = check_couplings(J, n_tokens, d)
    seed = getattr(traj.config, "seed", None)
    return write_file(
        path,
        arrays,
        extra_attrs,
        kind="run",
        config=traj.config,
        seeds={"dynamics": seed},
        group_attrs={"trajectory": fields},
        overwrite=overwrite,
    )


def load_trajectory(path: str | os.PathLike) -> Any:
    """The :class:`spinsa.model.Trajectory` saved by :func:`save_trajectory` (arrays loaded).

    The couplings, if saved, are ``read_array(path, "J")``.
    """
    from spinsa.model import DynamicsConfig, Trajectory

    info = read(path)
    if "trajectory" not in info.groups:
        raise ValueError(
            f"{path} holds no trajectory (kind {info.kind!r}); its groups: {list(info.groups)}"
        )
    config = info.config
    arrays, fields = read_group(path, "trajectory")
    fields = {k: v for k, v in fields.items() if k not in GROUP_PROVENANCE_KEYS}
    known = {f.name for f in dataclasses.fields(DynamicsConfig) if f.init}
    unknown = sorted(set(config) - known)
    if unknown:
        warnings.warn(
            f"{path}: ignoring config keys that DynamicsConfig does not have: {unknown}",
            stacklevel=2,
        )
    kwargs = {**fields, **arrays}
    init = {f.name for f in dataclasses.fields(Trajectory) if f.init}
    return Trajectory(
        config=DynamicsConfig(**{k: v for k, v in config.items() if k in known}),
        **{k: v for k, v in kwargs.items() if k in init},
    )
