"""The kernels' written-out blocks, the dynamics' fixed-shift softmax and the objective's chunks."""

import os
import subprocess
import sys

import numpy as np
import pytest
from reference import local_fields as ref_fields
from reference import pl_loss_and_grad as ref_pl
from reference import random_system
from reference import site_energies as ref_energies

from spinsa.kernels import dynamics as k
from spinsa.kernels import objective as ko
from spinsa.kernels._unrolled import (
    MAX_UNROLLED_D,
    energy_block_source,
    outer_block_source,
    pair_block_source,
    score_block_source,
)


@pytest.mark.parametrize("pairs", [1, 3])
@pytest.mark.parametrize("W", [5, 6])
@pytest.mark.parametrize("d", range(1, MAX_UNROLLED_D + 1))
def test_pair_block_source_matches_numpy(rng, d, W, pairs):
    """The generated source (two passes, with a lane left over when W is odd), run
    as plain Python, adds the pairs' w y to acc and w to z lane by lane."""
    lam, clamp = 0.7, 0.1
    namespace = {"W": W, "_U": int, "fast_exp": np.exp}
    exec(pair_block_source(d, pairs=pairs), namespace)
    xi = rng.standard_normal((d, W))
    xj = rng.standard_normal((pairs, d, W))
    Jij = rng.standard_normal((pairs, d, d))
    shift = rng.standard_normal(W)
    acc0, z0 = rng.standard_normal((d, W)), rng.standard_normal(W)
    acc, z = acc0.ravel().copy(), z0.copy()
    Xf = np.concatenate([np.zeros(3), xi.ravel(), xj[::-1].ravel()])  # offsets are honoured
    Jf = np.concatenate([np.zeros(2), Jij.ravel()])
    oj = tuple(3 + d * W * (pairs - g) for g in range(pairs))
    jo = tuple(2 + d * d * g for g in range(pairs))
    scratch = np.full(pairs * (d + 1) * W, np.nan)
    namespace["pair_block"](Xf, Jf, jo, 3, oj, lam, clamp, shift, acc, z, scratch)

    y = np.einsum("gab,gbp->gap", Jij, xj)
    w = np.exp(lam * np.minimum((xi * y).sum(1), clamp) - shift)
    np.testing.assert_allclose(z, z0 + w.sum(0), rtol=1e-13)
    expected = acc0 + (w[:, None] * y).sum(0)
    np.testing.assert_allclose(acc.reshape(d, W), expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("pairs", [1, 4])
@pytest.mark.parametrize("d", [1, 4, 8])
def test_energy_block_source_matches_numpy(rng, d, pairs):
    """The normaliser alone, run as plain Python: the pairs' w added to z, lane by lane."""
    W, lam, clamp = 5, 0.7, 0.1
    namespace = {"W": W, "_U": int, "fast_exp": np.exp}
    exec(energy_block_source(d, pairs=pairs), namespace)
    xi = rng.standard_normal((d, W))
    xj = rng.standard_normal((pairs, d, W))
    Jij = rng.standard_normal((pairs, d, d))
    shift, z0 = rng.standard_normal((2, W))
    z = z0.copy()
    Xf = np.concatenate([np.zeros(3), xi.ravel(), xj.ravel()])
    Jf = np.concatenate([np.zeros(2), Jij.ravel()])
    oj = tuple(3 + d * W * (1 + g) for g in range(pairs))
    jo = tuple(2 + d * d * g for g in range(pairs))
    scratch = np.full(pairs * W, np.nan)
    namespace["energy_block"](Xf, Jf, jo, 3, oj, lam, clamp, shift, z, scratch)
    s = np.einsum("ap,gab,gbp->gp", xi, Jij, xj)
    w = np.exp(lam * np.minimum(s, clamp) - shift)
    np.testing.assert_allclose(z, z0 + w.sum(0), rtol=1e-13)


@pytest.mark.parametrize("N", range(2, 11))  # N - 1 sites j != i: groups and rests of 0-3
def test_sweep_takes_every_pair_once_in_groups(rng, N):
    """The fast path takes the sites j != i PAIRS at a time, the rest one by one: groups
    and rests of every size, the diagonal anywhere, against the plain formulas."""
    P = 2 * k.TILE - 3
    x, J = random_system(rng, P=P, N=N, d=8, dtype=np.float64)
    assert 2 * 0.9 * k.block_bounds(J).max() < k.SAFE_SPREAD  # unit spins: the fast path
    Xt = k.to_tiles(x)
    out = np.empty_like(Xt)
    E = np.empty(Xt.shape[:2] + Xt.shape[3:])
    k.sweep(Xt, J, 0.9, np.inf, 0.0, 0, False, out, E)
    np.testing.assert_allclose(k.from_tiles(out, P), ref_fields(x, J, 0.9), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(k.energies_from_tiles(E, P), ref_energies(x, J, 0.9), rtol=1e-11)


def elementwise(f):
    """The numba-only scalar function ``f`` applied elementwise by a compiled loop."""
    from spinsa.kernels._numba import njit

    @njit(cache=False)
    def apply(a, out):
        for n in range(a.shape[0]):
            out[n] = f(a[n])

    def run(a):
        out = np.empty_like(a)
        apply(a, out)
        return out

    return run


@pytest.fixture(scope="module")
def compiled_fast_exp():
    """fast_exp applied elementwise by a compiled loop."""
    from spinsa.kernels._math import fast_exp

    return elementwise(fast_exp)


def test_fast_exp_float32_is_within_3e_7_of_exp(compiled_fast_exp, rng):
    x = rng.uniform(-87.0, 88.0, 40_000).astype(np.float32)
    got = compiled_fast_exp(x).astype(np.float64)
    want = np.exp(x.astype(np.float64))
    assert np.max(np.abs(got - want) / want) < 3e-7
    x64 = rng.uniform(-5.0, 5.0, 100)
    np.testing.assert_allclose(compiled_fast_exp(x64), np.exp(x64), rtol=1e-15)  # libm's exp


def test_exp_weight_is_within_1e_13_of_exp_and_zero_below_its_range(rng):
    from spinsa.kernels._math import exp_weight

    apply = elementwise(exp_weight)
    x = np.concatenate([rng.uniform(-708.0, 709.0, 40_000), rng.uniform(-5.0, 0.0, 10_000)])
    got = apply(x)
    assert np.max(np.abs(got / np.exp(x) - 1.0)) < 1e-13
    assert np.max(np.abs(got[-10_000:] / np.exp(x[-10_000:]) - 1.0)) < 1e-15  # the weights' range
    out = apply(np.array([0.0, -708.0, -708.5, -1e300, -np.inf]))
    assert out[0] == 1.0 and out[1] > 0.0
    np.testing.assert_array_equal(out[2:], 0.0)  # the excluded site j = i keeps weight 0


@pytest.mark.parametrize("N", [1, 2, 5])
def test_lane_max_is_the_plain_maximum(rng, N):
    """Over the rows but one, scaled, from the start value; an odd or even number of rows."""
    A = rng.standard_normal((N, 7))
    c = rng.random(N)
    out, spare = np.full(7, -0.5), np.full(7, np.nan)
    k.lane_max(A, c, 1, out, spare)
    rows = [j for j in range(N) if j != 1]
    want = np.maximum((c[rows, None] * A[rows]).max(0, initial=-np.inf), -0.5)
    np.testing.assert_array_equal(out, want)


def test_fixed_shift_tries_the_loose_bound_then_the_rows_own(rng):
    """max_j Jb_ij max_j |x_j| where its range fits SAFE_SPREAD; the row's own
    max_j Jb_ij |x_j| where only that fits; False where neither does."""
    N, W = 5, k.TILE
    Jb = rng.uniform(0.5, 1.0, (N, N)).astype(np.float32)
    Jb[:, 4] = 1e-3  # site 4 couples weakly...
    np.fill_diagonal(Jb, 0.0)
    Jmax = Jb.max(axis=1)
    nx = rng.uniform(0.9, 1.1, (N, W)).astype(np.float32)
    nx[4] = 30.0  # ...but is long: the loose bound is 30x the row's own
    nmax = nx.max(axis=0)
    shift, z, scratch = (np.empty(W, np.float32) for _ in range(3))

    def tight(i):
        others = [j for j in range(N) if j != i]
        return nx[i] * (Jb[i, others, None] * nx[others]).max(axis=0)

    for lam, want in ((0.5, nx[0] * Jmax[0] * nmax), (10.0, tight(0)), (1000.0, None)):
        lam, inf, i = np.float32(lam), np.float32(np.inf), np.uint64(0)  # as the sweep's
        ok = k._fixed_shift(Jb, Jmax, nx, nmax, lam, inf, i, shift, z, scratch)
        assert ok == (want is not None)
        if ok:
            np.testing.assert_allclose(shift, lam * want, rtol=1e-6)


@pytest.mark.parametrize("P", [10, 300])  # the generic path and the fast one
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sweep_gives_the_energies_alone_without_the_fields(rng, P, dtype):
    x, J = random_system(rng, P=P, N=6, d=8, dtype=dtype)
    Xt = k.to_tiles(x)
    E_full, E_only = (np.empty(Xt.shape[:2] + Xt.shape[3:], dtype) for _ in range(2))
    k.sweep(Xt, J, 0.9, np.inf, 0.0, 0, False, np.empty_like(Xt), E_full)
    k.sweep(Xt, J, 0.9, np.inf, 0.0, 0, False, None, E_only)
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(E_only, E_full, rtol=rtol)
    np.testing.assert_allclose(k.energies_from_tiles(E_only, P), ref_energies(x, J, 0.9), rtol=rtol)


@pytest.mark.parametrize("d, rows", [(1, 2), (2, 1), (5, 2), (5, 3), (8, 1), (8, 2)])
def test_objective_block_sources_match_numpy(rng, d, rows):
    """The objective's score and gradient blocks (``rows`` rows of the gradient at a time),
    run as plain Python, against numpy."""
    W, lam, clamp = 6, 0.7, 0.2
    namespace = {"_U": int}
    exec(score_block_source(d) + outer_block_source(d, rows=rows), namespace)
    xi, xj = rng.standard_normal((2, d, W))
    Jij = rng.standard_normal((d, d))
    Xf = np.concatenate([np.zeros(3), xi.ravel(), xj.ravel()])  # offsets are honoured
    Jf = np.concatenate([np.zeros(2), Jij.ravel()])
    S = np.zeros(W + 4)
    namespace["score_block"](Xf, Jf, 2, 3, 3 + d * W, W, lam, clamp, S, 4)
    s = lam * np.minimum((xi * (Jij @ xj)).sum(0), clamp)
    np.testing.assert_allclose(S[4:], s, rtol=1e-13)

    G0 = rng.standard_normal(d * d + 1)
    G = G0.copy()
    namespace["outer_block"](Xf, 3, 3 + d * W, W, S, 4, G, 1)
    expected = G0[1:] - np.einsum("p,ap,bp->ab", S[4:], xi, xj).ravel()
    np.testing.assert_allclose(G[1:], expected, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(
    "source", [pair_block_source, energy_block_source, score_block_source, outer_block_source]
)
def test_block_sources_refuse_unsupported_d(source):
    with pytest.raises(ValueError, match="d must be in 1..8"):
        source(MAX_UNROLLED_D + 1)
    with pytest.raises(ValueError, match="rows must be >= 1"):
        outer_block_source(8, rows=0)
    with pytest.raises(ValueError, match="pairs must be >= 1"):
        pair_block_source(8, pairs=0)


def test_blocking_follows_the_targets_vector_registers():
    """The objective's rows of sums and the dynamics' pairs per block."""
    from spinsa.bench import compile_target
    from spinsa.kernels._numba import vector_registers
    from spinsa.kernels._unrolled import pairs_for_registers, rows_for_registers

    assert rows_for_registers(32) == 2 and rows_for_registers(16) == 1
    assert pairs_for_registers(32) == 4 and pairs_for_registers(16) == 2
    features = compile_target()["features"]
    if "avx512f" in features:
        assert vector_registers() == 32
    elif "avx2" in features:
        assert vector_registers() == 16


@pytest.mark.parametrize("P, d", [(1100, 3), (530, 8), (600, 9)])
def test_objective_streams_chunks_exactly(rng, P, d):
    """Several chunks (the last one partial), written-out and generic d: the plain formula."""
    xi, J = random_system(rng, P=P, N=4, d=d)
    assert P > ko.CHUNK
    grad = np.empty_like(J)
    loss = ko.loss_and_grad(xi, J, 3.0, grad)
    ref_loss, ref_grad = ref_pl(xi, J, 3.0)
    assert loss == pytest.approx(ref_loss, rel=1e-10)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-14)
    rows = np.empty_like(J)
    row_losses = [ko.row_loss_and_grad(xi, J[i], 3.0, i, rows[i]) for i in range(4)]
    assert sum(row_losses) == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(rows, grad, rtol=1e-12, atol=1e-15)


def test_fast_path_applies_to_full_tiles_and_small_d():
    assert k.unroll_tag(np.zeros((2, 3, 8, k.TILE), np.float32)) == (0,) * 8
    assert k.unroll_tag(np.zeros((1, 3, 9, k.TILE))) == ()  # d > 8
    assert k.unroll_tag(np.zeros((1, 3, 8, 16))) == ()  # a narrow tile (P <= 64)
    assert k.tile_width(65) == k.TILE and k.tile_width(64) == 64 and k.tile_width(1) == 16


@pytest.mark.parametrize("d", [1, 3, 8])
def test_block_bounds_bound_the_spectral_norms_closely(rng, d):
    J = rng.standard_normal((5, 5, d, d))
    J[1, 2] = 0.0
    spectral = np.linalg.norm(J, 2, axis=(2, 3))
    bounds = k.block_bounds(J)
    off = ~np.eye(5, dtype=bool)
    assert np.all(bounds[off] >= spectral[off] * (1 - 1e-12))
    assert np.all(bounds[off] <= spectral[off] * d**0.125 * (1 + 1e-12))
    assert np.all(np.diag(bounds) == 0) and bounds[1, 2] == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_block_bounds_are_the_plain_formula(rng, dtype):
    """tr((J^T J)^4)^(1/8) per block by numpy, zero blocks and the diagonal 0."""
    J = rng.standard_normal((6, 6, 8, 8)).astype(dtype)
    J[2, 4] = 0.0
    J64 = J.astype(np.float64)
    B = np.einsum("ijab,ijac->ijbc", J64, J64)
    B2 = B @ B
    want = np.einsum("ijbc,ijcb->ij", B2, B2) ** 0.125
    want[np.arange(6), np.arange(6)] = 0.0
    rtol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(k.block_bounds(J), want, rtol=rtol)


def test_cached_block_bounds_follow_the_content_of_J(rng):
    """Reused for the same content (another array too), recomputed for a J changed in place."""
    J = rng.standard_normal((5, 5, 3, 3))
    first = k.cached_block_bounds(J)
    assert k.cached_block_bounds(J) is first and k.cached_block_bounds(J.copy()) is first
    assert not first.flags.writeable
    J[1, 3, 0, 2] *= 3.0  # in place: the same object, another content
    again = k.cached_block_bounds(J)
    assert again is not first
    np.testing.assert_array_equal(again, k.block_bounds(J))
    swapped = J.copy()
    swapped[0, 1], swapped[0, 2] = J[0, 2], J[0, 1]  # same values, other places
    assert k.fingerprint(swapped) != k.fingerprint(J)
    for _ in range(k.BOUNDS_CACHE_SIZE + 2):  # bounded: the oldest go
        k.cached_block_bounds(rng.standard_normal((3, 3, 2, 2)))
    assert len(k._BOUNDS_CACHE) == k.BOUNDS_CACHE_SIZE


def test_sweep_bounds_are_zeros_where_the_fast_path_never_reads_them(rng):
    x, J = random_system(rng, P=10, N=4, d=3)
    assert not k.sweep_bounds(k.to_tiles(x), J).any()
    x, _ = random_system(rng, P=100, N=4, d=3)
    np.testing.assert_array_equal(k.sweep_bounds(k.to_tiles(x), J), k.block_bounds(J))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_largest_norms_match_numpy(rng, dtype):
    from spinsa._checks import block_norm_max, spin_norm_max

    x, J = random_system(rng, P=7, N=5, d=3, unit=False, dtype=dtype)
    x[2, 1] *= 40.0
    J[1, 3] *= 40.0
    assert spin_norm_max(x) == pytest.approx(np.linalg.norm(x, axis=-1).max(), rel=1e-6)
    assert block_norm_max(J) == pytest.approx(np.linalg.norm(J, axis=(2, 3)).max(), rel=1e-6)
    assert spin_norm_max(x[:, :0]) == 0.0 and block_norm_max(J[:0, :0]) == 0.0
    assert spin_norm_max(x[:, ::2]) == pytest.approx(np.linalg.norm(x[:, ::2], axis=-1).max())


def _both_paths(x, J, lam, clamp=np.inf):
    """(fields, energies) of the fast path and of the generic path, (P, N, d) and (P, N)."""
    Xt = k.to_tiles(x)
    results = []
    for unroll in (k.unroll_tag(Xt), ()):
        out = np.empty_like(Xt)
        Et = np.empty(Xt.shape[:2] + Xt.shape[3:], x.dtype)
        k._sweep(Xt, J, k.block_bounds(J), lam, clamp, 0.0, 0, False, True, out, Et, unroll)
        results.append((k.from_tiles(out, len(x)), k.energies_from_tiles(Et, len(x))))
    assert k.unroll_tag(Xt), "the fast path must apply to this system"
    return results


@pytest.mark.parametrize("d", [1, 8])
def test_fast_path_matches_generic_path_and_plain_numpy(rng, d):
    x, J = random_system(rng, P=130, N=6, d=d, unit=False)
    x[5, 2] = 0.0  # a masked token
    x[7] = 0.0  # a fully masked sample
    (h_fast, e_fast), (h_gen, e_gen) = _both_paths(x, J, 1.3)
    np.testing.assert_allclose(h_fast, h_gen, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(e_fast, e_gen, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(h_fast, ref_fields(x, J, 1.3), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(e_fast, ref_energies(x, J, 1.3), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("clamp", [0.3, -0.2])
def test_fast_path_honours_the_score_clamp(rng, clamp):
    x, J = random_system(rng, P=70, N=5, d=8, unit=False)
    (h_fast, e_fast), (h_gen, e_gen) = _both_paths(x, J, 2.0, clamp=clamp)
    np.testing.assert_allclose(h_fast, h_gen, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(e_fast, e_gen, rtol=1e-12, atol=1e-14)


def test_rows_whose_bound_is_too_loose_fall_back_to_the_online_softmax(rng):
    """One row with couplings 1000x larger takes the generic path; the others stay fast."""
    x, J = random_system(rng, P=100, N=5, d=8, dtype=np.float32)
    J[2] *= 1000.0
    lam = 0.5
    bounds = k.block_bounds(J).max(axis=1)
    assert 2 * lam * bounds[2] > k.SAFE_SPREAD > 2 * lam * bounds[0]
    (h_fast, e_fast), (h_gen, e_gen) = _both_paths(x, J, lam)
    assert np.isfinite(h_fast).all() and np.isfinite(e_fast).all()
    np.testing.assert_allclose(h_fast, h_gen, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(e_fast, e_gen, rtol=1e-5)
    ref = ref_fields(x.astype(np.float64), J.astype(np.float64), lam)
    np.testing.assert_allclose(h_fast, ref, rtol=1e-4, atol=1e-4)


def test_import_spinsa_chooses_512_bit_vectors_on_avx512():
    """The choice must happen before anything imports numba, whatever spinsa imports first."""
    import llvmlite.binding as llvm

    if not llvm.get_host_cpu_features().get("avx512f"):
        pytest.skip("no AVX-512 on this CPU")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NUMBA_CPU_FEATURES", "SPINSA_NO_AVX512_TUNING")
    }
    code = "import os, spinsa; print(os.environ.get('NUMBA_CPU_FEATURES', ''))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("-prefer-256-bit")


@pytest.mark.parametrize("P", [1, 17, 64, 65, 300])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiles_start_on_a_cache_line_and_hold_the_spins(rng, P, dtype):
    """to_tiles and tiles_like start on 64 bytes (every row of a tile with them: widths are
    multiples of 16 lanes); the spins come back, the padded lanes are zero spins."""
    from spinsa.kernels._aligned import ALIGN

    x = rng.standard_normal((P, 5, 3)).astype(dtype)
    Xt = k.to_tiles(x)
    width = Xt.shape[3]
    assert width % 16 == 0 and Xt.flags.c_contiguous
    for a in (Xt, k.tiles_like(Xt)):
        assert a.ctypes.data % ALIGN == 0 and a.shape == Xt.shape and a.dtype == dtype
    np.testing.assert_array_equal(k.from_tiles(Xt, P), x)
    padded = Xt.transpose(0, 3, 1, 2).reshape(-1, 5, 3)[P:]
    assert padded.shape[0] == Xt.shape[0] * width - P and not padded.any()


def test_work_arrays_inside_numba_start_on_a_cache_line():
    """aligned_work in compiled code: n elements of the dtype asked for, on 64 bytes, for
    sizes that numba's own np.empty (32-byte alignment) would leave off a cache line."""
    from spinsa.kernels._aligned import ALIGN, aligned_empty, aligned_work
    from spinsa.kernels._numba import njit

    @njit(cache=False)
    def addresses(like, sizes):
        out = np.empty((sizes.size, 2), np.int64)
        for n in range(sizes.size):
            w = aligned_work(sizes[n], like)
            w[:] = 1  # all of it writable
            out[n, 0] = w.ctypes.data % ALIGN
            out[n, 1] = w.size
        return out

    sizes = np.array([1, 3, 16, 100, 1024, 4097])
    for dtype in (np.float32, np.float64):
        got = addresses(np.zeros(1, dtype), sizes)
        assert (got[:, 0] == 0).all() and (got[:, 1] == sizes).all()
        assert aligned_work.py_func(5, np.zeros(1, dtype)).dtype == dtype
    for shape in [(7, 13), (2, 3, 4, 5)]:
        a = aligned_empty(shape, np.float32)
        assert a.shape == shape and a.ctypes.data % ALIGN == 0 and a.flags.c_contiguous
    assert aligned_empty((3, 0, 2), np.float64).shape == (3, 0, 2)  # no samples: no tiles


def test_written_out_blocks_start_their_stack_frame_on_a_cache_line():
    """A block made by written_for_d asks LLVM for a 64-byte stack frame (alignstack(64),
    kept by numba only with noinline), so that the couplings it spills are reloaded from
    whole cache lines; the generic path's no-op is left alone."""
    import platform

    from numba import typeof

    from spinsa.kernels._numba import njit, written_for_d

    def source(d, name, extra_args):
        return f"def {name}(x, {', '.join(extra_args)}):\n    return x * {d}\n"

    noop = lambda x, unroll: None  # noqa: E731
    assert written_for_d(source, "scale", typeof(()), noop) is noop
    assert written_for_d(source, "scale", typeof(3), noop) is None  # not a tuple
    block = njit(cache=False)(written_for_d(source, "scale", typeof((0, 0)), noop))
    assert block(1.5, (0, 0)) == 3.0
    (ir,) = block.inspect_llvm().values()
    attributes = [line for line in ir.splitlines() if "alignstack(64)" in line]
    assert attributes and "noinline" in attributes[0]
    if platform.machine().lower() in ("x86_64", "amd64"):
        (asm,) = block.inspect_asm().values()
        assert "$-64, %rsp" in asm  # the prologue rounds the stack pointer down to 64 bytes
