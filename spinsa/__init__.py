"""spinsa: self-attention as an attractor network of vector spins.

The public API of DESIGN §5 is re-exported here. Importing spinsa loads neither torch,
dask nor matplotlib; the functions that need them import them on first use.
"""

from spinsa._version import __version__

__all__ = ["__version__"]
