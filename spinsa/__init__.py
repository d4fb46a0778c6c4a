"""spinsa: self-attention as an attractor network of vector spins.

The stable public API (docs/api.md, 'The spinsa namespace') is re-exported here.
Importing spinsa loads neither torch, dask nor matplotlib; the functions that need them
import them on first use.
"""

from spinsa._checks import NonFiniteResultError
from spinsa._version import __version__
from spinsa.couplings import hebbian_couplings, random_couplings
from spinsa.embedding import PatchEmbedding
from spinsa.fit import (
    FitConfig,
    FitResult,
    estimate_memory,
    fit_pseudolikelihood,
    normalised_loss_and_grad,
    pl_loss_and_grad,
)
from spinsa.model import (
    DynamicsConfig,
    Trajectory,
    async_sweep,
    attention,
    energy,
    local_fields,
    run,
    site_energies,
    step,
)

__all__ = [
    "__version__",
    "PatchEmbedding",
    "DynamicsConfig",
    "Trajectory",
    "site_energies",
    "energy",
    "attention",
    "local_fields",
    "step",
    "async_sweep",
    "run",
    "random_couplings",
    "hebbian_couplings",
    "FitConfig",
    "FitResult",
    "estimate_memory",
    "fit_pseudolikelihood",
    "pl_loss_and_grad",
    "normalised_loss_and_grad",
    "NonFiniteResultError",
]
