"""Simple one-step forecasts every sequence model stands beside.

- persistence: the next value is the last one seen;
- the training mean: 0 on the normalised series;
- AR(L): a linear model of the last L values with an intercept, fitted by least squares on
  the training windows (:func:`fit_ar`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spinsa._checks import check_count

__all__ = [
    "ARModel",
    "SPIN_MODEL",
    "SPIN_MODELS",
    "fit_ar",
    "is_reference",
    "persistence",
    "training_mean",
    "reference_forecasts",
]


#: The bare self-attention's label among the forecasts (files store it as a key).
SPIN_MODEL = "bare SA"
#: The label of each start of the forecaster's last token (``SpinForecaster.start``).
SPIN_MODELS = {"zero": SPIN_MODEL, "persistence": "bare SA (persistence start)"}


@dataclass(frozen=True)
class ARModel:
    """x_t = intercept + Σ_l coef[l] x_{t-L+l}: ``coef`` (L,) oldest lag first."""

    coef: np.ndarray
    intercept: float

    @property
    def order(self) -> int:
        return int(self.coef.size)

    def predict(self, contexts) -> np.ndarray:
        """(n, C) windows of C >= L values -> (n,) forecasts from their last L values."""
        contexts = np.asarray(contexts, dtype=np.float64)
        return contexts[:, -self.order :] @ self.coef + self.intercept


def fit_ar(contexts, targets, order: int) -> ARModel:
    """Least-squares AR(``order``) on training windows.

    Parameters
    ----------
    contexts : array_like, shape (n, C)
        The values before each target, C >= order.
    targets : array_like, shape (n,)
    order : int

    Returns
    -------
    ARModel
        ``coef`` (order,), oldest lag first, and ``intercept``.
    """
    X = np.asarray(contexts, dtype=np.float64)
    y = np.asarray(targets, dtype=np.float64)
    order = check_count(order, "order", 1)
    if X.ndim != 2 or X.shape[1] < order or y.shape != (X.shape[0],):
        raise ValueError(
            f"need contexts (n, C >= {order}) and targets (n,), got {X.shape} and {y.shape}"
        )
    if X.shape[0] <= order:
        raise ValueError(f"{X.shape[0]} windows cannot determine AR({order}): need more")
    A = np.hstack([X[:, -order:], np.ones((X.shape[0], 1))])
    solution = np.linalg.lstsq(A, y, rcond=None)[0]
    return ARModel(coef=solution[:-1], intercept=float(solution[-1]))


def persistence(contexts) -> np.ndarray:
    """The last value of every window: (n, C) -> (n,)."""
    return np.asarray(contexts, dtype=np.float64)[:, -1].copy()


def training_mean(contexts) -> np.ndarray:
    """0 for every window: the training mean of a series normalised on its training part."""
    return np.zeros(np.asarray(contexts).shape[0])


def is_reference(name: str) -> bool:
    """Whether ``name`` is one of :func:`reference_forecasts`' names."""
    return name in ("persistence", "training mean") or name.startswith("AR(")


def reference_forecasts(ar: ARModel, contexts) -> dict[str, np.ndarray]:
    """``name -> (n,) forecasts`` of persistence, the training mean and ``ar``."""
    return {
        "persistence": persistence(contexts),
        "training mean": training_mean(contexts),
        f"AR({ar.order})": ar.predict(contexts),
    }
