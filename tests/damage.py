"""Damage done to files and processes as disks, copies and kill -9 do it, for the tests of
integrity and resumption."""

import signal
import time

import h5py
import numpy as np


def flip_byte(path, name):
    """Flip one bit in the middle of the stored bytes of dataset ``name`` of an HDF5 file,
    as a disk or a copy might: a byte of its first chunk, or of its object header when
    the dataset is compact (a 0-d array)."""
    with h5py.File(path, "r") as f:
        ds = f[name]
        if ds.chunks:
            chunk = ds.id.get_chunk_info(0)
            offset, size = chunk.byte_offset, chunk.size
        else:
            offset = ds.id.get_offset()
            value = ds[()]
            size = ds.id.get_storage_size()
    raw = bytearray(path.read_bytes())
    if offset is None:  # compact: the value lies in the object header
        needle = value if isinstance(value, bytes) else np.asarray(value).tobytes()
        assert raw.count(needle) == 1, f"the bytes of {name} are not unique in {path}"
        offset, size = raw.index(needle), len(needle)
    raw[offset + size // 2] ^= 0x10
    path.write_bytes(bytes(raw))


def kill_when(proc, ready, timeout=120.0):
    """SIGKILL ``proc`` as soon as ``ready()`` is true (True if it was still running then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if ready():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    return False
