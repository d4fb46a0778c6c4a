"""spinsa: self-attention as an attractor network of vector spins.

The stable public API (docs/api.md, 'The spinsa namespace') is re-exported here.
Importing spinsa loads neither torch, dask nor matplotlib; the functions that need them
import them on first use. The subpackages are attributes too, imported on first access
(``spinsa.plotting.figure_hebbian``, ``spinsa.analysis.find_attractors``).
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

# Subpackages reachable as attributes after `import spinsa`, imported on first access (a
# module __getattr__, PEP 562), so that importing spinsa stays light. Only attribute access:
# nothing here uses them, and the layers (docs/architecture.md) are unchanged.
_SUBPACKAGES = (
    "analysis",
    "baselines",
    "couplings",
    "damico",
    "datasets",
    "embedding",
    "experiments",
    "fit",
    "io",
    "model",
    "plotting",
    "references",
    "report",
    "sampling",
    "scan",
    "sequences",
    "tasks",
    "vmf",
)


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBPACKAGES))
