"""Source of the register-blocked pair loops, written out for one small d.

For every pair (i, j) the dynamics need y = J_ij x_j, the score s = x_i . y and the update
z += w, acc += w y with w = exp(lam min(s, clamp) - shift). With d a runtime value, numba keeps y in
memory and reloads x_j for every row a of J_ij. Written out for a fixed d, the d x d
couplings are scalars, the d components of x_j and of y are registers, and the loop over
the samples of a tile (the SIMD lanes) vectorises: about 2x the generic loop. The
dynamics' block runs in two passes over the lanes, y and the scores going through a small
scratch (:func:`pair_block_source`).

:func:`pair_block_source` (the dynamics), :func:`energy_block_source` (energies alone) and
:func:`score_block_source` /
:func:`outer_block_source` (the objective's two passes) return plain Python source, so the
same text runs without numba (the tests compare it with numpy) and, compiled by numba once
per d, inside the kernels of :mod:`spinsa.kernels.dynamics` and
:mod:`spinsa.kernels.objective`.

numba's cache keys a kernel on the file it is defined in, not on this one: after editing
this module (a source, or a choice such as :func:`pairs_for_registers`), touch
:mod:`spinsa.kernels.dynamics` and :mod:`spinsa.kernels.objective` (or clear their
``__pycache__``), or the old compiled blocks are used.
"""

from __future__ import annotations

MAX_UNROLLED_D = 8  # beyond this y and x_j no longer fit in the 32 vector registers


def _score_lines(d: int, name: str, args: tuple[str, ...]) -> list[str]:
    """The head of a score block (the objective's, the energies'): ``def name(args):``, the
    couplings as scalars and a loop over the lanes that computes ``y = J_ij x_j`` and the
    score ``s = x_i . y``."""
    if not 1 <= d <= MAX_UNROLLED_D:
        raise ValueError(f"d must be in 1..{MAX_UNROLLED_D}, got {d}")
    r = range(d)
    lines = [f"def {name}({', '.join(args)}):"]
    lines += [f"    J{a}{b} = Jf[jo + _U({a * d + b})]" for a in r for b in r]
    lines += [f"    o{a} = _U({a}) * W" for a in r]
    lines.append("    for p in range(W):")
    lines += [f"        x{b} = Xf[oj + o{b} + p]" for b in r]
    lines += [f"        y{a} = " + " + ".join(f"J{a}{b} * x{b}" for b in r) for a in r]
    lines.append("        s = " + " + ".join(f"Xf[oi + o{a} + p] * y{a}" for a in r))
    return lines


def pair_block_source(
    d: int, name: str = "pair_block", extra_args: tuple[str, ...] = (), pairs: int = 1
) -> str:
    """Python source of ``name(Xf, Jf, jo, oi, oj, lam, clamp, shift, acc, z, scratch, *extra)``.

    ``pairs`` pairs (i, j_g) of one row i at once. Layout (all flat, C order, indices
    uint64): ``Xf`` the spins of a tile, ``x_j[b, p] = Xf[oj[g] + b W + p]`` for pair g
    (``x_i`` likewise at ``oi``); ``Jf`` the couplings, ``J_ij[a, b] = Jf[jo[g] + a d + b]``
    (``jo`` and ``oj``: tuples of ``pairs`` offsets); ``acc[a W + p]`` the unnormalised
    field and ``z[p]`` the normaliser of lane p; ``shift[p]`` the softmax shift; ``clamp``
    the scores' upper clamp (inf: none); ``scratch`` (``pairs`` (d + 1) W floats) the y and
    scores between the passes. ``W`` (the tile width), ``_U`` (uint64) and ``fast_exp`` are
    globals of the namespace the source is executed in; ``extra_args`` are accepted and
    unused (the sweep passes d as the length of such an argument).

    Pass 1, for each pair, is one loop over the lanes per block of 4 rows of y = J_ij x_j:
    each writes its rows of y to the scratch and adds its part of the score, the last one
    storing lam min(s, clamp) - shift. 4 rows of y, the x_j streaming past and a coupling
    fit AVX2's 16 vector registers, and no dependent chain runs from x_j through the exp to
    acc within one iteration. Pass 2 takes the ``pairs`` exps side by side (independent
    chains, so their latency overlaps) and adds their sum to z and w y to acc, which is
    loaded and stored once for all the pairs (how many: :func:`pairs_for_registers`).
    """
    args = ("Xf", "Jf", "jo", "oi", "oj", "lam", "clamp", "shift", "acc", "z", "scratch")
    args += tuple(extra_args)
    return "\n".join(_two_pass_lines(d, name, args, pairs=pairs)) + "\n"


