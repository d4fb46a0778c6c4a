"""Fused kernels for the attention fields, site energies and updates (docs/model.md).

Layout. Inside the kernels the spins live in *tiles* ``Xt[t, j, b, p]`` of shape
``(n_tiles, N, d, TILE)``: each SIMD lane is one sample ``p`` of a tile, so every inner loop
runs over contiguous samples and vectorises. :func:`to_tiles` / :func:`from_tiles` convert
(once per call, or once per run); padded lanes hold the zero spin, which is harmless.

Per (tile, row i) the kernel streams the row ``J[i]`` past the tile, computes
``y = J_ij x_j`` once and uses it both for the score ``s_ij = x_i . y`` and for the field
``sum_j alpha_ij y``. Nothing of size P x N x N is ever stored.

Two paths compute a row. The fast one (full tiles and d <= 8) shifts the softmax of each
sample by a bound known in advance, b = |x_i| max_j ||J_ij||_2 |x_j| >= s_ij (or the looser
|x_i| max_j ||J_ij||_2 max_j |x_j| where that already fits; :func:`_fixed_shift`), and runs
the pair kernel written out for d in :mod:`spinsa.kernels._unrolled`; it applies while the
scaled scores' largest possible spread, lam (min(b, clamp) - min(-b, clamp)), stays below
``SAFE_SPREAD`` in every sample of the tile. Otherwise the
generic row uses an online (streaming-max) softmax, so that any lam, any spin norm and
masked (zero) spins stay finite. Both give the same result to rounding.
"""

from __future__ import annotations

import functools
import threading

import numpy as np
from numba import types
from numba.extending import overload

from spinsa.kernels._aligned import aligned_empty, aligned_work
from spinsa.kernels._math import fast_exp
from spinsa.kernels._numba import njit, prange, vector_registers, written_for_d
from spinsa.kernels._unrolled import (
    MAX_UNROLLED_D,
    energy_block_source,
    pair_block_source,
    pairs_for_registers,
)

TILE = 128  # most samples per tile: a tile (N d TILE floats) stays in L2 while J streams past
# Pairs (i, j) per call of the written-out block, from the registers of the target numba
# compiles for (a constant of the compiled code, which numba's cache keys on that target).
PAIRS = pairs_for_registers(vector_registers())
assert PAIRS in (2, 4), "_row_pairs builds tuples of 2 or 4 offsets"
NORM_CODES = {"none": 0, "sphere": 1, "layernorm": 2}
LAYERNORM_EPS = 1e-5  # as torch.nn.LayerNorm
# Largest lam * (max - min) of the scores that the fixed-shift softmax takes: the smallest
# weight exp(-SAFE_SPREAD) ~ 2e-35 is still a normal float32.
SAFE_SPREAD = 80.0

_U = np.uint64  # unsigned indices: no negative-index wraparound, so no gathers


