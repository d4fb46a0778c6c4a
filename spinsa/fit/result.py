"""The result of a pseudo-likelihood fit, and its file (``kind = "fit"``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spinsa import io
from spinsa.fit.config import FitConfig
from spinsa.fit.convergence import convergence_words

__all__ = ["FIT_KIND", "FitResult", "save_fit", "load_fit"]

FIT_KIND = "fit"
#: The history arrays of a fit, in the order they are stored.
HISTORY = (
    "step_loss",
    "step_grad_norm",
    "step_norm",
    "epoch_loss",
    "epoch_grad_norm",
    "val_loss",
)
#: What the fit file records about convergence (root attributes, also of the experiments' run
#: files as ``fit_<name>``).
CONVERGENCE = ("converged", "criterion", "iterations", "message")


@dataclass(frozen=True)
class FitResult:
    """Couplings and history of a pseudo-likelihood fit.

    Attributes
    ----------
    J : ndarray, shape (N, N, d, d)
        Fitted couplings, zero diagonal blocks, in the fit's dtype.
    config : FitConfig
        The full recipe.
    step_loss : ndarray, shape (n_steps,)
        Objective after every optimiser step: the minibatch's loss (torch; with
        ``site_sampling="one"`` the loss of the drawn site only) or the full-batch L(J) at
        every L-BFGS iteration. The L2 penalty is not included.
    step_grad_norm : ndarray, shape (n_steps,)
        Frobenius norm of the gradient the optimiser saw at that step: the minibatch gradient
        before clipping, penalty included (torch); the full gradient projected on the
        constraint's tangent space (L-BFGS).
    step_norm : ndarray, shape (n_steps,)
        |J| (Frobenius) after every step.
    epoch_loss : ndarray, shape (n_epochs + 1,)
        Full-batch L(J) at ``lam``, without penalty, at the start (index 0) and after every
        epoch (torch) or L-BFGS segment.
    epoch_grad_norm : ndarray, shape (n_epochs + 1,)
        Norm of the full-batch gradient of the objective, projected on the tangent space of
        the constraint (penalty included for ``"l2"``): it goes to zero at a constrained
        optimum.
    wall_time : float
        Seconds spent fitting, summed over interrupted and resumed runs.
    device : str
        Where the arithmetic ran ("cpu", "cuda:0 (NVIDIA H100 ...)").
    val_loss : ndarray, shape (n_epochs + 1,) or (0,)
        Torch backend with ``validation_fraction > 0``: the method's loss on the held-out
        patterns at the start and after every epoch (NaN where not evaluated); empty
        without a validation split.
    converged : bool or None
        Whether the fit met its criterion (:mod:`spinsa.fit.convergence`): L-BFGS, scipy's
        own status (every row's, for ``constraint="row"``); torch, the plateau of the
        monitored loss. False for a fit that diverged (|J| beyond
        :func:`~spinsa.fit.convergence.divergence_norm`; the message starts "diverged").
        None only in files written before spinsa recorded it for torch.
    criterion : str
        The criterion, in words, with its numbers.
    iterations : int
        L-BFGS iterations (``constraint="row"``: the most of any row), or epochs run
        (torch).
    message : str
        How the fit ended.
    resumed_from : int
        Epoch (torch) or segment (L-BFGS) a checkpoint was resumed from; 0 for a fresh fit.
    n_samples_seen : int
        Patterns processed, counted in evaluations of the full objective (a one-site or
        one-row evaluation counts 1/N of a pattern), for throughput figures.
    factors : dict of str to ndarray
        Factorised couplings (``couplings="factorised"`` or ``"shared"``): ``K`` and ``Q``,
        (N, N, H, r, d) or (H, r, d), with J_ij = Σ_h K_ijhᵀ Q_ijh; empty otherwise. ``J`` is
        their expansion.
    """

    J: np.ndarray
    config: FitConfig
    step_loss: np.ndarray
    step_grad_norm: np.ndarray
    step_norm: np.ndarray
    epoch_loss: np.ndarray
    epoch_grad_norm: np.ndarray
    wall_time: float
    device: str
    converged: bool | None = None
    message: str = ""
    resumed_from: int = 0
    n_samples_seen: int = 0
    factors: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    val_loss: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    criterion: str = ""
    iterations: int = 0

    def __post_init__(self):
        J = np.asarray(self.J)
        if J.ndim != 4 or J.shape[0] != J.shape[1] or J.shape[2] != J.shape[3]:
            raise ValueError(f"J must have shape (N, N, d, d), got {J.shape}")
        for name in HISTORY:
            a = np.asarray(getattr(self, name), dtype=np.float64)
            if a.ndim != 1:
                raise ValueError(f"{name} must be one-dimensional, got shape {a.shape}")
            if name.startswith("epoch") and a.size < 1:
                raise ValueError(f"{name} must be one-dimensional and non-empty")
            object.__setattr__(self, name, a)
        if not (len(self.step_loss) == len(self.step_grad_norm) == len(self.step_norm)):
            raise ValueError("step_loss, step_grad_norm and step_norm must have the same length")
        if len(self.epoch_loss) != len(self.epoch_grad_norm):
            raise ValueError("epoch_loss and epoch_grad_norm must have the same length")
        if self.val_loss.size not in (0, self.epoch_loss.size):
            raise ValueError(
                f"val_loss must be empty or as long as epoch_loss ({self.epoch_loss.size}), "
                f"got {self.val_loss.size}"
            )
        if not isinstance(self.config, FitConfig):
            raise ValueError(f"config must be a FitConfig, got {type(self.config).__name__}")

    @property
    def loss(self) -> float:
        """Final full-batch objective L(J) (``epoch_loss[-1]``)."""
        return float(self.epoch_loss[-1])

    @property
    def n_steps(self) -> int:
        return int(self.step_loss.size)

    @property
    def n_epochs(self) -> int:
        return int(self.epoch_loss.size - 1)

    def history(self) -> dict[str, np.ndarray]:
        """The history arrays by name (for writing to HDF5; ``val_loss`` only when the fit
        had a validation split, so that other files keep their layout)."""
        return {n: getattr(self, n) for n in HISTORY if n != "val_loss" or self.val_loss.size}

    def convergence(self) -> dict:
        """``converged``, ``criterion``, ``iterations`` and ``message`` (the attributes a
        file stores)."""
        return {name: getattr(self, name) for name in CONVERGENCE}

    def convergence_line(self) -> str:
        """One line for a report or the command line: the criterion and whether it was met
        (or "not converged after N ... — no verdict")."""
        unit = "epochs" if self.config.backend == "torch" else "iterations"
        return convergence_words(self.convergence(), unit)

    def save(self, path, overwrite: bool = False) -> None:
        """Write J, the history and the config to an HDF5 file (see :func:`save_fit`)."""
        save_fit(path, self, overwrite=overwrite)


def save_fit(path, result, overwrite: bool = False, attrs: dict | None = None) -> Path:
    """Write a :class:`~spinsa.fit.FitResult` as a ``kind="fit"`` spinsa file.

    Layout: ``J`` (N, N, d, d) float32; ``history/step_loss``, ``history/step_grad_norm``,
    ``history/step_norm`` (n_steps,) and ``history/epoch_loss``, ``history/epoch_grad_norm``
    (n_epochs + 1,), ``history/val_loss`` (n_epochs + 1,) with a validation split;
    ``factors/{K, Q}`` for factorised couplings; the FitConfig as the file's config;
    ``loss``, ``wall_time``, ``device``, ``converged``, ``criterion``, ``iterations``,
    ``message``, ``resumed_from``, ``n_samples_seen`` as root attributes, plus ``attrs``
    (e.g. where the data came from). Files written before ``criterion`` and ``iterations``
    existed still load (empty criterion, 0 iterations).
    """
    root = {
        "loss": result.loss,
        "wall_time": float(result.wall_time),
        "device": result.device,
        **result.convergence(),
        "resumed_from": int(result.resumed_from),
        "n_samples_seen": int(result.n_samples_seen),
        **(attrs or {}),
    }
    arrays = {"J": result.J, "history": result.history()}
    if result.factors:
        arrays["factors"] = dict(result.factors)
    return io.write_file(
        path,
        arrays,
        root,
        kind=FIT_KIND,
        config=result.config,
        seeds={"fit": result.config.seed},
        overwrite=overwrite,
    )


def _counted(config: FitConfig, hist: dict) -> int:
    """Iterations (L-BFGS) or epochs (torch) of a file that predates the record of them."""
    if config.backend == "torch":
        return int(len(hist["epoch_loss"]) - 1)
    return int(len(hist["step_loss"]))


def load_fit(path):
    """The :class:`~spinsa.fit.FitResult` stored by :func:`save_fit` (J comes back float32)."""
    info = io.read(path)
    if info.kind != FIT_KIND:
        raise ValueError(f"{path} is a spinsa file of kind {info.kind!r}, not a fit")
    known = {f.name for f in dataclasses.fields(FitConfig)}
    config = FitConfig(**{k: v for k, v in info.config.items() if k in known})
    hist, _ = io.read_group(path, "history")
    hist.setdefault("val_loss", np.zeros(0))  # written before validation splits existed
    factors = io.read_group(path, "factors")[0] if "factors" in info.groups else {}
    a = info.attrs
    return FitResult(
        J=info.array("J"),
        config=config,
        wall_time=float(a["wall_time"]),
        device=a["device"],
        converged=a.get("converged"),
        message=a.get("message", ""),
        criterion=a.get("criterion", ""),
        iterations=int(a["iterations"]) if "iterations" in a else _counted(config, hist),
        resumed_from=int(a.get("resumed_from", 0)),
        n_samples_seen=int(a.get("n_samples_seen", 0)),
        factors=factors,
        **hist,
    )