def _two_pass_lines(
    d: int, name: str, args: tuple[str, ...], rows: int = 4, fields: bool = True, pairs: int = 1
) -> list[str]:
    """The lines of :func:`pair_block_source`: y and the score by blocks of ``rows`` rows
    for each of ``pairs`` pairs, then their exps; without y in the scratch and without acc
    where ``fields`` is False."""
    if not 1 <= d <= MAX_UNROLLED_D:
        raise ValueError(f"d must be in 1..{MAX_UNROLLED_D}, got {d}")
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, got {pairs}")
    r = range(d)
    blocks = [range(a0, min(d, a0 + rows)) for a0 in range(0, d, rows)]
    per_pair = d + 1 if fields else 1  # scratch floats per lane and pair: y (if kept), score
    lines = [f"def {name}({', '.join(args)}):"]
    lines += [f"    o{a} = _U({a}) * W" for a in r]
    for g in range(pairs):
        # pair g's part of the scratch: y (d W floats, if kept), then the scores (W floats)
        if fields:
            lines.append(f"    yo{g} = _U({g * per_pair}) * W")
        lines.append(f"    sc{g} = _U({g * per_pair + per_pair - 1}) * W")
        lines += [f"    J{a}{b} = Jf[jo[{g}] + _U({a * d + b})]" for a in r for b in r]
        for n, block in enumerate(blocks):
            lines.append("    for p in range(W):")
            lines += [f"        x{b} = Xf[oj[{g}] + o{b} + p]" for b in r]
            lines += [f"        y{a} = " + " + ".join(f"J{a}{b} * x{b}" for b in r) for a in block]
            dot = " + ".join(f"Xf[oi + o{a} + p] * y{a}" for a in block)
            lines.append(
                f"        s = {dot}" if n == 0 else f"        s = scratch[sc{g} + p] + {dot}"
            )
            last = n == len(blocks) - 1
            lines.append(
                f"        scratch[sc{g} + p] = "
                + ("lam * min(s, clamp) - shift[p]" if last else "s")
            )
            if fields:
                lines += [f"        scratch[yo{g} + o{a} + p] = y{a}" for a in block]
    lines.append("    for p in range(W):")
    lines += [f"        w{g} = fast_exp(scratch[sc{g} + p])" for g in range(pairs)]
    lines.append("        z[p] += " + " + ".join(f"w{g}" for g in range(pairs)))
    if fields:
        lines += [
            f"        acc[o{a} + p] += "
            + " + ".join(f"w{g} * scratch[yo{g} + o{a} + p]" for g in range(pairs))
            for a in r
        ]
    return lines


def energy_block_source(
    d: int, name: str = "energy_block", extra_args: tuple[str, ...] = (), pairs: int = 1
) -> str:
    """Python source of ``name(Xf, Jf, jo, oi, oj, lam, clamp, shift, z, scratch, *extra)``.

    The normaliser alone, for the energies of a state without its fields: ``z[p] +=
    exp(lam min(x_i . J_ij x_j, clamp) - shift[p])`` over ``pairs`` pairs. The passes of
    :func:`pair_block_source` without y: the scores by blocks of rows through the scratch
    (``pairs`` W floats), then the exps. (One loop, with the exp beside d rows of y, was
    1.2x slower than the whole pair block with 512-bit code; git history of
    docs/benchmarks.md.)
    """
    args = ("Xf", "Jf", "jo", "oi", "oj", "lam", "clamp", "shift", "z", "scratch", *extra_args)
    return "\n".join(_two_pass_lines(d, name, args, fields=False, pairs=pairs)) + "\n"


