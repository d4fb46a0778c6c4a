"""The float64 kernels against the plain-numpy formulas, for a run under another numba target.

``python tests/simd_check.py`` prints one JSON object: the worst relative error of every
kernel against its plain formula, the vector width numba compiled for, and whether the
machine code of the dynamics' and the objective's pair loops holds 512-bit registers.
``tests/test_kernels_simd.py`` runs it in a subprocess whose environment restricts numba's
target (``NUMBA_CPU_NAME``, ``NUMBA_CPU_FEATURES``, its own ``NUMBA_CACHE_DIR``), so that the
code generated for 256-bit vectors is checked on any x86 machine, whatever its own width.

Shapes are small (compile time dominates) but take every path: full tiles of 128 lanes
with d = 8 (the written-out fast path), the generic online softmax, two chunks of the
objective, clamps, a masked token.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
from reference import attention as ref_attention
from reference import local_fields as ref_fields
from reference import pl_loss_and_grad as ref_pl
from reference import random_system
from reference import scores as ref_scores
from reference import site_energies as ref_energies
from reference import step as ref_step


def rel_error(got, want) -> float:
    """max |got - want| / (max |want| + tiny): one number per comparison, scale-free."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return math.inf
    return float(np.abs(got - want).max() / (np.abs(want).max() + 1e-300))


def plain_async_sweep(x, J, lam, order, gamma=1.0):
    """Site by site in ``order``, each with the field of the current state (sphere norm)."""
    x = x.copy()
    for i in order:
        h = ref_fields(x, J, lam)[:, i]
        u = h + gamma * x[:, i]
        x[:, i] = u / np.linalg.norm(u, axis=1, keepdims=True)
    return x


def clamped_fields_and_energies(x, J, lam, clamp):
    """Fields and site energies with the scores clamped from above, min(s, clamp), before lam."""
    N = x.shape[1]
    s = lam * np.minimum(ref_scores(x, J), clamp)
    s[:, np.arange(N), np.arange(N)] = -np.inf
    top = s.max(axis=2, keepdims=True)
    w = np.exp(s - top)
    z = w.sum(axis=2, keepdims=True)
    h = np.einsum("pij,ijab,pjb->pia", w / z, J, x)
    return h, -(top + np.log(z))[..., 0] / lam


def dynamics_errors(rng) -> dict:
    from spinsa.kernels import dynamics as k

    x, J = random_system(rng, P=130, N=6, d=8, unit=False)  # two tiles, the second padded
    x[5, 2] = 0.0  # a masked token
    lam, clamp = 1.3, 0.4
    Xt = k.to_tiles(x)
    assert k.unroll_tag(Xt), "the fast path must apply"
    out = {}
    for name, unroll in (("fast", k.unroll_tag(Xt)), ("generic", ())):
        for c, tag in ((np.inf, f"{name} path"), (clamp, f"{name} path, clamped")):
            H = np.empty_like(Xt)
            Et = np.empty(Xt.shape[:2] + Xt.shape[3:])
            k._sweep(Xt, J, k.block_bounds(J), lam, c, 0.0, 0, False, True, H, Et, unroll)
            h, e = clamped_fields_and_energies(x, J, lam, c)
            out[f"fields, {tag}"] = rel_error(k.from_tiles(H, len(x)), h)
            out[f"energies, {tag}"] = rel_error(k.energies_from_tiles(Et, len(x)), e)
            k._sweep(Xt, J, k.block_bounds(J), lam, c, 0.0, 0, False, False, H, Et, unroll)
            out[f"energies alone, {tag}"] = rel_error(k.energies_from_tiles(Et, len(x)), e)
    x5, J5 = random_system(rng, P=130, N=5, d=5, unit=False)  # row blocks of 4 and 1 (AVX2)
    X5 = k.to_tiles(x5)
    H5, E5 = np.empty_like(X5), np.empty(X5.shape[:2] + X5.shape[3:])
    k._sweep(X5, J5, k.block_bounds(J5), lam, clamp, 0.0, 0, False, True, H5, E5, k.unroll_tag(X5))
    h, e = clamped_fields_and_energies(x5, J5, lam, clamp)
    out["fields, fast path, d = 5"] = rel_error(k.from_tiles(H5, len(x5)), h)
    out["energies, fast path, d = 5"] = rel_error(k.energies_from_tiles(E5, len(x5)), e)
    xu, _ = random_system(rng, P=130, N=6, d=8)
    for norm, code in (("sphere", 1), ("layernorm", 2)):
        Xu = k.to_tiles(xu)
        new = np.empty_like(Xu)
        Et = np.empty(Xu.shape[:2] + Xu.shape[3:])
        k.sweep(Xu, J, lam, np.inf, 0.7, code, True, new, Et)
        want = ref_step(xu, J, lam, 0.7, norm)
        out[f"step, {norm}"] = rel_error(k.from_tiles(new, 130), want)
    order = rng.permutation(6).astype(np.int64)
    Xa = k.to_tiles(xu[:20])
    k.async_sweep(Xa, J, lam, np.inf, 1.0, 1, order)
    out["asynchronous sweep"] = rel_error(
        k.from_tiles(Xa, 20), plain_async_sweep(xu[:20], J, lam, order)
    )
    A = np.empty((20, 6, 6))
    k.attention(xu[:20], J, lam, A)
    out["attention"] = rel_error(A, ref_attention(xu[:20], J, lam))
    return out