def tile_width(n_samples: int) -> int:
    """Lanes per tile: TILE (the fast path) above TILE / 2 samples, else the next multiple of 16."""
    if n_samples > TILE // 2:
        return TILE
    return int(16 * max(1, -(-n_samples // 16)))  # no samples: zero tiles of 16 lanes


def block_bounds(J: np.ndarray) -> np.ndarray:
    """Upper bounds on the spectral norms ||J_ij||_2, shape (N, N), zero diagonal.

    |x_i . J_ij x_j| <= ||J_ij||_2 |x_i| |x_j| bounds the scores of the fast path. The bound
    is tr((A^T A)^4)^(1/8) for A = J_ij / ||J_ij||_F, times ||J_ij||_F: at most d^(1/8)
    (1.3 at d = 8) above the spectral norm, about 3 % on random blocks, where the
    Frobenius norm is about 60 % above.
    """
    return _block_bounds(J, np.empty(J.shape[:2], J.dtype))


@njit(parallel=True)
def _block_bounds(J, out):
    """Row by row, with the N blocks of a row in the SIMD lanes (j innermost, float64).

    With B = A^T A and C = B^2 (both symmetric), tr(B^4) = sum_bc C_bc^2: the upper
    triangles of B and C, about d^3 products per block where squaring twice takes 3 d^3.
    """
    N, d = J.shape[0], J.shape[2]
    for i in prange(N):
        T = np.empty((d, d, N))  # T[a, b, j] = J[i, j, a, b]: the row's blocks, j contiguous
        B = np.empty((d, d, N))
        f2 = np.zeros(N)
        tr = np.zeros(N)
        acc = np.empty(N)
        for j in range(N):
            for a in range(d):
                for b in range(d):
                    T[a, b, j] = J[i, j, a, b]
        for a in range(d):
            for b in range(d):
                for j in range(N):
                    f2[j] += T[a, b, j] * T[a, b, j]
        for j in range(N):  # a zero block (and the diagonal) gets 0, not 0 / 0
            f2[j] = 1.0 / f2[j] if f2[j] > 0.0 and j != i else 0.0
        for b in range(d):  # B = J^T J / |J|_F^2
            for c in range(b, d):
                for j in range(N):
                    acc[j] = 0.0
                for a in range(d):
                    for j in range(N):
                        acc[j] += T[a, b, j] * T[a, c, j]
                for j in range(N):
                    B[b, c, j] = acc[j] * f2[j]
                    B[c, b, j] = acc[j] * f2[j]
        for b in range(d):  # tr(B^4) = sum over b, c of (B^2)_bc^2
            for c in range(b, d):
                for j in range(N):
                    acc[j] = 0.0
                for e in range(d):
                    for j in range(N):
                        acc[j] += B[b, e, j] * B[e, c, j]
                twice = 1.0 if c == b else 2.0
                for j in range(N):
                    tr[j] += twice * acc[j] * acc[j]
        for j in range(N):
            out[i, j] = np.sqrt(1.0 / f2[j]) * tr[j] ** 0.125 if f2[j] > 0.0 else 0.0
    return out


# Block bounds of the last few couplings, keyed by content: a run over many batches, or a
# loop of steps, with one J pays for its bounds once.
_BOUNDS_CACHE: dict = {}
_BOUNDS_LOCK = threading.Lock()
BOUNDS_CACHE_SIZE = 4
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def fingerprint(a: np.ndarray) -> int:
    """A 64-bit hash of the bytes of a C-contiguous float32 or float64 array.

    Every element is mixed with its position (splitmix64) and the results summed, so any
    change of any element, a swap included, changes the hash (up to a 2^-64 chance); one
    vectorised pass, a tenth of :func:`block_bounds` (0.6 ms against 6 ms at N = 196, d = 8).
    """
    return int(_fingerprint(a.reshape(-1).view(f"u{a.itemsize}")))


@njit(parallel=True)
def _fingerprint(words):
    h = np.uint64(0)
    for k in prange(words.size):
        z = np.uint64(words[k]) ^ (np.uint64(k) * _GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        h += z ^ (z >> np.uint64(31))
    return h


def cached_block_bounds(J: np.ndarray) -> np.ndarray:
    """:func:`block_bounds` of C-contiguous ``J``, read-only, from a small cache keyed on
    J's content (:func:`fingerprint`): a J changed in place gets fresh bounds."""
    key = (J.shape, J.dtype.str, fingerprint(J))
    with _BOUNDS_LOCK:  # runs in threads (a scan's workers) share the cache
        bounds = _BOUNDS_CACHE.pop(key, None)
    if bounds is None:
        bounds = block_bounds(J)
        bounds.flags.writeable = False
    with _BOUNDS_LOCK:
        _BOUNDS_CACHE[key] = bounds  # the most recent last
        while len(_BOUNDS_CACHE) > BOUNDS_CACHE_SIZE:
            del _BOUNDS_CACHE[next(iter(_BOUNDS_CACHE))]
    return bounds


def sweep_bounds(Xt: np.ndarray, J: np.ndarray) -> np.ndarray:
    """The ``Jb`` argument of :func:`sweep` for tiles like ``Xt``: the cached block bounds
    where the fast path applies (:func:`unroll_tag`), else zeros that it never reads."""
    if unroll_tag(Xt):
        return cached_block_bounds(J)
    return np.zeros(J.shape[:2], J.dtype)


def unroll_tag(Xt: np.ndarray) -> tuple:
    """d zeros where the fast path applies to these tiles (full, d <= 8), else ().

    The kernels take d as the *length of a tuple*, a part of its numba type, so that numba
    compiles (and caches) one kernel per d, with d a constant inside, and dispatches to it
    as fast as for any other argument type.
    """
    d, width = Xt.shape[2], Xt.shape[3]
    return (0,) * d if d <= MAX_UNROLLED_D and width == TILE else ()


def to_tiles(x: np.ndarray, width: int | None = None) -> np.ndarray:
    """(P, N, d) -> (n_tiles, N, d, width), zero-padded, on a cache line
    (:mod:`spinsa.kernels._aligned`); width = tile_width(P) by default."""
    P, N, d = x.shape
    width = tile_width(P) if width is None else width
    n_tiles = -(-P // width)
    Xt = aligned_empty((n_tiles, N, d, width), x.dtype)
    full = P // width
    Xt[:full] = x[: full * width].reshape(full, width, N, d).transpose(0, 2, 3, 1)
    rest = P - full * width
    if rest:
        Xt[full, :, :, :rest] = x[full * width :].transpose(1, 2, 0)
        Xt[full, :, :, rest:] = 0
    return Xt


def tiles_like(Xt: np.ndarray) -> np.ndarray:
    """An uninitialised array of the shape and dtype of ``Xt``, on a cache line."""
    return aligned_empty(Xt.shape, Xt.dtype)


def from_tiles(Xt: np.ndarray, n_samples: int, out: np.ndarray | None = None) -> np.ndarray:
    """(n_tiles, N, d, TILE) -> (P, N, d), a C-contiguous copy (into ``out`` when given).

    Copied tile by tile, without an intermediate array: a fresh array per state made
    recording every step of a run cost about a fifth of its time (page faults).
    """
    n_tiles, N, d, width = Xt.shape
    if out is None:
        out = np.empty((n_samples, N, d), dtype=Xt.dtype)
    full = n_samples // width
    out[: full * width].reshape(full, width, N, d)[...] = Xt[:full].transpose(0, 3, 1, 2)
    rest = n_samples - full * width
    if rest:
        out[full * width :] = Xt[full, :, :, :rest].transpose(2, 0, 1)
    return out


def energies_from_tiles(Et: np.ndarray, n_samples: int) -> np.ndarray:
    """(n_tiles, N, TILE) -> (P, N)."""
    n_tiles, N, width = Et.shape
    return np.ascontiguousarray(Et.transpose(0, 2, 1).reshape(n_tiles * width, N)[:n_samples])


@njit
def couple(Jij, xj, y):
    """y[a, p] = sum_b Jij[a, b] xj[b, p] for one tile: (d, d) x (d, TILE) -> (d, TILE).

    The sum over b is written out eight terms at a time with the couplings held in
    scalars, so each lane's partial sum stays in a register (about 2x a plain loop that
    reads and writes y for every b).
    """
    d = _U(Jij.shape[0])
    L = _U(y.shape[1])
    d8 = d - d % _U(8)
    for a in range(d):
        for p in range(L):
            y[a, p] = 0
        for b in range(_U(0), d8, _U(8)):
            j0 = Jij[a, b]
            j1 = Jij[a, b + _U(1)]
            j2 = Jij[a, b + _U(2)]
            j3 = Jij[a, b + _U(3)]
            j4 = Jij[a, b + _U(4)]
            j5 = Jij[a, b + _U(5)]
            j6 = Jij[a, b + _U(6)]
            j7 = Jij[a, b + _U(7)]
            for p in range(L):
                y[a, p] += (
                    (j0 * xj[b, p] + j1 * xj[b + _U(1), p])
                    + (j2 * xj[b + _U(2), p] + j3 * xj[b + _U(3), p])
                ) + (
                    (j4 * xj[b + _U(4), p] + j5 * xj[b + _U(5), p])
                    + (j6 * xj[b + _U(6), p] + j7 * xj[b + _U(7), p])
                )
        for b in range(d8, d):
            jab = Jij[a, b]
            for p in range(L):
                y[a, p] += jab * xj[b, p]


@njit
def dot_lanes(xi, y, s):
    """s[p] = sum_a xi[a, p] y[a, p]: (d, TILE) . (d, TILE) -> (TILE,)."""
    L = _U(s.shape[0])
    for p in range(L):
        s[p] = 0
    for a in range(_U(xi.shape[0])):
        for p in range(L):
            s[p] += xi[a, p] * y[a, p]


def _pair_block(Xf, Jf, jo, oi, oj, lam, clamp, shift, acc, z, scratch, unroll):
    """The pairs (i, j_g) of one row i on a full tile, g < len(jo), written out for
    d = len(unroll) (numba only)."""
    raise NotImplementedError("_pair_block runs inside numba kernels only")


@overload(_pair_block)
def _pair_block_numba(Xf, Jf, jo, oi, oj, lam, clamp, shift, acc, z, scratch, unroll):
    noop = lambda Xf, Jf, jo, oi, oj, lam, clamp, shift, acc, z, scratch, unroll: None  # noqa: E731
    return _written_for_pairs(pair_block_source, "pair_block", jo, unroll, noop)


def _energy_block(Xf, Jf, jo, oi, oj, lam, clamp, shift, z, scratch, unroll):
    """The pairs' part of the normaliser alone, written out for d = len(unroll) (numba only)."""
    raise NotImplementedError("_energy_block runs inside numba kernels only")


@overload(_energy_block)
def _energy_block_numba(Xf, Jf, jo, oi, oj, lam, clamp, shift, z, scratch, unroll):
    noop = lambda Xf, Jf, jo, oi, oj, lam, clamp, shift, z, scratch, unroll: None  # noqa: E731
    return _written_for_pairs(energy_block_source, "energy_block", jo, unroll, noop)


def _written_for_pairs(make_source, name, jo, unroll, noop):
    """:func:`written_for_d` for a block over len(jo) pairs (a tuple of offsets), its
    stack frame on a cache line like every written-out block's."""
    if not isinstance(jo, types.BaseTuple):
        return None
    source = functools.partial(make_source, pairs=len(jo))
    return written_for_d(source, name, unroll, noop, W=_U(TILE), _U=_U, fast_exp=fast_exp)


@njit(inline="always")
def _pair_offsets(t, i, k, N, d):
    """(offset of J_ij in J, offset of x_j in the tiles) for the k-th site j != i."""
    j = k + _U(1) if k >= i else k
    return (i * N + j) * d * d, (t * N + j) * d * _U(TILE)


@njit(inline="always")
def _row_pairs(t, i, k, N, d):
    """The offsets of :func:`_pair_offsets` for the PAIRS sites k, ..., k + PAIRS - 1 (as
    two tuples, so that the pair block is compiled for that many pairs)."""
    jo0, oj0 = _pair_offsets(t, i, k, N, d)
    jo1, oj1 = _pair_offsets(t, i, k + _U(1), N, d)
    if PAIRS == 2:  # a constant: numba compiles one branch
        return (jo0, jo1), (oj0, oj1)
    jo2, oj2 = _pair_offsets(t, i, k + _U(2), N, d)
    jo3, oj3 = _pair_offsets(t, i, k + _U(3), N, d)
    return (jo0, jo1, jo2, jo3), (oj0, oj1, oj2, oj3)


@njit
def lane_max(A, c, skip, out, spare):
    """out[p] = max(out[p], max over rows j != skip of c[j] A[j, p]); A (N, W), c (N,).

    The running maximum passes between ``out`` and ``spare`` (at least W floats): updated
    in place, LLVM stores only the lanes that grow, with masked stores (``vmaskmovps``),
    slow on AMD's cores with 256-bit code (measured: git history of docs/benchmarks.md).
    """
    N = _U(A.shape[0])
    W = _U(A.shape[1])
    src, dst = out, spare
    in_spare = False
    for j in range(N):
        if j == skip:
            continue
        cj = c[j]
        for p in range(W):
            v = cj * A[j, p]
            top = src[p]
            dst[p] = v if v > top else top
        src, dst = dst, src
        in_spare = not in_spare
    if in_spare:
        for p in range(W):
            out[p] = spare[p]


@njit
def _fixed_shift(Jb, Jmax, nx, nmax, lam, clamp, i, shift, z, scratch):
    """The fixed softmax shift of row i, lane by lane, into ``shift`` (TILE,); False where
    it does not apply in some lane (``z``, ``scratch``: work space of TILE floats at least).

    ``Jb`` (N, N) are the :func:`block_bounds` of J, ``Jmax`` (N,) their maxima over j,
    ``nx`` (N, TILE) the spins' norms in the tile and ``nmax`` (TILE,) their maxima over the
    sites. Lane p's scores lie in [-b, b] with b = |x_i| max_j Jb_ij |x_j|; clamped, in
    [min(-b, clamp), min(b, clamp)]. The shift applies where that range, times lam, is at
    most ``SAFE_SPREAD`` wide in every lane. The bound max_j Jb_ij max_j |x_j| is tried
    first: equal to the row's own for spins of one norm (on the sphere; nearly so after a
    layer norm), and it needs no pass over the row; where it is too wide, the row's own
    maximum is taken.
    """
    W = _U(TILE)
    dt = nx.dtype.type
    for p in range(W):
        z[p] = Jmax[i] * nmax[p]
    if _shift_within_spread(nx[i], z, lam, clamp, shift):
        return True
    for p in range(W):
        z[p] = dt(0)
    lane_max(nx, Jb[i], i, z, scratch)  # z[p] = max_j Jb_ij |x_j| of lane p
    return _shift_within_spread(nx[i], z, lam, clamp, shift)


@njit(inline="always")
def _shift_within_spread(nxi, z, lam, clamp, shift):
    """shift = lam min(b, clamp) for the bounds b = nxi z (TILE,); whether every lane's
    range lam (min(b, clamp) - min(-b, clamp)) is at most ``SAFE_SPREAD``."""
    dt = nxi.dtype.type
    spread = dt(0)
    for p in range(_U(TILE)):
        b = nxi[p] * z[p]
        shift[p] = lam * min(b, clamp)
        spread = max(spread, shift[p] - lam * min(-b, clamp))
    return spread <= dt(SAFE_SPREAD)


@njit
def _row_bounded(Xt, J, Jb, Jmax, nx, nmax, lam, clamp, t, i, acc, z, shift, scratch, unroll):
    """Unnormalised field acc (d * TILE,), normaliser z and shift of row i, tile t, with the
    fixed shift (:func:`_fixed_shift`); False, having done nothing else, where it does not
    apply. ``scratch`` (PAIRS (d + 1) TILE,) is the pair loop's.
    """
    if not _fixed_shift(Jb, Jmax, nx, nmax, lam, clamp, i, shift, z, scratch):
        return False
    N = _U(Xt.shape[1])
    d = _U(Xt.shape[2])
    W = _U(TILE)
    dt = Xt.dtype.type
    for p in range(W):
        z[p] = dt(0)
    for q in range(d * W):
        acc[q] = dt(0)
    Xf = Xt.reshape(-1)
    Jf = J.reshape(-1)
    oi = (t * N + i) * d * W
    n = N - _U(1)  # the sites j != i, PAIRS at a time, then one by one
    for k in range(_U(0), n - n % _U(PAIRS), _U(PAIRS)):
        jo, oj = _row_pairs(t, i, k, N, d)
        _pair_block(Xf, Jf, jo, oi, oj, lam, clamp, shift, acc, z, scratch, unroll)
    for k in range(n - n % _U(PAIRS), n):
        jo, oj = _pair_offsets(t, i, k, N, d)
        _pair_block(Xf, Jf, (jo,), oi, (oj,), lam, clamp, shift, acc, z, scratch, unroll)
    return True


@njit
def _row_energies(Xt, J, Jb, Jmax, nx, nmax, lam, clamp, t, i, z, shift, scratch, unroll):
    """:func:`_row_bounded` without the field: the normaliser z and the shift alone.

    A function of its own, not a branch of :func:`_row_bounded`: as a branch it made the
    full sweep about 10 % slower with 256-bit code (git history of docs/benchmarks.md)."""
    if not _fixed_shift(Jb, Jmax, nx, nmax, lam, clamp, i, shift, z, scratch):
        return False
    N = _U(Xt.shape[1])
    d = _U(Xt.shape[2])
    W = _U(TILE)
    dt = Xt.dtype.type
    for p in range(W):
        z[p] = dt(0)
    Xf = Xt.reshape(-1)
    Jf = J.reshape(-1)
    oi = (t * N + i) * d * W
    n = N - _U(1)
    for k in range(_U(0), n - n % _U(PAIRS), _U(PAIRS)):
        jo, oj = _row_pairs(t, i, k, N, d)
        _energy_block(Xf, Jf, jo, oi, oj, lam, clamp, shift, z, scratch, unroll)
    for k in range(n - n % _U(PAIRS), n):
        jo, oj = _pair_offsets(t, i, k, N, d)
        _energy_block(Xf, Jf, (jo,), oi, (oj,), lam, clamp, shift, z, scratch, unroll)
    return True


@njit
def _row(Xt, J, lam, clamp, t, i, acc, y, m, z, s, c, w):
    """Unnormalised field acc (d, TILE), running max m and normaliser z of row i, tile t.

    Scores are clamped from above at ``clamp`` before ``lam`` (inf: no clamp).
    """
    N = _U(Xt.shape[1])
    d = _U(Xt.shape[2])
    L = _U(Xt.shape[3])
    dt = Xt.dtype.type
    for p in range(L):
        m[p] = dt(-1e30)  # finite: exp(m - m_new) must not be exp(-inf + inf)
        z[p] = dt(0)
    for a in range(d):
        for p in range(L):
            acc[a, p] = dt(0)
    for j in range(N):
        if j == i:
            continue
        couple(J[i, j], Xt[t, j], y)
        dot_lanes(Xt[t, i], y, s)
        for p in range(L):  # online softmax: rescale what is summed so far
            ls = lam * min(s[p], clamp)
            m_new = max(m[p], ls)
            c[p] = fast_exp(m[p] - m_new)
            w[p] = fast_exp(ls - m_new)
            z[p] = z[p] * c[p] + w[p]
            m[p] = m_new
        for a in range(d):
            for p in range(L):
                acc[a, p] = acc[a, p] * c[p] + w[p] * y[a, p]


@njit
def _update_spin(h, x_old, gamma, norm, out_row, eps):
    """out_row (d, TILE) = Norm(h + gamma x_old) for the chosen norm (0 none, 1 sphere, 2 LN)."""
    d = _U(h.shape[0])
    L = _U(h.shape[1])
    dt = h.dtype.type
    for a in range(d):
        for p in range(L):
            out_row[a, p] = h[a, p] + gamma * x_old[a, p]
    if norm == 1:
        for p in range(L):
            n2 = dt(0)
            for a in range(d):
                n2 += out_row[a, p] * out_row[a, p]
            inv = dt(1) / np.sqrt(n2) if n2 > 0 else dt(0)  # a zero spin stays zero
            for a in range(d):
                out_row[a, p] *= inv
    elif norm == 2:
        for p in range(L):
            mu = dt(0)
            for a in range(d):
                mu += out_row[a, p]
            mu /= dt(d)
            var = dt(0)
            for a in range(d):
                var += (out_row[a, p] - mu) * (out_row[a, p] - mu)
            inv = dt(1) / np.sqrt(var / dt(d) + eps)
            for a in range(d):
                out_row[a, p] = (out_row[a, p] - mu) * inv


def sweep(Xt, J, lam, clamp, gamma, norm, write_update, out, energies, Jb=None):
    """All rows of all tiles at once (synchronous).

    ``out`` gets the fields h (``write_update`` False) or the updated spins
    Norm(h + gamma x) (True); ``energies`` (n_tiles, N, TILE) gets e_i of the input state.
    ``out=None``: the energies alone, without the fields (about a quarter less work on the
    fast path). ``Jb``: the :func:`block_bounds` of J (:func:`sweep_bounds`, if not given).
    """
    unroll = unroll_tag(Xt)
    if Jb is None:
        Jb = sweep_bounds(Xt, J)
    fields = out is not None
    if out is None:
        out = np.empty((0, 0, 0, 0), Xt.dtype)  # never written: one compiled kernel for both
    _sweep(Xt, J, Jb, lam, clamp, gamma, norm, write_update, fields, out, energies, unroll)


@njit(parallel=True)
def _sweep(Xt, J, Jb, lam, clamp, gamma, norm, write_update, fields, out, energies, unroll):
    """:func:`sweep`, with the fast path for d = len(unroll) > 0 (:func:`unroll_tag`);
    ``fields`` False: the energies alone, ``out`` untouched."""
    n_tiles, N, d, width = Xt.shape
    L = _U(width)
    dt = Xt.dtype.type
    lam = dt(lam)
    clamp = dt(clamp)
    gamma = dt(gamma)
    eps = dt(LAYERNORM_EPS)
    nx = np.zeros((n_tiles, N, width), Xt.dtype)  # |x| and its maximum over the sites,
    nmax = np.zeros((n_tiles, width), Xt.dtype)  # for the bounds of the fast path
    Jmax = np.zeros(N, Jb.dtype)
    if len(unroll) > 0:
        for t in prange(n_tiles):
            for i in range(N):
                for a in range(d):
                    for p in range(L):
                        nx[t, i, p] += Xt[t, i, a, p] * Xt[t, i, a, p]
                for p in range(L):
                    nx[t, i, p] = np.sqrt(nx[t, i, p])
                    nmax[t, p] = max(nmax[t, p], nx[t, i, p])
        for i in range(N):  # a loop: Jb[i].max() would be a parallel reduction per row
            for j in range(N):
                Jmax[i] = max(Jmax[i], Jb[i, j])
    for k in prange(n_tiles * N):  # contiguous chunks per thread keep each tile on one core
        t = _U(k // N)
        i = _U(k % N)
        acc = aligned_work(d * width, Xt).reshape((d, width))
        z = aligned_work(width, Xt)
        m = aligned_work(width, Xt)  # the shift: fixed (fast path) or the running max
        bounded = False
        if len(unroll) > 0:
            scratch = aligned_work(PAIRS * (d + 1) * width, Xt)
            if fields:
                bounded = _row_bounded(
                    Xt, J, Jb, Jmax, nx[t], nmax[t], lam, clamp, t, i, acc.reshape(-1), z, m,
                    scratch, unroll,
                )  # fmt: skip
            else:
                bounded = _row_energies(
                    Xt, J, Jb, Jmax, nx[t], nmax[t], lam, clamp, t, i, z, m, scratch, unroll
                )
        if not bounded:
            y = aligned_work(d * width, Xt).reshape((d, width))
            s = aligned_work(width, Xt)
            c = aligned_work(width, Xt)
            w = aligned_work(width, Xt)
            _row(Xt, J, lam, clamp, t, i, acc, y, m, z, s, c, w)
        for p in range(L):
            energies[t, i, p] = -(m[p] + np.log(z[p])) / lam
        if not fields:
            continue
        for p in range(L):
            z[p] = dt(1) / z[p]
        for a in range(_U(d)):
            for p in range(L):
                acc[a, p] *= z[p]
        if write_update:
            _update_spin(acc, Xt[t, i], gamma, norm, out[t, i], eps)
        else:
            for a in range(_U(d)):
                for p in range(L):
                    out[t, i, a, p] = acc[a, p]


@njit(parallel=True)
def async_sweep(Xt, J, lam, clamp, gamma, norm, order):
    """Random sequential update in place: sites in ``order``, one at a time, every tile.

    All samples share the same order of sites within a sweep (the samples stay in SIMD
    lanes); each site sees the spins already updated earlier in the sweep.
    """
    n_tiles, N, d, width = Xt.shape
    L = _U(width)
    dt = Xt.dtype.type
    lam = dt(lam)
    clamp = dt(clamp)
    gamma = dt(gamma)
    eps = dt(LAYERNORM_EPS)
    for t in prange(n_tiles):
        acc = aligned_work(d * width, Xt).reshape((d, width))
        y = aligned_work(d * width, Xt).reshape((d, width))
        m = aligned_work(width, Xt)
        z = aligned_work(width, Xt)
        s = aligned_work(width, Xt)
        c = aligned_work(width, Xt)
        w = aligned_work(width, Xt)
        new = aligned_work(d * width, Xt).reshape((d, width))
        for k in range(order.shape[0]):
            i = _U(order[k])
            _row(Xt, J, lam, clamp, _U(t), i, acc, y, m, z, s, c, w)
            for a in range(_U(d)):
                for p in range(L):
                    acc[a, p] /= z[p]
            _update_spin(acc, Xt[t, i], gamma, norm, new, eps)
            for a in range(_U(d)):
                for p in range(L):
                    Xt[t, i, a, p] = new[a, p]


@njit(parallel=True)
def attention(x, J, lam, out):
    """out[p, i, j] = alpha_ij (zero diagonal) for spins x (P, N, d); two-pass softmax."""
    P, N, d = x.shape
    dt = x.dtype.type
    lam = dt(lam)
    for p in prange(P):
        for i in range(N):
            top = dt(-np.inf)
            for j in range(N):
                if j == i:
                    out[p, i, j] = dt(0)
                    continue
                sc = dt(0)
                for a in range(d):
                    ya = dt(0)
                    for b in range(d):
                        ya += J[i, j, a, b] * x[p, j, b]
                    sc += x[p, i, a] * ya
                out[p, i, j] = lam * sc
                top = max(top, lam * sc)
            total = dt(0)
            for j in range(N):
                if j != i:
                    out[p, i, j] = np.exp(out[p, i, j] - top)
                    total += out[p, i, j]
            for j in range(N):
                out[p, i, j] /= total


# ------------------------------------------------------------- the notebook's dynamics
@njit(parallel=True)
def standardize_tiles(Xt, eps, out):
    """out = (x - mean_i x) / (std_i x + eps) per sample and component, over the N tokens.

    The unbiased standard deviation (0 for a single token), as :func:`numpy.std` with
    ``ddof = 1``; the step of the published notebook (:mod:`spinsa.damico`).
    """
    n_tiles, N, d, width = Xt.shape
    L = _U(width)
    dt = Xt.dtype.type
    eps = dt(eps)
    for t in prange(n_tiles):
        mu = np.empty(width, Xt.dtype)
        inv = np.empty(width, Xt.dtype)
        for a in range(_U(d)):
            for p in range(L):
                mu[p] = dt(0)
                inv[p] = dt(0)
            for i in range(_U(N)):
                for p in range(L):
                    mu[p] += Xt[t, i, a, p]
            for p in range(L):
                mu[p] /= dt(N)
            for i in range(_U(N)):
                for p in range(L):
                    dev = Xt[t, i, a, p] - mu[p]
                    inv[p] += dev * dev
            for p in range(L):
                sd = np.sqrt(inv[p] / dt(N - 1)) if N > 1 else dt(0)
                inv[p] = dt(1) / (sd + eps)
            for i in range(_U(N)):
                for p in range(L):
                    out[t, i, a, p] = (Xt[t, i, a, p] - mu[p]) * inv[p]


@njit(parallel=True)
def residual_mean_norm_tiles(Xt, H, scale, eps, out):
    """out = u / (mean_i |u_i| + eps) per sample, with u = x + scale h (the notebook's update)."""
    n_tiles, N, d, width = Xt.shape
    L = _U(width)
    dt = Xt.dtype.type
    scale = dt(scale)
    for t in prange(n_tiles):
        n2 = np.empty(width, Xt.dtype)
        total = np.zeros(width, Xt.dtype)
        for i in range(_U(N)):
            for p in range(L):
                n2[p] = dt(0)
            for a in range(_U(d)):
                for p in range(L):
                    u = Xt[t, i, a, p] + scale * H[t, i, a, p]
                    out[t, i, a, p] = u
                    n2[p] += u * u
            for p in range(L):
                total[p] += np.sqrt(n2[p])
        for p in range(L):
            total[p] = dt(1) / (total[p] / dt(N) + dt(eps))
        for i in range(_U(N)):
            for a in range(_U(d)):
                for p in range(L):
                    out[t, i, a, p] *= total[p]
