"""The one ``njit`` alias of the package.

Every kernel is compiled through :func:`njit` so that caching, fast-math and threading are
decided in one place. ``cache=True`` keeps the compiled code between sessions; fast-math
omits ``nnan``/``ninf`` so that the finiteness checks and the -inf guards stay meaningful.
"""

from __future__ import annotations

import os
import sys


def _prefer_512_bit_vectors() -> None:
    """Let LLVM use 512-bit vectors on AVX-512 CPUs (it prefers 256-bit by default).

    Measured about 1.4x on the dynamics kernel here. It only takes effect if numba is not
    imported yet and the user has not set ``NUMBA_CPU_FEATURES``; set
    ``SPINSA_NO_AVX512_TUNING=1`` to leave LLVM's default alone.
    """
    if "numba" in sys.modules or "NUMBA_CPU_FEATURES" in os.environ:
        return
    if os.environ.get("SPINSA_NO_AVX512_TUNING"):
        return
    try:
        import llvmlite.binding as llvm

        features = llvm.get_host_cpu_features()
        if features.get("avx512f") and features.get("prefer-256-bit") is not False:
            os.environ["NUMBA_CPU_FEATURES"] = features.flatten() + ",-prefer-256-bit"
    except Exception:  # an unusual platform: keep numba's own detection
        return


_prefer_512_bit_vectors()

import numba  # noqa: E402  (after the CPU-feature choice above)
import numba.extending  # noqa: E402

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


def njit(*args, parallel: bool = False, inline: str = "never", **kwargs):
    """``numba.njit`` with the package's defaults (cache, fast-math, optional ``parallel``)."""
    options = dict(cache=True, fastmath=FASTMATH, parallel=parallel, nogil=True, inline=inline)
    options.update(kwargs)
    if args and callable(args[0]):
        return numba.njit(**options)(args[0])
    return numba.njit(*args, **options)


prange = numba.prange


def enabled_cpu_features() -> set[str]:
    """The CPU features numba compiles for: those ``NUMBA_CPU_FEATURES`` turns on if set,
    else the host's (llvmlite)."""
    import llvmlite.binding as llvm

    if numba.config.CPU_FEATURES is not None:
        return {f[1:] for f in numba.config.CPU_FEATURES.split(",") if f.startswith("+")}
    return {name for name, on in llvm.get_host_cpu_features().items() if on}


def vector_registers() -> int:
    """Vector registers of the CPU numba compiles for: 32 with AVX-512 (and on ARM), 16
    with AVX/AVX2 (and SSE). Read where a kernel is compiled, to choose its blocking;
    numba's cache keys compiled code on the target's features, so a cached kernel always
    matches them."""
    import platform

    enabled = enabled_cpu_features()
    if "avx512f" in enabled or platform.machine().lower() in ("arm64", "aarch64"):
        return 32
    return 16


@numba.extending.intrinsic
def align_stack(typingctx):
    """Inside a numba function: start its stack frame on a cache line.

    Sets LLVM's ``alignstack(64)`` on the function that calls it (and ``noinline``, without
    which numba's pipeline drops the attribute). A written-out block keeps couplings that
    do not fit the registers in stack slots and reloads them on every iteration of its
    loop over the lanes; LLVM aligns those slots to the 16 bytes of the ABI only, so a
    32- or 64-byte reload split across two cache lines, or not, by where the caller's stack
    happened to end: one sweep with 256-bit code ran at 54-60 or 65 GFLOP/s on one thread
    of an AMD Zen 4 by the depth of the stack, and at 65-67 at every depth with the frame
    aligned (the measurements are in the git history of docs/benchmarks.md).
    """

    def codegen(context, builder, signature, args):
        builder.function.attributes.alignstack = 64
        builder.function.attributes.add("noinline")
        return context.get_dummy_value()

    return numba.types.none(), codegen


def written_for_d(make_source, name: str, unroll, noop, **namespace):
    """The implementation of a written-out block for an ``@overload``: ``make_source(d)``
    executed for d = len(unroll), its frame on a cache line (:func:`align_stack`), or
    ``noop`` for ``unroll == ()`` (the generic path, which never calls it); None where
    ``unroll`` is not a tuple. ``namespace``: the source's globals.
    """
    if not isinstance(unroll, numba.types.BaseTuple):
        return None
    if len(unroll) == 0:
        return noop
    head, body = make_source(len(unroll), name, ("unroll",)).split("\n", 1)
    namespace["align_stack"] = align_stack
    exec(f"{head}\n    align_stack()\n{body}", namespace)
    return namespace[name]
