"""The one early-stopping rule of spinsa's trained models, and what a model records of it.

The rule, on a validation curve v_0, v_1, ... (one loss per epoch, lower is better): let
b_e = min(v_0, ..., v_e) be the best loss after epoch e. Training has **converged** after
epoch e >= ``patience`` when the best loss improved by less than ``rel_tol`` (relative) over
the last ``patience`` epochs,

    b_{e - patience} - b_e  <  rel_tol · |b_{e - patience}|     (or b_e = b_{e - patience}),

and :func:`stopping_epoch` is the first such e. The default, ``rel_tol = 0.005`` and
``patience = 5``, reads "less than 0.5 % relative improvement of the best validation loss
over 5 epochs"; ``rel_tol = 0`` is the classic "``patience`` epochs without a lower loss".
The running best makes the rule deaf to noise above the best: a noisy curve stops as soon
as its best stalls. A NaN epoch counts as no improvement.

A model that reaches its maximum number of epochs before the rule holds has **not
converged**, and the reports give no verdict for it (docs/convergence.md).

Pure numpy, no torch: the torch trainer (:mod:`spinsa._training`), its callers' files and
the reports all read the rule from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from spinsa._checks import check_count, check_real

__all__ = [
    "DEFAULT_PATIENCE",
    "DEFAULT_REL_TOL",
    "Convergence",
    "check_rule",
    "criterion_text",
    "not_converged_text",
    "stopping_epoch",
]

DEFAULT_REL_TOL = 0.005
DEFAULT_PATIENCE = 5


def check_rule(rel_tol: float, patience: int) -> tuple[float, int]:
    """``(rel_tol, patience)`` as (float in [0, 1), int >= 1), or a ValueError that says which."""
    rel_tol = check_real(rel_tol, "rel_tol")
    if not 0.0 <= rel_tol < 1.0:
        raise ValueError(
            f"rel_tol must be in [0, 1) (0.005: stop below 0.5 % relative improvement), "
            f"got {rel_tol!r}"
        )
    return rel_tol, check_count(patience, "patience", 1)


def criterion_text(rel_tol: float = DEFAULT_REL_TOL, patience: int = DEFAULT_PATIENCE) -> str:
    """The rule in words, as files and reports state it.

    >>> criterion_text(0.005, 5)
    'less than 0.5 % relative improvement of the best validation loss over 5 epochs'
    """
    rel_tol, patience = check_rule(rel_tol, patience)
    if rel_tol == 0:
        return f"no lower validation loss for {patience} epoch{'s' * (patience > 1)}"
    return (
        f"less than {100 * rel_tol:.3g} % relative improvement of the best validation loss "
        f"over {patience} epoch{'s' * (patience > 1)}"
    )


def stopping_epoch(
    curve, rel_tol: float = DEFAULT_REL_TOL, patience: int = DEFAULT_PATIENCE
) -> int | None:
    """The first epoch after which the rule of this module holds, or None.

    Parameters
    ----------
    curve : array_like, shape (n_epochs,)
        The validation loss after every epoch, in order (lower is better).
    rel_tol : float
        Relative improvement of the best loss, in [0, 1), below which training stops.
    patience : int
        Epochs over which the improvement is measured (>= 1).

    Returns
    -------
    int or None
        e (0-based; training stops after e + 1 epochs), the least e >= ``patience`` with
        b[e - patience] - b[e] < rel_tol · |b[e - patience]| or b[e] == b[e - patience],
        b the running minimum; None when no epoch of ``curve`` meets it (among them every
        curve of at most ``patience`` epochs).
    """
    rel_tol, patience = check_rule(rel_tol, patience)
    v = np.asarray(curve, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"curve must be one loss per epoch, shape (n_epochs,), got {v.shape}")
    if v.size <= patience:
        return None
    best = np.fmin.accumulate(np.where(np.isnan(v), np.inf, v))  # NaN: no improvement
    before, now = best[:-patience], best[patience:]
    with np.errstate(invalid="ignore"):  # inf - inf: no finite loss yet, no improvement
        stalled = (now == before) | (before - now < rel_tol * np.abs(before))
    hits = np.flatnonzero(stalled)
    return int(hits[0]) + patience if hits.size else None


def not_converged_text(n_used: int | None, unit: str = "epochs") -> str:
    """What a report prints in place of a verdict drawn from a model that did not converge:
    ``"not converged after N epochs — no verdict"`` (``unit``: "iterations" for an L-BFGS
    fit). ``n_used`` None or NaN: the file records no convergence (an older spinsa).

    >>> not_converged_text(1), not_converged_text(7, "iterations")
    ('not converged after 1 epoch — no verdict', 'not converged after 7 iterations — no verdict')
    """
    if n_used is None or (isinstance(n_used, float) and math.isnan(n_used)):
        return "no convergence recorded — no verdict"
    n = int(n_used)
    if n == 1 and unit.endswith("s"):
        unit = unit[:-1]  # 1 epoch, 1 iteration
    return f"not converged after {n} {unit} — no verdict"


@dataclass(frozen=True)
class Convergence:
    """Whether a training run converged, by which rule, after how many epochs.

    Attributes
    ----------
    converged : bool
        The rule held within ``max_epochs`` (always False without a validation curve).
    epochs_used : int
        Epochs trained.
    max_epochs : int
        The cap.
    best_epoch : int
        The epoch (0-based) of the lowest validation loss (the first of equal ones; a NaN
        counts as +inf), whose weights the model keeps; -1 without a validation curve.
    rel_tol, patience : float, int
        The rule.
    criterion : str
        The rule in words (:func:`criterion_text`).
    """

    converged: bool
    epochs_used: int
    max_epochs: int
    best_epoch: int
    rel_tol: float
    patience: int
    criterion: str

    def __post_init__(self) -> None:
        if not isinstance(self.converged, (bool, np.bool_)):
            raise ValueError(f"converged must be True or False, got {self.converged!r}")
        object.__setattr__(self, "converged", bool(self.converged))
        rel_tol, patience = check_rule(self.rel_tol, self.patience)
        object.__setattr__(self, "rel_tol", rel_tol)
        object.__setattr__(self, "patience", patience)
        for name, minimum in (("epochs_used", 0), ("max_epochs", 1), ("best_epoch", -1)):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
            object.__setattr__(self, name, int(value))

    @classmethod
    def of_curve(
        cls,
        val_loss,
        max_epochs: int,
        rel_tol: float = DEFAULT_REL_TOL,
        patience: int = DEFAULT_PATIENCE,
        epochs_used: int | None = None,
    ) -> Convergence:
        """The record of a run whose validation curve is ``val_loss`` (empty: none).

        ``epochs_used`` defaults to the curve's length. The run converged when
        :func:`stopping_epoch` finds an epoch within ``max_epochs``.
        """
        v = np.asarray(val_loss, dtype=np.float64).reshape(-1)
        stop = stopping_epoch(v[:max_epochs], rel_tol, patience)
        best = int(np.argmin(np.where(np.isnan(v), np.inf, v))) if v.size else -1
        return cls(
            converged=stop is not None,
            epochs_used=len(v) if epochs_used is None else epochs_used,
            max_epochs=max_epochs,
            best_epoch=best,
            rel_tol=rel_tol,
            patience=patience,
            criterion=criterion_text(rel_tol, patience),
        )

    def to_attrs(self) -> dict[str, Any]:
        """Plain values, for HDF5 attributes and checkpoints (:meth:`from_attrs` inverts)."""
        return asdict(self)

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> Convergence | None:
        """The record stored by :meth:`to_attrs` in ``attrs``; None when ``attrs`` holds none
        (a file of a spinsa before this record)."""
        if "converged" not in attrs:
            return None
        return cls(**{k: attrs[k] for k in cls.__dataclass_fields__})

    @property
    def no_verdict(self) -> str | None:
        """None when converged, else :func:`not_converged_text` of the epochs used."""
        return None if self.converged else not_converged_text(self.epochs_used)

    def describe(self) -> str:
        """One phrase: ``"converged after 12 of at most 100 epochs (criterion)"`` or the
        ``no_verdict`` text with the criterion."""
        if self.converged:
            return (
                f"converged after {self.epochs_used} of at most {self.max_epochs} epochs "
                f"({self.criterion})"
            )
        why = "no validation curve" if self.best_epoch < 0 else self.criterion
        return f"{self.no_verdict} ({why}; at most {self.max_epochs} epochs)"
