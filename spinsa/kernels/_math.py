"""Scalar maths that vectorises inside numba loops.

numba's ``np.exp`` is a scalar libm call on machines whose llvmlite is not SVML-enabled, and
a loop that calls it does not vectorise. :func:`fast_exp` is a branch-free replacement for
float32 (range reduction by powers of two, a degree-6 polynomial, the exponent assembled by
a bit cast; relative error about 2e-7); float64 keeps ``np.exp`` so that the float64 path
stays exact to the last bits.

:func:`exp_weight` is a float64 exp for weights that are summed and compared, not carried
into a result to the last bit (the heat-bath sampler's mixture weights): the same scheme
with a degree-13 polynomial, relative error below 3e-14, about 7x libm's scalar exp in a
loop over 196 sites (docs/sampling.md).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload


def fast_exp(x):
    """exp(x); inside numba float32 uses a vectorisable polynomial (see module docstring)."""
    return np.exp(x)


def exp_weight(x):
    """exp(x) of a float64 weight's logarithm; exactly 0 below -708 (and at -inf). Inside
    numba a vectorisable polynomial (see module docstring)."""
    return np.exp(x) if x >= -708.0 else 0.0


@intrinsic
def _int64_bits_as_float64(typingctx, i):
    """The float64 whose bits are those of the int64 ``i``."""
    if i != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(i), codegen


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


_LN2_HI = 6.93147180369123816490e-01  # ln 2 in two parts, the first with 21 trailing
_LN2_LO = 1.90821492927058770002e-10  # zero bits, so that k * _LN2_HI is exact
_TAYLOR_13 = tuple(1.0 / math.factorial(n) for n in range(13, -1, -1))  # exp's, highest first


@overload(exp_weight, inline="always")
def _exp_weight_overload(x):
    if x != types.float64:
        return None

    def impl(x):
        # as fast_exp: exp(x) = 2^k exp(r), k = round(x / ln 2), |r| <= ln2 / 2 (k in
        # -1021..1023 after the clamp, so 2^k is a normal number)
        y = min(max(x, -708.0), 709.0)
        k = np.floor(y * 1.4426950408889634 + 0.5)
        r = (y - k * _LN2_HI) - k * _LN2_LO
        p = _TAYLOR_13[0]
        for c in _TAYLOR_13[1:]:  # Horner, from 1 / 13! down to 1 / 0!
            p = p * r + c
        w = p * _int64_bits_as_float64((np.int64(k) + np.int64(1023)) << np.int64(52))
        return w if x >= -708.0 else 0.0

    return impl
