"""The one ``njit`` alias of the package (STYLE §2).

Every kernel is compiled through :func:`njit` so that caching, fast-math and threading are
decided in one place. ``cache=True`` keeps the compiled code between sessions; fast-math
omits ``nnan``/``ninf`` so that the finiteness checks and the -inf guards stay meaningful.
"""

from __future__ import annotations

import numba

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


def njit(*args, parallel: bool = False, inline: str = "never", **kwargs):
    """``numba.njit`` with the package's defaults (cache, fast-math, optional ``parallel``)."""
    options = dict(cache=True, fastmath=FASTMATH, parallel=parallel, nogil=True, inline=inline)
    options.update(kwargs)
    if args and callable(args[0]):
        return numba.njit(**options)(args[0])
    return numba.njit(*args, **options)


prange = numba.prange
