"""Configuration of a pseudo-likelihood fit, and the table of presets.

:class:`FitConfig` holds every option of :func:`spinsa.fit_pseudolikelihood` (the options of
both backends live in one flat, frozen, validated dataclass so that the whole recipe can be
stored as HDF5 attributes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from spinsa._checks import (
    OPTIMISER_MAX,
    check_choice,
    check_count,
    check_optimiser_value,
    check_positive,
    check_real,
)
from spinsa._config import check_keys, config_to_dict

_CHOICES = {
    "method": ("pl", "cd", "bptt"),
    "loss": ("pl", "normalised"),
    "chain": ("site", "sweep", "dynamics"),
    "couplings": ("full", "factorised", "shared"),
    "task": ("masked", "denoise"),
    "constraint": ("global", "row", "l2", "none"),
    "optimizer": ("adam", "adamw", "sgd"),
    "init": ("uniform", "normal"),
    "site_sampling": ("all", "one"),
    "device": ("auto", "cpu", "cuda"),
    "dtype": ("float32", "float64"),
    "unit_spins": ("warn", "normalize", "ignore"),
}
# Validation tables of FitConfig: reals > 0 (or None), and (field, minimum) of the integers.
_POSITIVE = ("lam", "l2", "lr", "gtol", "ftol", "noise_std")
_POSITIVE_OR_NONE = ("norm", "clip", "score_clamp", "max_norm")
_COUNTS = {"seed": 0, "epochs": 0, "batch_size": 1, "checkpoint_every": 1, "eval_every": 1,
           "max_iter": 0, "history_size": 1, "segment_iters": 1, "k": 1, "tau_min": 1,
           "tau_max": 1, "heads": 1, "patience": 1}  # fmt: skip
_COUNTS_OR_NONE = ("chunk_size", "workers", "lr_decay_every", "rank")
# The options the optimisers turn into float32 scalars: at most OPTIMISER_MAX, and the values
# that are useful, for the message.
_OPTIMISER_VALUES = {
    "lr": "useful values are about 1e-4 to 1 (the default 1e-3)",
    "l2": "useful values are below about 1 (the default 1e-2); a larger l2 only pins J to 0",
    "weight_decay": "useful values are below about 1e-2 (the default 0)",
    "momentum": "useful values are in [0, 1) (the default 0.9)",
}
_FLAGS = ("check_memory", "project_grad", "standardize", "persistent", "early_stopping")
_BACKEND_NAMES = ("torch", "lbfgs")
# The epoch fits' convergence options (spinsa.fit.convergence): left out of ``to_dict`` at
# their defaults too, so that the stored configs of existing fits do not change.
_CONVERGENCE = ("validation_fraction", "patience", "min_improvement", "early_stopping")
# The options of the minibatch (torch) backend: set without a backend, they are refused
# rather than silently ignored by the default, full-batch L-BFGS.
_TORCH_OPTIONS = (
    "epochs", "batch_size", "optimizer", "lr", "weight_decay", "momentum", "lr_decay_every",
    "lr_decay", "clip", "project_grad", "site_sampling", "chunk_size", "device",
    "checkpoint_every", "eval_every", *_CONVERGENCE,
)  # fmt: skip

# The options that belong to one training method or one parametrisation of J: refused with
# another one, and left out of ``to_dict`` there (so a plain fit's stored config, and every
# hash made of it, is the same as before these options existed).
_OPTIONS_OF = {
    ("method", "cd"): ("k", "persistent", "chain", "max_norm"),
    ("method", "bptt"): ("tau_min", "tau_max", "task", "mask_fraction", "noise_std"),
    ("task", "masked"): ("mask_fraction",),
    ("task", "denoise"): ("noise_std",),
    ("method", ("cd", "bptt")): ("gamma",),
    ("couplings", ("factorised", "shared")): ("heads", "rank"),
    ("backend", "torch"): _CONVERGENCE,
}

# The published notebook's recipe (docs/model.md, 'The published recipe'), checked line by
# line against its training cell. Values given to ``FitConfig.from_preset`` override these;
# ``epochs`` is not part of the recipe and keeps the generic default.
PRESETS: dict[str, dict[str, Any]] = {
    "damico2024": dict(
        backend="torch",
        lam=5.0,
        standardize=True,  # the loss sees features standardised over the tokens ...
        score_clamp=20.0,  # ... and scores clamped at 20 before lambda, as its dynamics do
        lr_decay_every=10,  # StepLR(step_size=10, gamma=0.5), stepped once per epoch
        lr_decay=0.5,
        constraint="global",  # the global RMS of J restored after every step
        norm=None,  # ... to its initial value
        init="uniform",  # U(-1/2, 1/2) / d**2, zero diagonal blocks
        optimizer="adamw",
        lr=5e-4,
        weight_decay=1e-6,
        batch_size=256,
        site_sampling="one",  # one random site i per minibatch
        clip=1.0,
        project_grad=False,  # the notebook steps with the raw gradient, then rescales J
        unit_spins="ignore",  # the notebook's embedding gives tokens of norm 1/sqrt(2)
    ),
}


class NormWarning(UserWarning):
    """A fit at a fixed norm that nobody chose: ``norm=None`` kept the random initial
    couplings' norm (see ``norm`` in :class:`FitConfig`). Silence it by passing ``norm``."""


