"""Scalar maths that vectorises inside numba loops.

numba's ``np.exp`` is a scalar libm call on machines whose llvmlite is not SVML-enabled, and
a loop that calls it does not vectorise. :func:`fast_exp` is a branch-free replacement for
float32 (range reduction by powers of two, a degree-6 polynomial, the exponent assembled by
a bit cast; relative error about 2e-7); float64 keeps ``np.exp`` so that the float64 path
stays exact to the last bits.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload


def fast_exp(x):
    """exp(x); inside numba float32 uses a vectorisable polynomial (see module docstring)."""
    return np.exp(x)


@intrinsic
def _int32_bits_as_float32(typingctx, i):
    """The float32 whose bits are the low 32 bits of the integer ``i``."""
    if not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        low = args[0] if i.bitwidth == 32 else builder.trunc(args[0], ir.IntType(32))
        return builder.bitcast(low, ir.FloatType())

    return types.float32(i), codegen


@overload(fast_exp, inline="always")
def _fast_exp_overload(x):
    if x != types.float32:
        return lambda x: np.exp(x)

    def impl(x):
        # exp(x) = 2^k exp(r), k = round(x / ln 2), |r| <= ln2 / 2; below -87 the result is
        # ~1e-38 instead of an exact 0, harmless next to the softmax's normaliser >= 1.
        x = min(max(x, np.float32(-87.0)), np.float32(88.0))
        k = np.floor(x * np.float32(1.4426950408889634) + np.float32(0.5))
        r = x - k * np.float32(0.693359375) + k * np.float32(2.12194440e-4)
        p = np.float32(1.0 / 720.0)
        p = p * r + np.float32(1.0 / 120.0)
        p = p * r + np.float32(1.0 / 24.0)
        p = p * r + np.float32(1.0 / 6.0)
        p = p * r + np.float32(0.5)
        p = p * r + np.float32(1.0)
        p = p * r + np.float32(1.0)
        return p * _int32_bits_as_float32((np.int32(k) + np.int32(127)) << np.int32(23))

    return impl