def score_block_source(d: int, name: str = "score_block", extra_args: tuple[str, ...] = ()) -> str:
    """Python source of ``name(Xf, Jf, jo, oi, oj, W, lam, clamp, S, so, *extra_args)``.

    The objective's first pass for one pair (i, j) on a chunk of ``W`` lanes (a runtime
    width): ``S[so + p] = lam min(x_i . J_ij x_j, clamp)``. Layout as
    :func:`pair_block_source` with the width ``W`` an argument. The lanes' maximum over j
    is taken afterwards (:func:`spinsa.kernels.dynamics.lane_max`): kept here as a running
    maximum, it became a masked store per pair, slow on AMD's AVX2 cores.
    """
    args = ("Xf", "Jf", "jo", "oi", "oj", "W", "lam", "clamp", "S", "so", *extra_args)
    lines = _score_lines(d, name, args)
    lines.append("        S[so + p] = lam * min(s, clamp)")
    return "\n".join(lines) + "\n"


def outer_block_source(
    d: int, name: str = "outer_block", extra_args: tuple[str, ...] = (), rows: int = 2
) -> str:
    """Python source of ``name(Xf, oi, oj, W, S, so, G, go, *extra_args)``.

    The objective's gradient for one pair on ``W`` lanes: ``G[go + a d + b] -= sum_p
    S[so + p] x_i[a, p] x_j[b, p]`` (``S``: the attention weights). Rows a are taken
    ``rows`` at a time, so ``rows`` d sums stay in registers while the lanes stream past,
    and each sum is reduced across the lanes once per chunk: 2 rows fill 32 vector
    registers (AVX-512, ARM), 1 row suits 16 (AVX2; :func:`rows_for_registers`).
    """
    if not 1 <= d <= MAX_UNROLLED_D:
        raise ValueError(f"d must be in 1..{MAX_UNROLLED_D}, got {d}")
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    args = ", ".join(("Xf", "oi", "oj", "W", "S", "so", "G", "go", *extra_args))
    lines = [f"def {name}({args}):"]
    lines += [f"    o{a} = _U({a}) * W" for a in range(d)]
    lines.append("    zero = S.dtype.type(0)  # sums in the lanes' precision, not float64")
    for a0 in range(0, d, rows):
        block = [a for a in range(a0, a0 + rows) if a < d]
        lines += [f"    g{a}_{b} = zero" for a in block for b in range(d)]
        lines.append("    for p in range(W):")
        lines.append("        al = S[so + p]")
        lines += [f"        u{a} = al * Xf[oi + o{a} + p]" for a in block]
        lines += [f"        x{b} = Xf[oj + o{b} + p]" for b in range(d)]
        lines += [f"        g{a}_{b} += u{a} * x{b}" for a in block for b in range(d)]
        lines += [f"    G[go + _U({a * d + b})] -= g{a}_{b}" for a in block for b in range(d)]
    return "\n".join(lines) + "\n"


def pairs_for_registers(n_registers: int) -> int:
    """Pairs per call of the dynamics' block (:func:`pair_block_source`): 4 with 32 vector
    registers, 2 with 16, where four exps side by side do not fit. Measured at d = 8 (the
    block alone, one thread, pairs alternated in one process): with 512-bit code 4 pairs
    are 1.08-1.26x faster than 1; with 256-bit code 2 pairs are 1.06-1.09x faster than 1,
    while 4 ranged from 0.91x to 1.25x (git history of docs/benchmarks.md)."""
    return 4 if n_registers >= 32 else 2


def rows_for_registers(n_registers: int) -> int:
    """Rows of the gradient's outer products kept in registers at once: 2 with 32 vector
    registers, 1 with 16. Measured at d = 8 (objective + gradient, P = 2,048, one thread):
    with 256-bit AVX2 code, 1 row is 1.44x faster than 2 (whose 2 d sums, 2 weights and d
    spins do not fit 16 registers); with 512-bit code 2 rows are 1.1-1.3x faster than 1."""
    return 2 if n_registers >= 32 else 1
