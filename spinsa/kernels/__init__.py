"""Private numba kernels: flat loops over arrays, writing into ``out``; no validation here.

``_numba`` is imported first, before anything here imports numba, so that its choice of
CPU features (512-bit vectors on AVX-512) takes effect.
"""

from spinsa.kernels import _numba  # noqa: F401  (must run before numba is imported)
