"""Arrays whose data start on a cache line, for the kernels' vector loads.

numpy starts a large array 16 bytes past a 64-byte boundary (glibc's malloc) and numba's
``np.empty`` aligns to 32 bytes, so with 512-bit vectors every load of a tile's row, and
half of them with 256-bit vectors, spans two cache lines. With the tiles on a cache line
the dynamics' sweep ran 1.20-1.24x faster on two cores of an Intel Xeon (Emerald Rapids,
512-bit code; 1.06x with 256-bit code; git history of docs/benchmarks.md). The rows of a tile stay
aligned because a tile's width is a multiple of 16 lanes (64 bytes of float32). The
stack frames of the written-out blocks are aligned apart, by
:func:`spinsa.kernels._numba.align_stack` (this module imports from that one).
"""

from __future__ import annotations

import math

import numpy as np

from spinsa.kernels._numba import njit

ALIGN = 64  # bytes: a cache line, and one 512-bit vector


def aligned_empty(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose data start on a multiple of ``ALIGN`` bytes."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + nbytes].view(dtype).reshape(shape)


@njit(inline="always")
def aligned_work(n, like):
    """Inside numba: an uninitialised 1-D array of ``n`` elements of ``like``'s dtype whose
    data start on a multiple of ``ALIGN`` bytes (reshape it for more dimensions)."""
    raw = np.empty(n + ALIGN // like.itemsize, like.dtype)
    start = (-raw.ctypes.data % ALIGN) // like.itemsize
    return raw[start : start + n]
