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
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from spinsa._progress import peak_rss_mb
from spinsa._torch import import_torch


@dataclass(frozen=True)
class Timing:
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

    from spinsa.kernels._numba import FASTMATH

    named = bool(numba.config.CPU_NAME)
    cpu = numba.config.CPU_NAME or llvm.get_host_cpu_name()
    if numba.config.CPU_FEATURES is not None:
        enabled = {f[1:] for f in numba.config.CPU_FEATURES.split(",") if f.startswith("+")}
    else:
        enabled = {name for name, on in llvm.get_host_cpu_features().items() if on}
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


def matmul_peak(n: int = 2048, repeat: int = 5, device: str = "cpu") -> float:
    """float32 GFLOP/s of an n x n matmul: the machine's practical peak (numpy's BLAS on the
    CPU; torch on ``device="cuda"``, 8192 x 8192, TF32 off as torch's default)."""
    if device == "cuda":
        torch = import_torch()
        dev = torch.device("cuda")
        a = torch.randn(8192, 8192, device=dev)
        mm = _on_device(torch, dev, lambda: a @ a)
        mm()
        return 2 * 8192**3 / min_wall_time(mm, repeat) / 1e9
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    return 2 * n**3 / min_wall_time(lambda: a @ b, repeat) / 1e9


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


def bench_dynamics(P=1000, N=196, d=8, steps=20, repeat=2, with_plain=True):
    """``spinsa.run`` against :func:`plain_torch_run`; returns the timings and peak memory."""
    import spinsa

    x0, J = _spins_and_couplings(P, N, d)
    flops = dynamics_flops(P, N, d, steps)
    spinsa.run(x0[:8], J, 1.0, 1)  # compile (or load from the cache)
    rss0 = peak_rss_mb()
    fast = min_wall_time(lambda: spinsa.run(x0, J, 1.0, steps, record_every=steps), repeat)
    extra_mb = peak_rss_mb() - rss0
    out = {"fast": timing("spinsa.run (numba)", fast, flops, P, N, d, steps), "extra_mb": extra_mb}
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

    pl, cd = epoch(FitConfig(lam=5.0)), epoch(FitConfig(lam=5.0, method="cd", k=k))
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


def bench_objective(P=2048, N=196, d=8, repeat=3, with_plain=True):
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


BENCHMARKS = ("dynamics", "async", "damico", "objective", "cd", "hebbian")


def run_benchmarks(only, quick: bool, plain: bool, device: str = "cpu") -> list[tuple]:
    """Run the benchmarks named in ``only`` (of :data:`BENCHMARKS`) at the issue tracker's
    sizes (smaller with ``quick``), on ``"cpu"`` or the torch paths on ``"cuda"``.

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
        return runs
    if "dynamics" in only:
        title = f"dynamics: N=196, d=8, P={P}, T={T}, float32"
        runs.append((title, bench_dynamics(P=P, steps=T, with_plain=plain), "ratio"))
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
    if "hebbian" in only:
        Nh = 100 if quick else 196
        title = f"compare_with_hebbian: N={Nh}, d=8, P=1000, random J"
        runs.append((title, bench_hebbian(N=Nh, with_plain=plain), "ratio"))
    return runs


def speed_targets(runs) -> list[tuple[str, bool]]:
    """The issue tracker's speed targets against the figures of :func:`run_benchmarks`:
    (line, met)."""
    out = []

    def check(text, value, ok, unit):
        out.append((f"{text}: {value:.3g}{unit} -- {'met' if ok else 'NOT met'}", bool(ok)))

    for title, res, _ in runs:
        if "plain" not in res:
            continue
        ratio = res["plain"].seconds / res["fast"].seconds
        if title.startswith("dynamics"):
            check("dynamics >= 20x plain torch", ratio, ratio >= 20, "x")
        elif title.startswith("asynchronous"):
            check("asynchronous sweep >= 5x a plain numpy loop", ratio, ratio >= 5, "x")
        elif title.startswith("the notebook"):
            check("notebook's dynamics within 25 % of the design's", ratio, ratio <= 1.25, "x")
        elif title.startswith("compare_with_hebbian") and "N=196" in title:
            fast = res["fast"].seconds
            check("compare_with_hebbian at N = 196, d = 8 <= 10 s", fast, fast <= 10, " s")
        elif title.startswith("a CD-1 epoch"):
            check("a CD-1 epoch <= 3x a PL epoch, same batch size", ratio, ratio <= 3, "x")
        elif title.startswith("objective") and "P=10000" in title:
            fast = res["fast"].seconds
            check("objective + gradient at P = 10,000 <= 1.6 s", fast, fast <= 1.6, " s")
            check("objective + gradient at P = 10,000 >= 25x autograd", ratio, ratio >= 25, "x")
    return out


def device_description(device: str) -> str:
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