def objective_errors(rng) -> dict:
    from spinsa.kernels import objective as ko

    xi, J = random_system(rng, P=ko.CHUNK + 9, N=5, d=8)  # two chunks, the last one partial
    lam = 3.0
    grad = np.empty_like(J)
    loss = ko.loss_and_grad(xi, J, lam, grad)
    ref_loss, ref_grad = ref_pl(xi, J, lam)
    out = {"objective": rel_error(loss, ref_loss), "gradient": rel_error(grad, ref_grad)}
    rows = np.empty_like(J)
    row_loss = sum(ko.row_loss_and_grad(xi, J[i], lam, i, rows[i]) for i in range(5))
    out["objective, row by row"] = rel_error(row_loss, ref_loss)
    out["gradient, row by row"] = rel_error(rows, ref_grad)
    return out


def xoshiro256ss(state, n) -> list[int]:
    """The reference generator (Blackman and Vigna) in Python integers."""
    mask = (1 << 64) - 1
    s = [int(v) for v in state]

    def rotl(v, r):
        return ((v << r) | (v >> (64 - r))) & mask

    outs = []
    for _ in range(n):
        outs.append(rotl((s[1] * 5) & mask, 7) * 9 & mask)
        t = (s[1] << 17) & mask
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
    return outs


def sampling_errors(rng) -> dict:
    from scipy.special import ive

    from spinsa.kernels import sampling as ks
    from spinsa.kernels import vmf as kv

    _, J = random_system(rng, P=1, N=7, d=8)
    x, _ = random_system(rng, P=1, N=7, d=8)
    x = x[0]
    out = {}
    G = ks.gram_blocks(J)
    Q = np.empty((36, 7))
    for j in range(7):
        ks.pair_products(x, j, Q)
    norms2 = (np.einsum("ijab,jb->ija", J, x) ** 2).sum(axis=2)
    out["Gibbs: field norms from Gram blocks"] = rel_error(np.einsum("ipj,pj->ij", G, Q), norms2)
    S, lse = np.empty((7, 7)), np.empty(7)
    ks._scores(x, J, 1.7, S, lse)
    s = ref_scores(x[None], J)[0]
    np.fill_diagonal(s, 0.0)
    out["Metropolis: scores"] = rel_error(S, s)
    out["Metropolis: log-sum-exp"] = rel_error(lse, -1.7 * ref_energies(x[None], J, 1.7)[0])
    state = np.array([1, 2, 3, 2**63 + 5], np.uint64)
    want = xoshiro256ss(state, 50)
    got = [int(ks.next_u64(state)) for _ in range(50)]
    out["generator stream"] = 0.0 if got == want else 1.0
    kappa = np.linspace(0.25, 60.0, 200)
    logz, _ = kv.log_partition_and_mean_array(kappa, 8.0)
    nu = 3.0  # d / 2 - 1
    plain = 4.0 * math.log(2 * math.pi) + np.log(ive(nu, kappa)) + kappa - nu * np.log(kappa)
    out["vMF log partition"] = rel_error(logz, plain)
    return out


def holds_512_bit_registers(dispatcher) -> bool:
    """Whether any compiled signature of ``dispatcher`` uses a zmm register."""
    return any(re.search(r"%zmm\d", asm) for asm in dispatcher.inspect_asm().values())


def pairs_compiled(dispatcher) -> int | None:
    """How many pairs the dynamics' block was compiled for: the largest length of the
    uint64 tuples of offsets in its mangled name (``UniTupleIyLi<n>EE``), in the machine
    code of a freshly compiled ``dispatcher`` (None if no such call is found)."""
    lengths = [
        int(n)
        for asm in dispatcher.inspect_asm().values()
        for n in re.findall(r"UniTupleIyLi(\d+)EE", asm)
    ]
    return max(lengths, default=None)


def main() -> dict:
    from spinsa.bench import compile_target
    from spinsa.kernels import dynamics as k
    from spinsa.kernels import objective as ko
    from spinsa.kernels._numba import vector_registers

    rng = np.random.default_rng(27)
    errors = {**dynamics_errors(rng), **objective_errors(rng), **sampling_errors(rng)}
    return {
        "errors": errors,
        "target": compile_target(),
        "vector registers": vector_registers(),  # the objective's blocking follows them
        "pairs per block": pairs_compiled(k._row_bounded),  # and the dynamics' too
        "zmm in pair loops": holds_512_bit_registers(k._row_bounded)
        or holds_512_bit_registers(ko._row_chunk),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
