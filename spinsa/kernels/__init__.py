"""Private numba kernels: flat loops over arrays, writing into ``out``; no validation here."""