@dataclass(frozen=True)
class FitConfig:
    """Every option of a pseudo-likelihood fit, validated on construction
    (docs/model.md, 'Training without backpropagation').

    The objective is L(J) = (1/P) Σ_μ Σ_i e_i(ξ^μ; J) at inverse temperature ``lam``; it is
    unbounded below as |J| grows, so one of three ``constraint`` s keeps it finite.

    Parameters
    ----------
    backend : {"lbfgs", "torch"} or None
        ``"lbfgs"``: full-batch scipy L-BFGS-B with the numba objective and gradient.
        ``"torch"``: minibatch first-order optimiser with the closed-form gradient computed in
        torch (GPU when available; the ``torch`` extra). ``None`` (the default, the same in
        Python and on the command line) resolves on construction: ``"lbfgs"``, or
        ``"torch"`` for a method or parametrisation only torch runs (``method="cd"`` or
        ``"bptt"``, ``couplings="factorised"`` or ``"shared"``). An option of the torch
        backend (``epochs``, ``lr``, ...) set without a backend is refused: name it.
    lam : float
        λ_train, inverse temperature of the softmax in the objective (> 0).
    loss : {"pl", "normalised"}
        ``"pl"``: the paper's loss L(J) = (1/P) Σ_μ Σ_i e_i, unbounded below as |J| grows.
        ``"normalised"``: the normalised pseudo-likelihood, minus the log of the conditional
        densities at β = λ (docs/model.md, 'The normalised pseudo-likelihood'); bounded
        below, a consistent estimator of planted couplings, fitted with ``constraint="none"``
        or ``"l2"``. ``method="pl"`` only; not with ``standardize``, ``score_clamp`` or
        ``site_sampling="one"``.
    constraint : {"global", "row", "l2", "none"}
        ``"global"``: the Frobenius norm |J| is fixed (the paper: the global RMS of J is
        restored after every step). ``"row"``: every row norm |J_i·| is fixed, so the rows are
        independent problems. ``"l2"``: no constraint; the penalty (l2/2)|J|² is added.
        ``"none"``: neither (only for a bounded objective: ``loss="normalised"`` or
        ``method="cd"``).
    norm : float or None
        The fixed norm: |J| for ``"global"``, every |J_i·| for ``"row"``. ``None`` keeps the
        initial value(s) (for ``"row"``: each row keeps its own initial norm): those of
        ``J0``, or of the random ``init``, about sqrt(N (N-1) / 12) / d for ``"uniform"``
        (7.06 at N = 196, d = 8). With λ it sets how far the fit is from Hebbian (a small
        λ|J| gives the Hebbian direction; docs/tutorial.md, 'The coupling norm'), so a
        fit with neither ``norm`` nor ``J0`` nor a preset warns (:class:`NormWarning`)
        with the value kept.
    l2 : float
        Strength of the L2 penalty, in (0, 1e30];
        used by ``constraint="l2"`` only.
    init : {"uniform", "normal"}
        Initial couplings when no ``J0`` is given, with zero diagonal blocks:
        ``"uniform"``: U(-1/2, 1/2)/d² entry-wise (the notebook's); ``"normal"``:
        N(0, 1/(d²(N-1))) entry-wise, so that every row has norm about 1.
    seed : int
        Seed of the initialisation, of the minibatch order and of the site sampling.
    dtype : {"float32", "float64"}
        Precision of the couplings and of the arithmetic (sums over samples are accumulated
        in float64 either way).
    standardize : bool
        Fit on the patterns with every spin component standardised over the N tokens of its
        pattern (mean 0, unbiased standard deviation plus 1e-9:
        :func:`spinsa.damico.standardize_features`), as the published notebook's loss does.
    score_clamp : float or None
        Clamp the scores, s_ij ← min(s_ij, score_clamp), before λ (the notebook: 20); the
        gradient is zero where the clamp acts.
    method : {"pl", "cd", "bptt"}
        What J minimises (docs/model.md, 'Beyond the pseudo-likelihood'). ``"pl"``: the
        pseudo-likelihood L(J). ``"cd"``: contrastive divergence, the gradient
        ∂⟨e⟩_data/∂J − ∂⟨e⟩_model/∂J, both terms the closed form of the pseudo-likelihood's
        gradient (docs/model.md, 'The objective'), the model's states reached by ``k`` steps
        of the dynamics from the minibatch (CD-k) or from persistent chains (PCD).
        ``"bptt"``: the task's error after τ ~ U{``tau_min``..``tau_max``} steps of the
        dynamics, differentiated by torch autograd through the unrolled steps (one step's
        intermediates kept at a time: gradient checkpointing). Both run on the minibatch
        ``"torch"`` backend.
    chain : {"site", "sweep", "dynamics"}
        CD: where the model's states come from (docs/training-methods.md, 'Contrastive
        divergence'). ``"site"`` (default): for every sample and row i, x_i is redrawn from
        its conditional at β = λ given the data's other spins, and row i's model term is
        the closed form at that state; its expectation is the normaliser's gradient, so CD
        converges to the normalised pseudo-likelihood's optimum. ``"sweep"``: ``k`` full
        systematic Gibbs sweeps at β = λ (CD-k, or PCD with ``persistent``); the
        conditionals belong to no joint law, and this CD can diverge (a warning; see
        ``max_norm``). ``"dynamics"``: ``k`` steps of the deterministic dynamics with ``gamma``
        (the behaviour before the samplers existed).
    k : int
        CD with ``chain="sweep"`` or ``"dynamics"``: sweeps or steps from the data (or the
        chains) to the model's states.
    persistent : bool
        CD with ``chain="sweep"`` or ``"dynamics"``: persistent chains (PCD), one per
        minibatch slot, started at the first minibatch and carried from step to step (and
        through checkpoints).
    max_norm : float or None
        CD: the divergence guard. The fit stops (``FitResult.converged`` False, a message
        that says so, a ``RuntimeWarning``) once |J| exceeds it. ``None``: 100·√(N(N−1))/λ,
        blocks of mean norm 100/λ, where every conditional is a point mass.
    gamma : float
        CD with ``chain="dynamics"``, and BPTT: γ of the dynamics
        x_i ← (h_i + γ x_i)/|h_i + γ x_i| at λ = ``lam``.
    tau_min, tau_max : int
        BPTT: the number of unrolled steps τ is drawn uniformly in {tau_min..tau_max} per
        minibatch (the recycled block's recipe: 3..7).
    task : {"masked", "denoise"}
        BPTT: the task whose error is minimised, in spin space: ``"masked"`` sets a fraction
        ``mask_fraction`` of the tokens to the zero spin (as the masked task does);
        ``"denoise"`` adds N(0, noise_std²) to every spin component and projects back on the
        sphere. The loss is the mean squared distance between x(τ) and the clean spins, over
        all tokens.
    mask_fraction : float
        BPTT, masked task: the fraction of tokens masked, in (0, 1).
    noise_std : float
        BPTT, denoising task: the noise's standard deviation per spin component.
    couplings : {"full", "factorised", "shared"}
        How J is parametrised (torch backend). ``"full"``: every block J_ij free.
        ``"factorised"``: J_ij = Σ_h K_ijhᵀ Q_ijh, ``heads`` heads of rank ``rank``
        (docs/model.md, 'Beyond the pseudo-likelihood'). ``"shared"``: the transformer's
        position-independent J_ij = Σ_h K_hᵀ Q_h for every i ≠ j. The optimiser moves the
        factors (gradient by the chain rule from the closed form); the result holds J
        expanded, so every analysis runs on it unchanged.
    heads, rank : int
        Factorised couplings: number of heads and rank r of each (``rank=None``: d).
    epochs : int
        Passes over the data (torch backend).
    batch_size : int
        Minibatch size (torch backend); ``batch_size >= P`` is full-batch gradient descent.
    optimizer : {"adam", "adamw", "sgd"}
        First-order optimiser (torch backend).
    lr, weight_decay, momentum : float
        Optimiser parameters (``weight_decay`` is decoupled for AdamW, coupled for Adam and
        SGD, as in torch; ``momentum`` is SGD's). Each, and lr · weight_decay, is at most
        1e30: the optimisers compute in float32,
        whose largest number is 3.4e38, and Adam's first step is lr / (1 - 0.9).
    lr_decay_every : int or None
        Multiply the learning rate by ``lr_decay`` every this many epochs (torch's
        ``StepLR``: epoch e runs at lr · lr_decay ** (e // lr_decay_every)); None: constant.
    lr_decay : float
        The factor of that schedule, in (0, 1].
    clip : float or None
        Clip the gradient to this Frobenius norm before every step (torch backend).
    project_grad : bool
        With a fixed norm (torch backend): remove from the gradient its component along J
        (globally, or row by row) before clipping and stepping, so that the optimiser follows
        the gradient on the constraint surface; J is rescaled onto it after every step either
        way. Without the projection (the notebook's recipe), Adam's per-coordinate scaling
        keeps pushing J along the radial direction that the rescaling undoes, and the fit
        stalls above the constrained minimum.
    site_sampling : {"all", "one"}
        Sites in a minibatch's loss (torch backend): ``"all"``, Σ_i e_i averaged over the
        batch; ``"one"``, one site i drawn uniformly per minibatch and e_i averaged over the
        batch, so that only row i receives a gradient (the notebook's recipe).
    chunk_size : int or None
        Samples processed at once when computing the objective in torch; bounds the memory
        (about chunk_size·N²·d·itemsize·4 bytes). ``None`` chooses it for a 256 MiB budget.
    device : {"auto", "cpu", "cuda"}
        Torch device; ``"auto"`` is CUDA when available, else the CPU.
    max_iter : int
        L-BFGS iterations in total (for ``constraint="row"``: per row).
    gtol, ftol : float
        L-BFGS-B stopping tolerances (largest projected gradient component; relative decrease
        of the objective).
    history_size : int
        Number of correction pairs kept by L-BFGS (scipy's ``maxcor``).
    segment_iters : int
        L-BFGS restarts from the current couplings every ``segment_iters`` iterations; the
        history and the checkpoint are written between segments. The curvature memory is
        lost at a restart, which is what makes a resumed fit identical to an uninterrupted
        one.
    checkpoint_every : int
        Epochs between two checkpoints (torch backend).
    validation_fraction : float
        Torch backend: the fraction of the patterns held out (a random subset drawn from
        ``seed``, never the test set) on which the method's loss is evaluated after every
        evaluated epoch: the validation curve, ``FitResult.val_loss``, which the
        convergence criterion then monitors. 0 (the default, and the paper's recipes): no
        split, every pattern is trained on, and the criterion monitors the training loss.
    patience, min_improvement : int, float
        Torch backend: the fit has converged when over the last ``patience`` evaluations
        the monitored loss improved by less than the fraction ``min_improvement`` (default
        5 and 0.005: 0.5 % over 5 epochs; :func:`spinsa.fit.convergence.plateau_index`).
    early_stopping : bool
        Torch backend: stop at the first epoch where the criterion is met (``epochs`` is
        then the most). False (the default): run every epoch, and record whether the
        criterion was met on the way.
    eval_every : int
        Epochs between two full-batch evaluations of L(J) and its gradient norm (torch
        backend; the last epoch is always evaluated, the others record NaN). On the CPU an
        evaluation over 10,000 images costs several epochs of minibatch steps.
    workers : int or None
        Threads that run the rows of a ``constraint="row"`` L-BFGS fit; ``None``: numba's
        thread count.
    unit_spins : {"warn", "normalize", "ignore"}
        What to do when the patterns are not unit spins (a token norm differs from 1 by more
        than 1e-3): warn and fit them as given, project them on the sphere (zero tokens stay
        zero), or say nothing.
    check_memory : bool
        Refuse to start when :func:`spinsa.fit.estimate_memory` exceeds the available memory.
    preset : str or None
        Name of the preset the config was built from (provenance only; see
        :meth:`from_preset`).
    """

    backend: Literal["lbfgs", "torch"] | None = None
    lam: float = 5.0
    constraint: Literal["global", "row", "l2", "none"] = "global"
    norm: float | None = None
    l2: float = 1e-2
    init: Literal["uniform", "normal"] = "uniform"
    seed: int = 0
    dtype: Literal["float32", "float64"] = "float32"
    standardize: bool = False
    score_clamp: float | None = None
    # what is minimised, and how J is parametrised (docs/model.md, 'Beyond the pseudo-likelihood')
    method: Literal["pl", "cd", "bptt"] = "pl"
    loss: Literal["pl", "normalised"] = "pl"
    chain: Literal["site", "sweep", "dynamics"] = "site"
    k: int = 1
    persistent: bool = False
    max_norm: float | None = None
    gamma: float = 1.0
    tau_min: int = 3
    tau_max: int = 7
    task: Literal["masked", "denoise"] = "masked"
    mask_fraction: float = 0.3
    noise_std: float = 0.5
    couplings: Literal["full", "factorised", "shared"] = "full"
    heads: int = 1
    rank: int | None = None
    # torch backend
    epochs: int = 20
    batch_size: int = 256
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.9
    lr_decay_every: int | None = None
    lr_decay: float = 0.5
    clip: float | None = None
    project_grad: bool = True
    site_sampling: Literal["all", "one"] = "all"
    chunk_size: int | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    checkpoint_every: int = 1
    eval_every: int = 1
    validation_fraction: float = 0.0
    patience: int = 5
    min_improvement: float = 0.005
    early_stopping: bool = False
    # L-BFGS backend
    max_iter: int = 500
    gtol: float = 1e-6
    ftol: float = 1e-10
    history_size: int = 10
    segment_iters: int = 50
    workers: int | None = None
    # data
    unit_spins: Literal["warn", "normalize", "ignore"] = "warn"
    check_memory: bool = True
    preset: str | None = None

    def __post_init__(self):
        for name, choices in _CHOICES.items():
            check_choice(getattr(self, name), name, choices)
        if self.preset is not None:
            check_choice(self.preset, "preset", tuple(PRESETS))
        # numbers are stored as float and int so that asdict() round-trips through HDF5 attrs
        values = {name: check_positive(getattr(self, name), name) for name in _POSITIVE}
        for name in ("weight_decay", "momentum", "lr_decay", "gamma", "mask_fraction",
                     "validation_fraction", "min_improvement"):  # fmt: skip
            values[name] = check_real(getattr(self, name), name)
            if values[name] < 0 and name != "lr_decay":
                raise ValueError(f"{name} must be a finite number >= 0, got {values[name]!r}")
        for name, hint in _OPTIMISER_VALUES.items():
            zero = name in ("weight_decay", "momentum")
            values[name] = check_optimiser_value(values[name], name, zero=zero, hint=hint)
        if values["lr"] * values["weight_decay"] > OPTIMISER_MAX:
            raise ValueError(
                f"lr * weight_decay = {values['lr'] * values['weight_decay']:g} is too large: "
                f"it must be at most {OPTIMISER_MAX:g} (AdamW's decay 1 - lr * weight_decay "
                "is a float32 number); lower lr or weight_decay"
            )
        if not 0 < values["lr_decay"] <= 1:
            raise ValueError(f"lr_decay must be a number in (0, 1], got {self.lr_decay!r}")
        if not values["min_improvement"] < 1:  # the rule of spinsa._convergence
            raise ValueError(
                f"min_improvement must be in [0, 1) (0.005: 0.5 %), got {self.min_improvement!r}"
            )
        if not values["validation_fraction"] < 1:
            raise ValueError(
                f"validation_fraction must be in [0, 1), got {self.validation_fraction!r}"
            )
        if not 0 < values["mask_fraction"] < 1:
            raise ValueError(f"mask_fraction must be in (0, 1), got {self.mask_fraction!r}")
        values |= {name: check_count(getattr(self, name), name, m) for name, m in _COUNTS.items()}
        for name in _POSITIVE_OR_NONE:  # None, or as above
            if getattr(self, name) is not None:
                values[name] = check_positive(getattr(self, name), name)
        for name in _COUNTS_OR_NONE:
            if getattr(self, name) is not None:
                values[name] = check_count(getattr(self, name), name, 1)
        for name in _FLAGS:
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
            values[name] = bool(getattr(self, name))
        object.__setattr__(self, "backend", self._resolved_backend())
        self._check_method(values)
        if self.backend == "lbfgs" and self.site_sampling != "all":
            raise ValueError(
                "site_sampling='one' is a minibatch recipe of the torch backend; the 'lbfgs' "
                "backend is full-batch and always uses every site"
            )
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _resolved_backend(self) -> str:
        """The backend named, or the default rule of ``backend=None`` (see the class)."""
        if self.backend is not None:
            return check_choice(self.backend, "backend", _BACKEND_NAMES)
        if self.method != "pl" or self.couplings != "full":
            return "torch"
        torch_only = [n for n in _TORCH_OPTIONS if getattr(self, n) != _DEFAULTS[n]]
        if torch_only:
            raise ValueError(
                f"{', '.join(torch_only)}: option(s) of the torch backend, and the default "
                "backend is 'lbfgs' (full batch); pass backend='torch' (on the command "
                "line --backend torch), or leave them out"
            )
        return "lbfgs"

    def _check_method(self, values: dict) -> None:
        """Refuse the options of a method or parametrisation not in use, and what the
        chosen one cannot do."""
        for (field, which), names in _OPTIONS_OF.items():
            if getattr(self, field) in ((which,) if isinstance(which, str) else which):
                continue
            for name in names:
                if getattr(self, name) != _DEFAULTS[name]:
                    raise ValueError(
                        f"{name} is an option of {field}={which!r}, not of "
                        f"{field}={getattr(self, field)!r}; leave it out or set {field}"
                    )
        if values["tau_max"] < values["tau_min"]:
            raise ValueError(f"tau_max ({self.tau_max}) must be >= tau_min ({self.tau_min})")
        uses_torch = self.method != "pl" or self.couplings != "full"
        if uses_torch and self.backend != "torch":
            raise ValueError(
                f"method={self.method!r} with couplings={self.couplings!r} runs on the "
                "minibatch backend: use backend='torch' (L-BFGS needs one fixed objective and "
                "full couplings)"
            )
        if self.couplings == "shared" and self.constraint == "row":
            raise ValueError(
                "couplings='shared' has one block for every pair, so its rows cannot have "
                "norms of their own; use constraint='global' or 'l2'"
            )
        if self.method != "pl" and self.site_sampling != "all":
            raise ValueError(f"site_sampling='one' is a recipe of method='pl', not {self.method!r}")
        if self.method == "cd" and (self.standardize or self.score_clamp is not None):
            raise ValueError(
                "method='cd' compares the data with states of the design's dynamics (unit "
                "spins); standardize and score_clamp are the notebook's and do not apply"
            )
        self._check_loss_and_chain()
        if self.method == "bptt" and (self.standardize or self.score_clamp is not None):
            raise ValueError(
                "method='bptt' unrolls the design's dynamics; standardize and score_clamp are "
                "the notebook's and do not apply"
            )

    def _check_loss_and_chain(self) -> None:
        """The normalised loss's and CD's chains' own refusals."""
        if self.loss == "normalised":
            if self.method != "pl" or self.couplings != "full":
                raise ValueError(
                    f"loss='normalised' is an objective of method='pl' with full couplings, "
                    f"not of method={self.method!r}, couplings={self.couplings!r}"
                )
            if self.standardize or self.score_clamp is not None or self.site_sampling != "all":
                raise ValueError(
                    "loss='normalised' is the density of unit spins at beta = lam; "
                    "standardize, score_clamp and site_sampling='one' are the notebook's and "
                    "do not apply"
                )
        bounded = self.loss == "normalised" or self.method == "cd"
        if self.constraint == "none" and not bounded:
            raise ValueError(
                f"constraint='none' leaves |J| free, and method={self.method!r} with "
                f"loss={self.loss!r} is unbounded below as |J| grows; use loss='normalised', "
                "or a constraint 'global', 'row' or 'l2'"
            )
        if self.method == "cd" and self.chain == "site":
            if self.k != 1 or self.persistent:
                raise ValueError(
                    "chain='site' redraws one site per row from the data once: k and "
                    "persistent are options of chain='sweep' or 'dynamics'"
                )
        if self.method == "cd" and self.chain != "dynamics" and self.gamma != _DEFAULTS["gamma"]:
            raise ValueError("gamma is an option of chain='dynamics' (the deterministic dynamics)")

    @classmethod
    def from_preset(cls, preset: str | None = None, **options) -> FitConfig:
        """A config from a named preset, with ``options`` overriding the preset's values.

        ``FitConfig.from_preset("damico2024", epochs=50)`` is the published recipe run for 50
        epochs. Known presets: ``"damico2024"`` (see :data:`PRESETS`). ``preset=None`` is the
        plain constructor.
        """
        unknown = sorted(set(options) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            known = ", ".join(f.name for f in dataclasses.fields(cls))
            raise ValueError(f"unknown fit option(s) {', '.join(unknown)}; known options: {known}")
        if preset is None:
            return cls(**options)
        if preset not in PRESETS:
            known = ", ".join(repr(p) for p in PRESETS)
            raise ValueError(f"preset must be one of {known}; got {preset!r}")
        values = {**PRESETS[preset], **options, "preset": preset}
        return cls(**values)

    def unused_options(self) -> tuple[str, ...]:
        """The options of the methods and parametrisations not in use (at their defaults,
        left out of :meth:`to_dict`); ``method``, ``couplings`` and ``loss`` too at their
        defaults, so that a plain fit's config reads as it did before they existed."""
        unused = [f for f in ("method", "couplings", "loss") if getattr(self, f) == _DEFAULTS[f]]
        for (field, which), names in _OPTIONS_OF.items():
            if getattr(self, field) not in ((which,) if isinstance(which, str) else which):
                unused += names
        unused += [f for f in _CONVERGENCE if getattr(self, f) == _DEFAULTS[f]]
        return tuple(dict.fromkeys(unused))

    def to_dict(self) -> dict[str, Any]:
        """The config as a plain dict of its fields, less :meth:`unused_options`."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> FitConfig:
        """The inverse of :meth:`to_dict`; a ``preset`` key brings the preset's values, which
        the other keys override (a ``[fit]`` table of a TOML config)."""
        check_keys(values, [f.name for f in dataclasses.fields(cls)], "[fit]")
        values = dict(values)
        return cls.from_preset(values.pop("preset", None), **values)

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(FitConfig)}
