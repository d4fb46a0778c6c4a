"""The benchmark harness: fast code and a plain implementation, side by side, in one process.

Run ``spinsa bench`` (:mod:`spinsa.cli.bench`; ``spinsa bench --device cuda`` on a machine
with a GPU: the torch paths there, against torch autograd and the plain dynamics). Each
benchmark prints the best of a few repetitions of both implementations, their ratio, the
useful GFLOP/s and, for scale, this machine's float32 matmul peak measured by numpy's BLAS
in the same process. Timings on a shared machine are noisy; ratios measured in one process
much less so. Tests never assert on any of these numbers.

Useful work is what the formulas need, per ordered pair i != j and sample
(:func:`dynamics_flops`, :func:`objective_flops`):

- a step of the dynamics, 2 d^2 + 4 d flops: y = J_ij x_j once (2 d^2), shared by the score
  x_i . y (2 d) and the field sum_j alpha_ij y (2 d), plus one exp (not counted);
- the objective and its gradient, 4 d^2 + 3 d: the score (2 d^2 + 2 d), the weight times x_i
  (d) and the outer product added to the gradient (2 d^2), plus one exp.

The former count, 4 d^2 per pair and sample for both (``Timing.gflops_old``), counted the
dynamics' J_ij x_j twice: at d = 8 it is 1.6 times the useful work. Every benchmark prints
the CPU and the vector width numba compiled for (:func:`compile_target`).
A baseline's training step costs 3 times its forward pass's matmuls
(:func:`baseline_forward_flops`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

from spinsa._progress import peak_rss_mb
from spinsa._torch import import_torch


@dataclass(frozen=True)
class Timing:
    """One side of a benchmark: its best time and its GFLOP/s (useful, and by the old count)."""

    name: str
    seconds: float  # best of the repetitions
    gflops: float  # useful GFLOP/s (dynamics_flops, objective_flops)
    gflops_old: float | None = None  # GFLOP/s by the former count, 4 P N^2 d^2


def dynamics_flops(P: int, N: int, d: int, steps: int = 1) -> float:
    """Useful flops of ``steps`` synchronous steps (or sweeps): (2 d^2 + 4 d) per ordered pair
    i != j and sample; the exp of each pair is not counted."""
    return float(steps) * P * N * (N - 1) * (2 * d * d + 4 * d)


def objective_flops(P: int, N: int, d: int) -> float:
    """Useful flops of one pseudo-likelihood objective and gradient over P samples:
    (4 d^2 + 3 d) per ordered pair i != j and sample; the exp of each pair is not counted."""
    return float(P) * N * (N - 1) * (4 * d * d + 3 * d)


def timing(name: str, seconds: float, flops: float, P: int, N: int, d: int, n=1) -> Timing:
    """A :class:`Timing` of ``flops`` useful flops, with the former count of ``n`` steps or
    evaluations (4 P N^2 d^2 each) beside it."""
    return Timing(name, seconds, flops / seconds / 1e9, 4.0 * n * P * N**2 * d**2 / seconds / 1e9)


def compile_target() -> dict:
    """The CPU numba compiles for, its SIMD features and the vector width of the code.

    ``cpu``: ``NUMBA_CPU_NAME`` if set, else the host's (llvmlite); ``features``: the SIMD
    features enabled, ``NUMBA_CPU_FEATURES`` if set, else the host's (numba's rule: a
    ``NUMBA_CPU_NAME`` alone keeps the host's features, so restricting the vector width
    takes ``NUMBA_CPU_FEATURES`` too); ``vector_bits``: the widest vector register in the
    machine code numba makes for a float32 loop under the package's fast-math, which follows
    both (and LLVM's preference for 256-bit vectors on AVX-512 CPUs, which spinsa lifts).
    """
    import re

    import llvmlite.binding as llvm
    import numba

    from spinsa.kernels._numba import FASTMATH, enabled_cpu_features

    named = bool(numba.config.CPU_NAME)
    cpu = numba.config.CPU_NAME or llvm.get_host_cpu_name()
    enabled = enabled_cpu_features()
    simd = ("avx512f", "avx512vl", "avx2", "fma", "avx", "sse4.2", "neon", "sve", "sve2")
    features = [f for f in simd if f in enabled]

    @numba.njit(fastmath=FASTMATH, cache=False)
    def axpy(a, x, y):  # pragma: no cover - compiled
        for k in range(x.shape[0]):
            y[k] += a * x[k]

    x = np.ones(1024, np.float32)
    axpy(np.float32(2.0), x, x.copy())
    asm = "\n".join(axpy.inspect_asm().values())
    registers = [(512, r"%zmm\d"), (256, r"%ymm\d"), (128, r"%xmm\d|\bv\d+\.4s")]
    bits = next((b for b, pattern in registers if re.search(pattern, asm)), 0)
    return {"cpu": cpu, "cpu_from_env": named, "features": features, "vector_bits": bits}


def min_wall_time(fn, repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls of ``fn()`` (after whatever warm-up the caller did)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def matmul_peak(n: int = 2048, repeat: int = 5, device: str = "cpu", coretype=None) -> float:
    """float32 GFLOP/s of an n x n matmul: the machine's practical peak (numpy's BLAS on the
    CPU; torch on ``device="cuda"``, 8192 x 8192, TF32 off as torch's default).

    ``coretype``: measured in a fresh process whose OpenBLAS runs that core type's kernels
    (``OPENBLAS_CORETYPE``; :func:`peak_coretype` says when that is needed).
    """
    if device == "cuda":
        torch = import_torch()
        dev = torch.device("cuda")
        a = torch.randn(8192, 8192, device=dev)
        mm = _on_device(torch, dev, lambda: a @ a)
        mm()
        return 2 * 8192**3 / min_wall_time(mm, repeat) / 1e9
    if coretype is not None:
        code = f"from spinsa.bench import matmul_peak; print(matmul_peak({n}, {repeat}))"
        env = {**os.environ, "OPENBLAS_CORETYPE": coretype}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        return float(done.stdout.split()[-1])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    return 2 * n**3 / min_wall_time(lambda: a @ b, repeat) / 1e9


# OpenBLAS's core types (OPENBLAS_CORETYPE) by the vector width of their float32 kernels
_OPENBLAS_BITS = {
    "haswell": 256,
    "zen": 256,
    "skylakex": 512,
    "cooperlake": 512,
    "sapphirerapids": 512,
}
_OPENBLAS_FOR_BITS = {256: "Haswell", 512: "SkylakeX"}


def blas_core() -> str | None:
    """The core type whose kernels OpenBLAS runs numpy's matmul with in this process.

    Returns
    -------
    str or None
        threadpoolctl's ``architecture`` of numpy's OpenBLAS, e.g. ``"Haswell"``; None
        where numpy runs another BLAS.
    """
    from threadpoolctl import threadpool_info

    np.ones(2) @ np.ones(2)  # numpy loads its BLAS lazily on some builds
    for lib in threadpool_info():
        if lib.get("internal_api") == "openblas" and lib.get("user_api") == "blas":
            return lib.get("architecture")
    return None


def peak_coretype(vector_bits: int, core: str | None) -> str | None:
    """The ``OPENBLAS_CORETYPE`` whose kernels have numba's vector width ``vector_bits``,
    where OpenBLAS's own kernels (``core``, :func:`blas_core`) have another; else None.

    OpenBLAS picks its kernels by CPU model. On one it does not know it may run 256-bit
    kernels where the CPU runs 512-bit vectors at twice their speed (AMD's Zen 5 with
    OpenBLAS 0.3.31: 257 against 473 GFLOP/s on 2 cores), and every fraction of that
    "peak" doubles. Code compiled for 256-bit vectors on an AVX-512 CPU (an AVX2 machine,
    emulated) is likewise measured against 256-bit kernels.

    Parameters
    ----------
    vector_bits : int
        The widest vector register of numba's code (``compile_target()["vector_bits"]``).
    core : str or None
        OpenBLAS's core type in this process (:func:`blas_core`), any case.

    Returns
    -------
    str or None
        ``"SkylakeX"`` (512-bit) or ``"Haswell"`` (256-bit); None where the core type's
        width is ``vector_bits`` already, unknown, or no core type of that width is listed.
    """
    width = _OPENBLAS_BITS.get((core or "").lower())
    if width is None or width == vector_bits or vector_bits not in _OPENBLAS_FOR_BITS:
        return None
    return _OPENBLAS_FOR_BITS[vector_bits]


# ------------------------------------------------------------------ plain implementations
def plain_torch_run(x0, J, lam, steps, gamma=1.0, batch=256, device="cpu"):
    """The published notebook's way: materialise y[p, i, j] = J_ij x_j, (batch, N, N, d)."""
    torch = import_torch()
    J = torch.as_tensor(J, device=device)
    x = torch.as_tensor(x0, device=device).clone()
    N = x.shape[1]
    eye = torch.eye(N, dtype=torch.bool, device=device)
    for _ in range(steps):
        out = torch.empty_like(x)
        for start in range(0, x.shape[0], batch):
            xb = x[start : start + batch]
            y = torch.einsum("ijab,pjb->pija", J, xb)
            s = torch.einsum("pia,pija->pij", xb, y).masked_fill(eye, float("-inf"))
            h = torch.einsum("pij,pija->pia", torch.softmax(lam * s, dim=-1), y)
            u = h + gamma * xb
            out[start : start + batch] = u / u.norm(dim=-1, keepdim=True)
        x = out
    return x.cpu().numpy()


def plain_numpy_sweep(x, J, lam, order, gamma=1.0):
    """One asynchronous sweep, site by site in ``order``, in plain numpy (sphere norm)."""
    x = np.array(x, dtype=np.float64, copy=True)
    J = np.asarray(J, dtype=np.float64)
    for i in order:
        y = np.einsum("jab,pjb->pja", J[i], x)  # J_ij x_j of the current state
        s = np.einsum("pa,pja->pj", x[:, i], y)
        s[:, i] = -np.inf
        a = np.exp(lam * (s - s.max(axis=1, keepdims=True)))
        h = np.einsum("pj,pja->pa", a / a.sum(axis=1, keepdims=True), y)
        u = h + gamma * x[:, i]
        x[:, i] = u / np.linalg.norm(u, axis=1, keepdims=True)
    return x


# ------------------------------------------------------------------------- benchmarks
def _spins_and_couplings(P, N, d, seed=0):
    import spinsa

    x = np.random.default_rng(seed).standard_normal((P, N, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    return x, spinsa.random_couplings(N, d, scale=1.0, seed=seed + 1)


def call_fixed_cost(x0, J, repeat=5) -> float:
    """Seconds of a call of ``spinsa.run(x0, J, 1.0, 0)`` beyond its one sweep (the energies
    of x0): the checks, the block bounds, the tiles, the allocations and the record. Best of
    ``repeat`` of each, the kernel's sweep timed alone with the bounds given."""
    import spinsa
    from spinsa.kernels import dynamics as k

    x0, J = np.ascontiguousarray(x0), np.ascontiguousarray(J)
    Xt = k.to_tiles(x0)
    new, Jb = k.tiles_like(Xt), k.block_bounds(J)
    Et = np.empty(Xt.shape[:2] + Xt.shape[3:], dtype=Xt.dtype)
    spinsa.run(x0, J, 1.0, 0)
    sweep = min_wall_time(lambda: k.sweep(Xt, J, 1.0, np.inf, 0.0, 0, False, new, Et, Jb), repeat)
    call = min_wall_time(lambda: spinsa.run(x0, J, 1.0, 0), repeat)
    return max(call - sweep, 0.0)


def bench_dynamics(P=1000, N=196, d=8, steps=20, repeat=5, with_plain=True):
    """``spinsa.run`` against :func:`plain_torch_run`; returns the timings, peak memory and a
    call's fixed cost (:func:`call_fixed_cost`)."""
    import spinsa

    x0, J = _spins_and_couplings(P, N, d)
    flops = dynamics_flops(P, N, d, steps)
    spinsa.run(x0[:8], J, 1.0, 1)  # compile (or load from the cache)
    rss0 = peak_rss_mb()
    fast = min_wall_time(lambda: spinsa.run(x0, J, 1.0, steps, record_every=steps), repeat)
    extra_mb = peak_rss_mb() - rss0
    out = {"fast": timing("spinsa.run (numba)", fast, flops, P, N, d, steps), "extra_mb": extra_mb}
    out["fixed_seconds"] = call_fixed_cost(x0, J)
    if with_plain:
        plain = min_wall_time(lambda: plain_torch_run(x0, J, 1.0, steps), 1)
        out["plain"] = timing("plain torch", plain, flops, P, N, d, steps)
        a = spinsa.run(x0[:64], J, 1.0, 3).final
        b = plain_torch_run(x0[:64], J, 1.0, 3)
        out["max_abs_diff"] = float(np.abs(a - b).max())
    return out


def bench_async(P=256, N=196, d=8, repeat=2, with_plain=True):
    """One asynchronous sweep (``spinsa.async_sweep``) against :func:`plain_numpy_sweep`."""
    import spinsa

    x0, J = _spins_and_couplings(P, N, d)
    flops = dynamics_flops(P, N, d)  # a sweep does the work of one synchronous step
    spinsa.async_sweep(x0[:8], J, 1.0, rng=0)
    fast = min_wall_time(lambda: spinsa.async_sweep(x0, J, 1.0, rng=0), repeat)
    out = {"fast": timing("spinsa.async_sweep", fast, flops, P, N, d)}
    if with_plain:
        order = np.random.default_rng(0).permutation(N)  # the order async_sweep draws
        plain = min_wall_time(lambda: plain_numpy_sweep(x0, J, 1.0, order), 1)
        out["plain"] = timing("plain numpy per site", plain, flops, P, N, d)
        a = spinsa.async_sweep(x0[:16], J, 1.0, rng=0)
        out["max_abs_diff"] = float(np.abs(a - plain_numpy_sweep(x0[:16], J, 1.0, order)).max())
    return out


def bench_damico(P=1000, N=196, d=8, steps=20, repeat=2):
    """The notebook's dynamics (``damico_run``) against the design's (``spinsa.run``): the
    ratio of their times, same spins, couplings and steps."""
    import spinsa
    from spinsa.damico import damico_run

    x0, J = _spins_and_couplings(P, N, d)
    flops = dynamics_flops(P, N, d, steps)
    damico_run(x0[:8], J, 1.0, 1)
    spinsa.run(x0[:8], J, 1.0, 1)
    notebook = min_wall_time(lambda: damico_run(x0, J, 1.0, steps), repeat)
    design = min_wall_time(lambda: spinsa.run(x0, J, 1.0, steps, record_every=steps), repeat)
    return {  # "plain" is the notebook's here: the ratio is its time over the design's
        "fast": timing("spinsa.run (design)", design, flops, P, N, d, steps),
        "plain": timing("damico_run", notebook, flops, P, N, d, steps),
    }


def bench_cd_epoch(P=10_000, N=196, d=8, k=1, batch=256):
    """One epoch of CD-k's minibatch gradients against one of the pseudo-likelihood's, same
    patterns, couplings and batch size, both as the fit computes them on the CPU (the numba
    closed form; CD adds k steps of the dynamics and a second closed form per minibatch)."""
    from spinsa._torch import import_torch
    from spinsa.fit import FitConfig
    from spinsa.fit.checkpoint import FitState
    from spinsa.fit.gradients import make_gradient

    torch = import_torch()
    xi, J = _objective_inputs(P, N, d)
    Jt, x_all = torch.from_numpy(J), torch.from_numpy(xi)
    order = np.random.default_rng(0).permutation(P)

    def epoch(config):
        gradient = make_gradient(torch, config, xi, x_all, FitState(J, np.ones(1)), 1)
        return lambda: [gradient(order[s : s + batch], Jt, None) for s in range(0, P, batch)]

    cd_config = FitConfig(lam=5.0, method="cd", chain="dynamics", k=k)  # the study's chain
    pl, cd = epoch(FitConfig(backend="torch", lam=5.0)), epoch(cd_config)
    flops = objective_flops(P, N, d)  # one closed form over the data
    cd_flops = 2 * flops + dynamics_flops(P, N, d, k)  # + k steps, + the model's closed form
    pl_s, cd_s = min_wall_time(pl, 1), min_wall_time(cd, 1)
    return {  # "plain" is the PL epoch: the ratio is CD's time over it
        "fast": timing("PL epoch", pl_s, flops, P, N, d),
        "plain": timing(f"CD-{k} epoch", cd_s, cd_flops, P, N, d, 2 + k),
    }


def _objective_inputs(P, N, d):
    rng = np.random.default_rng(0)
    xi = rng.standard_normal((P, N, d)).astype(np.float32)
    xi /= np.linalg.norm(xi, axis=-1, keepdims=True)
    J = (rng.uniform(-0.5, 0.5, (N, N, d, d)) / d**2).astype(np.float32)
    J[np.arange(N), np.arange(N)] = 0
    return xi, J


def bench_objective(P=2048, N=196, d=8, repeat=5, with_plain=True):
    """The pseudo-likelihood objective + gradient against torch autograd."""
    from spinsa.kernels import objective

    xi, J = _objective_inputs(P, N, d)
    grad = np.empty_like(J)
    flops = objective_flops(P, N, d)
    objective.loss_and_grad(xi[:8], J, 5.0, grad)
    rss0 = peak_rss_mb()
    fast = min_wall_time(lambda: objective.loss_and_grad(xi, J, 5.0, grad), repeat)
    out = {
        "fast": timing("numba loss+grad", fast, flops, P, N, d),
        "extra_mb": peak_rss_mb() - rss0,
        # parameter x sample updates per second (the unit plmc is quoted in)
        "updates_per_s": N * (N - 1) * d * d * P / fast,
    }
    if with_plain:  # the same objective differentiated by torch autograd (CPU)
        from spinsa.fit.torch_backend import autograd_loss_and_grad

        plain = min_wall_time(lambda: autograd_loss_and_grad(xi, J, 5.0, 512), 1)
        out["plain"] = timing("torch autograd", plain, flops, P, N, d)
        loss, g = autograd_loss_and_grad(xi, J, 5.0, 512)
        out["max_rel_diff"] = float(np.abs(grad - g).max() / np.abs(g).max())
    return out


def bench_gibbs(P=256, N=196, d=8, sweeps=10, repeat=2):
    """One heat-bath Gibbs sweep of the attention model (``spinsa.sampling.gibbs``, P chains)
    against one synchronous dynamics step (``spinsa.step``) of P samples; "plain" is the
    sweep, so the printed ratio is sweep / step.

    A call of ``gibbs`` also validates its inputs and records the energies once: that fixed
    cost is measured apart (the difference of 2 ``sweeps`` and ``sweeps`` sweeps per call
    is the cost of ``sweeps`` sweeps) and printed as the record's cost."""
    import spinsa
    from spinsa import sampling

    x0, J = _spins_and_couplings(P, N, d)
    x64 = x0.astype(np.float64)
    flops = dynamics_flops(P, N, d)  # a sweep updates every site once, as a step does

    def call(n):
        return lambda: sampling.gibbs(J, 1.0, P, n, thin=n, x0=x64, rng=0)

    spinsa.step(x0[:8], J, 1.0)
    sampling.gibbs(J, 1.0, 2, 1, x0=x64[:2])  # compile or load
    step = min_wall_time(lambda: spinsa.step(x0, J, 1.0), repeat + 1)
    short, long = min_wall_time(call(sweeps), repeat), min_wall_time(call(2 * sweeps), repeat)
    sweep = max(long - short, 0.0) / sweeps
    return {
        "fast": timing("spinsa.step (sync)", step, flops, P, N, d),
        "plain": timing("Gibbs sweep", sweep, flops, P, N, d),
        "record_seconds": max(short - sweeps * sweep, 0.0),  # a call's checks + one record
    }


def plain_hebbian_spectra(J) -> list:
    """The former spectra of a comparison with the Hebb rule: every spectrum of M by
    numpy.linalg (the general eigenvalues included), BLAS threads as they are."""
    M = np.asarray(J, dtype=np.float64).transpose(0, 2, 1, 3).reshape(J.shape[0] * J.shape[2], -1)
    return [
        np.linalg.eigvals(M),
        np.linalg.svd(M, compute_uv=False),
        np.linalg.eigvalsh((M + M.T) / 2),
        np.linalg.svd(np.asarray(J, dtype=np.float64), compute_uv=False),
    ]


def bench_hebbian(P=1000, N=196, d=8, with_plain=True):
    """``compare_with_hebbian`` of random couplings (no symmetry to use) against the former
    way of computing its spectra (:func:`plain_hebbian_spectra` of J and K)."""
    import spinsa
    from spinsa.analysis import compare_with_hebbian, matched_hebbian

    xi, _ = _spins_and_couplings(P, N, d)
    J = spinsa.random_couplings(N, d, seed=1)
    fast = min_wall_time(lambda: compare_with_hebbian(J, xi), 1)
    out = {"fast": Timing("compare_with_hebbian", fast, float("nan"))}
    if with_plain:
        K = matched_hebbian(xi, J)
        plain = min_wall_time(lambda: [plain_hebbian_spectra(A) for A in (J, K)], 1)
        out["plain"] = Timing("numpy.linalg, all", plain, float("nan"))
    return out


def _scoring_inputs(P, steps, seed=0):
    """What an evaluation's recorder sees at the paper's shapes (28 x 28 images, 2 x 2
    patches, d = 8): clean images, the masked task's pixel mask, a target image, and two
    batches of states to alternate over ``steps`` steps."""
    from spinsa import PatchEmbedding
    from spinsa.tasks import masked_count, pixel_mask

    rng = np.random.default_rng(seed)
    emb = PatchEmbedding(image_shape=(28, 28), patch=2, d=8)
    clean = rng.random((P, 28, 28)).astype(np.float32)
    order = np.argsort(rng.random((P, emb.n_tokens)), axis=1)[:, : masked_count(0.3, 196)]
    mask = np.zeros((P, emb.n_tokens), dtype=bool)
    np.put_along_axis(mask, order, True, axis=1)
    x = emb.encode(clean) + 0.2 * rng.standard_normal((2, P, emb.n_tokens, emb.d))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    return emb, clean, pixel_mask(mask, emb), clean.mean(axis=0), x.astype(np.float32)


def bench_evaluation(P=1000, steps=20, repeat=3, with_plain=True):
    """An evaluation's per-step decoding and scoring (errors on all, masked and visible
    pixels, correlation with the mean image, step size) over ``steps`` steps of P images:
    :class:`spinsa.tasks.StateScorer`'s compiled pass against its numpy backend (the
    former recorder). Decoded images are kept at t = 0 and t = T, as the recorder does."""
    from spinsa.tasks import StateScorer

    emb, clean, pmask, target, x = _scoring_inputs(P, steps)

    def record(backend):
        scorer = StateScorer(emb, clean, pmask, target, backend=backend)
        scorer(x[0], decode=True)
        for t in range(1, steps + 1):
            scorer(x[t % 2], x[(t - 1) % 2], decode=t == steps)

    StateScorer(emb, clean[:8], pmask[:8], target)(x[0, :8], x[1, :8])  # compile
    fast = min_wall_time(lambda: record("numba"), repeat)
    out = {"fast": Timing("StateScorer (numba)", fast, float("nan"))}
    out["images_per_s"] = P * (steps + 1) / fast
    if with_plain:
        plain = min_wall_time(lambda: record("numpy"), 1)
        out["plain"] = Timing("numpy (decode, score)", plain, float("nan"))
        out["plain_images_per_s"] = P * (steps + 1) / plain
        a = StateScorer(emb, clean, pmask, target)(x[1], x[0], decode=True)
        b = StateScorer(emb, clean, pmask, target, backend="numpy")(x[1], x[0], decode=True)
        out["max_abs_diff"] = max(
            float(np.nanmax(np.abs(np.asarray(u, np.float64) - v)))
            for u, v in [(a.decoded, b.decoded), (a.correlation, b.correlation),
                         (a.step, b.step), *((getattr(a.errors, k), getattr(b.errors, k))
                                             for k in ("all", "masked", "visible"))]
        )  # fmt: skip
    return out


BENCHMARKS = (
    "dynamics", "async", "damico", "objective", "cd", "gibbs", "hebbian", "evaluation",
    "baseline", "torch-dynamics",
)  # fmt: skip


def run_benchmarks(only, quick: bool, plain: bool, device: str = "cpu") -> list[tuple]:
    """Run the benchmarks named in ``only`` (of :data:`BENCHMARKS`) at the issue tracker's
    sizes (smaller with ``quick``), on ``"cpu"`` or the torch paths on ``"cuda"``.

    Parameters
    ----------
    only : collection of str
        Names of :data:`BENCHMARKS` to run.
    quick : bool
        Smaller sizes (a smoke run).
    plain : bool
        Time the plain implementations beside the fast ones.
    device : {"cpu", "cuda"}
        Where the torch paths run.

    Returns
    -------
    list of (title, results, name of the ratio)
        ``results`` as the ``bench_*`` functions return them.
    """
    P, T = (256, 5) if quick else (1000, 20)
    sizes = [2048] if quick else [2048, 10_000]
    runs = []
    if device == "cuda":
        if "dynamics" in only:
            title = f"dynamics on the GPU: N=196, d=8, P={P}, T={T}, float32"
            runs.append((title, bench_dynamics_device(P=P, steps=T), "ratio"))
        for Po in sizes if "objective" in only else []:
            title = f"objective + gradient on the GPU: N=196, d=8, P={Po}, float32"
            runs.append((title, bench_objective_device(P=Po, with_plain=plain), "ratio"))
        if "baseline" in only:
            runs.extend(_baseline_runs(quick, plain, device))
        if "torch-dynamics" in only:
            runs.extend(torch_dynamics_runs(quick, plain, device))
        return runs
    if "dynamics" in only:
        title = f"dynamics: N=196, d=8, P={P}, T={T}, float32"
        runs.append((title, bench_dynamics(P=P, steps=T, with_plain=plain), "ratio"))
        if not quick:  # small calls: the fixed cost of a call weighs most here
            title = "dynamics, a small call: N=196, d=8, P=256, T=5, float32"
            runs.append((title, bench_dynamics(P=256, steps=5, with_plain=plain), "ratio"))
    if "async" in only:
        Pa = 64 if quick else 256
        title = f"asynchronous sweep: N=196, d=8, P={Pa}, float32 (plain: float64)"
        runs.append((title, bench_async(P=Pa, with_plain=plain), "ratio"))
    if "damico" in only:
        title = f"the notebook's dynamics against the design's: N=196, d=8, P={P}, T={T}"
        runs.append((title, bench_damico(P=P, steps=T), "notebook / design"))
    for Po in sizes if "objective" in only else []:
        title = f"objective + gradient: N=196, d=8, P={Po}, float32"
        runs.append((title, bench_objective(P=Po, with_plain=plain), "ratio"))
    if "cd" in only:
        Pc = 2048 if quick else 10_000
        title = f"a CD-1 epoch against a PL epoch: N=196, d=8, P={Pc}, batch 256, float32"
        runs.append((title, bench_cd_epoch(P=Pc), "CD-1 / PL"))
    if "gibbs" in only:
        Pg, sweeps = (64, 3) if quick else (256, 10)
        title = f"a Gibbs sweep against a dynamics step: N=196, d=8, P={Pg} chains"
        runs.append((title, bench_gibbs(P=Pg, sweeps=sweeps), "sweep / step"))
    if "hebbian" in only:
        Nh = 100 if quick else 196
        title = f"compare_with_hebbian: N={Nh}, d=8, P=1000, random J"
        runs.append((title, bench_hebbian(N=Nh, with_plain=plain), "ratio"))
    if "evaluation" in only:
        title = f"an evaluation's decoding and scoring: 28x28, N=196, d=8, P={P}, T={T}, float32"
        runs.append((title, bench_evaluation(P=P, steps=T, with_plain=plain), "ratio"))
    if "baseline" in only:
        runs.extend(_baseline_runs(quick, plain))
    if "torch-dynamics" in only:
        runs.extend(torch_dynamics_runs(quick, plain))
    return runs


def _baseline_runs(quick: bool, plain: bool, device: str = "cpu") -> list[tuple]:
    """The training steps of the ViT and the recycled block at the default width (128,
    batch 128; width 32, batch 64 with ``quick``), torch's threads as they are."""
    torch = import_torch()
    width, batch, n_steps = (32, 64, 2) if quick else (128, 128, 4)
    if device == "cuda":  # a GPU's step is milliseconds: more of them, the paper's batch
        batch, n_steps = (64, 4) if quick else (256, 20)
    where = "on the GPU" if device == "cuda" else f"{torch.get_num_threads()} torch threads"
    runs = []
    for model in ("vit", "recycled"):
        title = (
            f"baseline training step: {model}, width {width}, batch {batch}, {n_steps} steps, "
            f"masked, float32, {where}"
        )
        res = bench_baseline_step(model, width, batch, n_steps, with_plain=plain, device=device)
        runs.append((title, res, "ratio"))
    return runs


def speed_targets(runs, peak: float | None = None) -> list[tuple[str, bool]]:
    """The issue tracker's speed targets against the figures of :func:`run_benchmarks`.

    Parameters
    ----------
    runs : list of (title, results, kind)
        As :func:`run_benchmarks` returns them.
    peak : float, optional
        The matmul peak of this run (GFLOP/s): with it, the targets in fractions of the peak
        (useful flops) too.

    Returns
    -------
    list of (str, bool)
        A line per target and whether it is met.
    """
    out = []

    def check(text, value, ok, unit):
        out.append((f"{text}: {value:.3g}{unit} -- {'met' if ok else 'NOT met'}", bool(ok)))

    def of_peak(text, res, target):
        if peak:
            share = 100 * res["fast"].gflops / peak
            check(f"{text} >= {target} % of the matmul peak", share, share >= target, " %")

    for title, res, _ in runs:
        if title.startswith("dynamics:"):
            of_peak("dynamics", res, 60)
        elif title.startswith("objective") and "P=10000" in title:
            of_peak("objective + gradient at P = 10,000", res, 55)
        if "plain" not in res:
            continue
        ratio = res["plain"].seconds / res["fast"].seconds
        if title.startswith("dynamics, a small call"):
            check("dynamics at P = 256, T = 5 >= 10x plain torch", ratio, ratio >= 10, "x")
        elif title.startswith("dynamics"):
            check("dynamics >= 20x plain torch", ratio, ratio >= 20, "x")
        elif title.startswith("asynchronous"):
            check("asynchronous sweep >= 5x a plain numpy loop", ratio, ratio >= 5, "x")
        elif title.startswith("the notebook"):
            check("notebook's dynamics within 25 % of the design's", ratio, ratio <= 1.25, "x")
        elif title.startswith("baseline training step"):
            check(f"{title.split(',')[0]} >= 5x the plain loop", ratio, ratio >= 5, "x")
        elif title.startswith("compare_with_hebbian") and "N=196" in title:
            fast = res["fast"].seconds
            check("compare_with_hebbian at N = 196, d = 8 <= 10 s", fast, fast <= 10, " s")
        elif title.startswith("a CD-1 epoch"):
            check("a CD-1 epoch <= 3x a PL epoch, same batch size", ratio, ratio <= 3, "x")
        elif title.startswith("a Gibbs sweep"):
            check("a Gibbs sweep <= 3x a synchronous dynamics step", ratio, ratio <= 3, "x")
        elif title.startswith("objective") and "P=10000" in title:
            fast = res["fast"].seconds
            check("objective + gradient at P = 10,000 <= 1.6 s", fast, fast <= 1.6, " s")
            check("objective + gradient at P = 10,000 >= 25x autograd", ratio, ratio >= 25, "x")
    return out


def device_description(device: str) -> str:
    """``"cpu"``, or the GPU's name and torch's version for ``"cuda"``."""
    if device != "cuda":
        return "cpu"
    torch = import_torch()
    return f"cuda: {torch.cuda.get_device_name()} (torch {torch.__version__})"


# ------------------------------------------------------------------ a torch device
def _on_device(torch, device, fn):
    """``fn`` followed by a device synchronisation, so that the clock sees the work."""

    def call():
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return call


def bench_objective_device(P=2048, N=196, d=8, device="cuda", repeat=3, with_plain=True):
    """The torch closed-form objective + gradient (the fit's torch backend) on ``device``,
    against torch autograd on the same device; the gradient checked against numba's."""
    from spinsa._torch import resolve_device
    from spinsa.fit.torch_backend import autograd_loss_and_grad, torch_loss_and_grad
    from spinsa.kernels import objective

    torch = import_torch()
    dev = resolve_device(device)
    xi, J = _objective_inputs(P, N, d)
    x, Jt = torch.as_tensor(xi, device=dev), torch.as_tensor(J, device=dev)
    flops = objective_flops(P, N, d)
    fast_fn = _on_device(torch, dev, lambda: torch_loss_and_grad(x, Jt, 5.0))
    fast_fn()
    fast = min_wall_time(fast_fn, repeat)
    out = {"fast": timing(f"torch closed form ({dev.type})", fast, flops, P, N, d)}
    if with_plain:
        plain_fn = _on_device(torch, dev, lambda: autograd_loss_and_grad(x, Jt, 5.0))
        plain_fn()
        plain = min_wall_time(plain_fn, 1)
        out["plain"] = timing(f"torch autograd ({dev.type})", plain, flops, P, N, d)
    ref = np.empty_like(J)
    objective.loss_and_grad(xi, J, 5.0, ref)
    g = torch_loss_and_grad(x, Jt, 5.0)[1].cpu().numpy()
    out["max_rel_diff"] = float(np.abs(g - ref).max() / np.abs(ref).max())
    return out


def bench_dynamics_device(P=1000, N=196, d=8, steps=20, device="cuda", repeat=2):
    """The plain torch dynamics on ``device`` (spinsa has no fused GPU dynamics kernel)."""
    from spinsa._torch import resolve_device

    torch = import_torch()
    dev = resolve_device(device)
    x0, J = _spins_and_couplings(P, N, d)
    flops = dynamics_flops(P, N, d, steps)
    fn = _on_device(torch, dev, lambda: plain_torch_run(x0, J, 1.0, steps, device=dev))
    _on_device(torch, dev, lambda: plain_torch_run(x0[:8], J, 1.0, 1, device=dev))()
    t = min_wall_time(fn, repeat)
    return {"fast": timing(f"plain torch ({dev.type})", t, flops, P, N, d, steps)}


# ------------------------------------------------------------ a baseline training step
def baseline_forward_flops(config, n_iter: int) -> float:
    """Multiply-add flops of one image through a baseline's forward pass (matmuls only).

    Per token, with D the width, a = patch² pixels, h the MLP's hidden width, N tokens and
    D_v the value projection's width (2D with SwiGLU values, else D):
    F_in and F_out 2aD each; per block applied, 2D(2D + D_v) for q, k, v, 2D² for the output
    projection, 4Dh for the MLP, and 4ND for the scores q k^T and the weighted sum of values.
    The blocks applied are ``n_iter`` (the recycled block's τ) or the ViT's ``n_blocks``.
    LayerNorm, GELU, the softmax and the optimiser are not counted.
    """
    from spinsa.baselines.models import mlp_hidden_width

    D, N, a = config.width, config.n_tokens, config.patch**2
    h = mlp_hidden_width(D, config.mlp_ratio, config.value_activation)
    value = 2 * D if config.value_activation == "swiglu" else D
    blocks = config.n_blocks if config.model == "vit" else n_iter
    per_block = 2 * D * (2 * D + value) + 2 * D * D + 4 * D * h + 4 * N * D
    return float(N * (4 * a * D + blocks * per_block))


def plain_baseline_forward(model, images, n_iter: int):
    """The baselines' forward written out in plain torch: the old code path's reference.

    Patches, F_in and the positions, then per block u = z + W_o softmax(q k^T / sqrt(D/H)) v
    (the attention as an explicit softmax of the scores) and z' = u + W_2 GELU(W_1 LN2(u)),
    then F_out(z - e). Serial blocks, no value activation, a linear head (the defaults).

    Parameters
    ----------
    model : RecycledBlock or ViT
        Its weights are used.
    images : torch.Tensor, shape (B, H, W)
    n_iter : int
        τ of the recycled block (ignored by the ViT).

    Returns
    -------
    torch.Tensor, shape (B, H, W)
        The training output, not clipped.
    """
    torch = import_torch()
    F = torch.nn.functional
    from spinsa.baselines.models import ViT

    blocks = list(model.blocks) if isinstance(model, ViT) else [model.block] * n_iter
    if model.output != "clip" or any(
        b.parallel or b.attn.value_activation != "none" for b in blocks
    ):
        raise ValueError("the plain forward covers serial blocks, no value activation, clip")
    (B, H, W), p, D = images.shape, model.patch, model.width
    x = images.reshape(B, H // p, p, W // p, p).permute(0, 1, 3, 2, 4).reshape(B, -1, p * p)
    z = x @ model.f_in.weight.T + model.f_in.bias + model.positions
    for blk in blocks:
        attn, heads = blk.attn, blk.attn.heads
        h = F.layer_norm(z, (D,), blk.norm1.weight, blk.norm1.bias)
        q, k, v = (h @ attn.qkv.weight.T + attn.qkv.bias).split(D, dim=-1)
        q, k, v = (t.reshape(B, -1, heads, D // heads).transpose(1, 2) for t in (q, k, v))
        weights = torch.softmax(q @ k.transpose(-1, -2) / (D / heads) ** 0.5, dim=-1)
        y = (weights @ v).transpose(1, 2).reshape(B, -1, D)
        u = z + y @ attn.proj.weight.T + attn.proj.bias
        h = F.layer_norm(u, (D,), blk.norm2.weight, blk.norm2.bias)
        hidden = F.gelu(h @ blk.mlp.fc1.weight.T + blk.mlp.fc1.bias)
        z = u + hidden @ blk.mlp.fc2.weight.T + blk.mlp.fc2.bias
    y = (z - model.positions) @ model.f_out.weight.T + model.f_out.bias
    return y.reshape(B, H // p, W // p, p, p).permute(0, 1, 3, 2, 4).reshape(B, H, W)


def plain_baseline_training(config, images, task: str = "masked"):
    """One epoch of a baseline written as a plain torch loop: the old code path.

    The same draws as :func:`spinsa.baselines.train_baseline` (initial weights, order, τ,
    masks or noise from the same seeds, in the same order) and the same maths, done the plain
    way: :func:`plain_baseline_forward`, torch's default CPU AdamW (a loop over the tensors)
    with the trainer's parameter groups and schedule, and gradient clipping tensor by tensor.

    Parameters
    ----------
    config : BaselineConfig
        Its ``device`` is used; one epoch is run whatever ``config.epochs``.
    images : ndarray, shape (P, H, W), float32
    task : {"masked", "denoise"}

    Returns
    -------
    losses, taus : ndarray, shape (n_steps,)
        The loss (float64) and τ (0 for the ViT) of every step.
    """
    import math

    from spinsa._torch import resolve_device
    from spinsa.baselines.models import build_model
    from spinsa.baselines.train import lr_factor, mask_batch, noise_batch, sample_tau
    from spinsa.embedding import PatchEmbedding

    torch = import_torch()
    dev = resolve_device(config.device)
    model = build_model(config).to(dev).train()
    named = list(model.named_parameters())
    groups = [
        {"params": [p for _, p in named if p.ndim >= 2], "weight_decay": config.weight_decay},
        {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=config.lr, foreach=False)
    per_epoch = math.ceil(len(images) / config.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(config, s, per_epoch)
    )
    grid = PatchEmbedding(image_shape=config.image_shape, patch=config.patch)
    index_map = torch.from_numpy(grid.token_index_map()).to(dev)
    data, generator = torch.from_numpy(images).to(dev), torch.Generator().manual_seed(config.seed)
    losses, taus = [], []
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(config.seed + 1)
        perm = torch.randperm(len(images), generator=generator).to(dev)
        for i in range(0, len(images), config.batch_size):
            clean = data[perm[i : i + config.batch_size]]
            if task == "masked":
                inputs = mask_batch(clean, config.n_masked, index_map, grid.n_tokens, None)[0]
            else:
                inputs = noise_batch(clean, config.noise_variance, None)
            tau = 0
            if config.model == "recycled":
                tau = sample_tau(generator, config.tau_min, config.tau_max)
            loss = torch.nn.functional.mse_loss(plain_baseline_forward(model, inputs, tau), clean)
            optimizer.zero_grad()
            loss.backward()
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip, foreach=False)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            taus.append(tau)
    return np.array(losses, dtype=np.float64), np.array(taus, dtype=np.int64)


def bench_baseline_step(
    model="vit", width=128, batch=128, n_steps=4, repeat=2, with_plain=True, device="cpu"
):
    """Training steps of a baseline (forward, backward, clipping, AdamW) on the masked task:
    :func:`spinsa.baselines.train_baseline` against :func:`plain_baseline_training`.

    Both run one epoch of ``n_steps`` steps on the same ``n_steps * batch`` random images,
    with the same draws; the times are of the epochs alone (the trainer's ``epoch_seconds``),
    the best of ``repeat`` (the plain loop: one, after a warm-up of one step). Flops per
    image: 3 × :func:`baseline_forward_flops` (the backward pass costs twice the forward), at
    the τ each step drew. Also returns images/s and the largest relative difference of the
    two step losses. On ``device="cuda"`` both run there (the plain loop reads every loss
    back at every step, as plain loops do).
    """
    from spinsa.baselines import BaselineConfig, train_baseline

    config = BaselineConfig(  # no validation split: every image is trained on, as in the loop
        model=model,
        width=width,
        batch_size=batch,
        epochs=1,
        device=device,
        progress=False,
        val_fraction=0.0,
    )
    images = np.random.default_rng(0).random((n_steps * batch, 28, 28), dtype=np.float32)
    train_baseline(config, images[:batch], "masked")  # warm-up: torch's first-call set-up
    seconds, history = np.inf, None
    for _ in range(repeat):
        history = train_baseline(config, images, "masked")[1]
        seconds = min(seconds, float(history.epoch_seconds[0]))
    taus = history.step_tau
    flops = 3 * batch * sum(baseline_forward_flops(config, int(t)) for t in taus)
    n = len(images)
    out = {"fast": Timing("train_baseline", seconds, flops / seconds / 1e9)}
    out["images_per_s"] = n / seconds
    if with_plain:
        plain_baseline_training(config, images[:batch], "masked")  # its own warm-up
        t0 = time.perf_counter()
        losses, _ = plain_baseline_training(config, images, "masked")
        plain = time.perf_counter() - t0
        out["plain"] = Timing("plain torch loop", plain, flops / plain / 1e9)
        out["plain_images_per_s"] = n / plain
        out["max_rel_diff"] = float(np.max(np.abs(history.step_loss - losses) / np.abs(losses)))
    return out


# ------------------------------------------------------------- the dynamics in torch
def bench_torch_dynamics(P=1000, N=196, d=8, steps=20, device="cpu", repeat=2, with_plain=True):
    """``spinsa.run(..., device=device)`` (the torch dynamics, :mod:`spinsa._torch_dynamics`)
    against, on CUDA, :func:`plain_torch_run` on the GPU, and on the CPU the numba kernels
    (``spinsa.run``); the final states compared with numba's on 64 samples."""
    import spinsa

    x0, J = _spins_and_couplings(P, N, d)
    flops = dynamics_flops(P, N, d, steps)
    spinsa.run(x0[:8], J, 1.0, 1, device=device)  # CUDA context, kernels, caches
    fast = min_wall_time(
        lambda: spinsa.run(x0, J, 1.0, steps, record_every=steps, device=device), repeat
    )
    out = {"fast": timing(f"spinsa.run (torch, {device})", fast, flops, P, N, d, steps)}
    if with_plain and device != "cpu":
        torch = import_torch()
        dev = torch.device(device)
        fn = _on_device(torch, dev, lambda: plain_torch_run(x0, J, 1.0, steps, device=dev))
        fn()
        out["plain"] = timing(
            f"plain torch ({device})", min_wall_time(fn, 1), flops, P, N, d, steps
        )
    elif with_plain:  # on the CPU the numba kernels are the reference: the ratio is torch's cost
        spinsa.run(x0[:8], J, 1.0, 1)
        numba = min_wall_time(lambda: spinsa.run(x0, J, 1.0, steps, record_every=steps), repeat)
        out["plain"] = timing("spinsa.run (numba)", numba, flops, P, N, d, steps)
    a = spinsa.run(x0[:64], J, 1.0, 3).final
    b = spinsa.run(x0[:64], J, 1.0, 3, device=device).final
    out["max_abs_diff"] = float(np.abs(a - b).max())
    return out


def torch_dynamics_runs(quick: bool, plain: bool, device: str = "cpu") -> list[tuple]:
    """The torch dynamics at the benchmark's size; on CUDA also at the issue's GPU target,
    P = 10,000, T = 100 (without the plain loop, minutes there)."""
    P, T = (256, 5) if quick else (1000, 20)
    if device == "cpu":  # torch there is for checks, minutes at the GPU's sizes: the small case
        P, T = 256, 5
        title = f"torch dynamics on the CPU against numba: N=196, d=8, P={P}, T={T}, float32"
        res = bench_torch_dynamics(P=P, steps=T, repeat=1, with_plain=plain)
        return [(title, res, "numba / torch")]
    title = f"torch dynamics on the GPU: N=196, d=8, P={P}, T={T}, float32"
    runs = [(title, bench_torch_dynamics(P=P, steps=T, device=device, with_plain=plain), "ratio")]
    if not quick:
        title = "torch dynamics on the GPU: N=196, d=8, P=10000, T=100, float32"
        res = bench_torch_dynamics(P=10_000, steps=100, device=device, repeat=1, with_plain=False)
        runs.append((title, res, "ratio"))
    return runs


def gpu_targets(runs, peak: float) -> list[tuple[str, bool]]:
    """The issue tracker's GPU targets (the torch dynamics at P = 10,000, T = 100: <= 5 s and
    >= 30 % of the GPU's float32 matmul ``peak``, in useful flops): (line, met)."""
    out = []
    for title, res, _ in runs:
        if title.startswith("torch dynamics on the GPU") and "P=10000" in title:
            fast = res["fast"]
            ok = fast.seconds <= 5
            out.append((f"dynamics P = 10,000, T = 100 <= 5 s: {fast.seconds:.3g} s -- "
                        f"{'met' if ok else 'NOT met'}", ok))  # fmt: skip
            share = fast.gflops / peak
            ok = share >= 0.3
            out.append((f"dynamics >= 30 % of the matmul peak: {100 * share:.3g} % -- "
                        f"{'met' if ok else 'NOT met'}", ok))  # fmt: skip
    return out
