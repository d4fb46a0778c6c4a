"""Training J without backpropagation (docs/model.md, 'Training without backpropagation').

The objective L(J) = (1/P) Σ_μ Σ_i e_i(ξ^μ; J) has a closed-form gradient and splits into one
problem per row of J. Two backends minimise it under a fixed norm or an L2 penalty:

- ``"torch"``: minibatch Adam/AdamW/SGD with the gradient computed in closed form in torch,
  on CUDA when available (:mod:`spinsa.fit.torch_backend`);
- ``"lbfgs"``: full-batch scipy L-BFGS-B with the numba objective, rows in parallel
  (:mod:`spinsa.fit.lbfgs`).

Beyond the pseudo-likelihood (docs/model.md, 'Beyond the pseudo-likelihood'), on the
minibatch backend, with the same constraints, checkpoints and result (``method=``,
``couplings=`` of :class:`FitConfig`):

- ``method="cd"``: contrastive divergence, CD-k or persistent chains (PCD); both terms are
  the closed-form gradient above, the model's states reached by the dynamics (numba on
  the CPU, torch on a GPU: :mod:`spinsa.fit.gradients`);
- ``method="bptt"``: the task's error after τ ~ U{3..7} unrolled steps of the dynamics,
  by torch autograd with gradient checkpointing (:mod:`spinsa.fit.backprop`);
- ``couplings="factorised"`` or ``"shared"``: J_ij = Σ_h K_ijhᵀ Q_ijh per pair, or one
  position-independent block, moved through its factors and expanded in the result
  (:mod:`spinsa.fit.parametrisation`).

Importing this package imports neither torch nor scipy.optimize.
"""

from spinsa.fit.api import BACKENDS, fit_pseudolikelihood, initial_couplings
from spinsa.fit.backprop import bptt_loss_and_grad
from spinsa.fit.config import PRESETS, FitConfig, NormWarning
from spinsa.fit.memory import (
    InsufficientMemoryError,
    MemoryEstimate,
    available_memory,
    estimate_memory,
)
from spinsa.fit.objective import (
    check_patterns,
    normalised_loss_and_grad,
    pl_loss_and_grad,
    pl_row_loss_and_grad,
)
from spinsa.fit.result import FitResult, load_fit, save_fit

__all__ = [
    "BACKENDS",
    "PRESETS",
    "FitConfig",
    "FitResult",
    "InsufficientMemoryError",
    "MemoryEstimate",
    "NormWarning",
    "available_memory",
    "bptt_loss_and_grad",
    "check_patterns",
    "estimate_memory",
    "fit_pseudolikelihood",
    "initial_couplings",
    "load_fit",
    "normalised_loss_and_grad",
    "pl_loss_and_grad",
    "pl_row_loss_and_grad",
    "save_fit",
]
