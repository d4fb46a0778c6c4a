"""The validation split and the convergence record of the epoch fits (torch backend).

:func:`split_validation` holds out ``validation_fraction`` of the training patterns (a
subset drawn from the fit's seed, on a stream of its own, so the initial couplings and the
minibatch order of a fit without a split are untouched). :class:`EpochMonitor` evaluates
the method's loss on them after every evaluated epoch, decides the plateau criterion of
:mod:`spinsa.fit.convergence` and writes the outcome into the fit's state.

The validation loss of each method:

- ``"pl"`` and ``"cd"``: the pseudo-likelihood L(J) of the held-out patterns (for CD, whose
  own objective has no tractable value, the pseudo-likelihood is the proxy);
- ``"bptt"``: the task's loss (the mean squared distance to the clean spins) from one fixed
  corruption of each held-out pattern, averaged over τ = ``tau_min`` .. ``tau_max``, the
  expectation of the training loss over its random τ.
"""

from __future__ import annotations

import math

import numpy as np

from spinsa.fit.convergence import plateau_criterion, plateau_index
from spinsa.fit.objective import full_objective

__all__ = ["split_validation", "EpochMonitor"]

_SPLIT_STREAM, _CORRUPTION_STREAM = 2, 3  # children of SeedSequence(seed): 0 init, 1 loop
_BPTT_CHUNK = 64  # held-out patterns per torch pass: bounds the (chunk, N, N, d) intermediates


def _stream(seed: int, child: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(child + 1)[child])


def split_validation(xi: np.ndarray, fraction: float, seed: int):
    """(training patterns, held-out patterns or None): ``round(fraction P)`` patterns drawn
    from ``seed`` are held out, the rest keep their order.

    Raises ValueError when either part would be empty.
    """
    if fraction <= 0:
        return xi, None
    P = xi.shape[0]
    n_val = int(round(fraction * P))
    if not 1 <= n_val < P:
        raise ValueError(
            f"validation_fraction = {fraction:g} of {P} patterns leaves "
            f"{n_val} held out and {P - n_val} to train on; both must be at least 1"
        )
    held = np.zeros(P, dtype=bool)
    held[_stream(seed, _SPLIT_STREAM).choice(P, n_val, replace=False)] = True
    return np.ascontiguousarray(xi[~held]), np.ascontiguousarray(xi[held])


class EpochMonitor:
    """Validation loss, the monitored curve and the plateau criterion of an epoch fit.

    Parameters
    ----------
    config : FitConfig
    xi_val : ndarray, shape (P_val, N, d), or None
        The held-out patterns (:func:`split_validation`).
    steps_per_epoch : int
        Optimiser steps in one epoch (to average the minibatch losses per epoch).
    """

    def __init__(self, config, xi_val, steps_per_epoch: int):
        self.config, self.xi_val, self.steps_per_epoch = config, xi_val, steps_per_epoch
        self._pl = None
        self._x0 = None
        if xi_val is not None and config.method == "bptt":
            from spinsa.fit.backprop import corrupt

            rng = _stream(config.seed, _CORRUPTION_STREAM)
            self._x0 = corrupt(xi_val, config.task, rng, config.mask_fraction, config.noise_std)
        elif xi_val is not None:
            self._pl = full_objective(xi_val, config.score_clamp)
            self._G = np.empty((xi_val.shape[1],) * 2 + (xi_val.shape[2],) * 2, xi_val.dtype)

    @property
    def monitored(self) -> str:
        """What the criterion watches, in words."""
        c = self.config
        if self.xi_val is not None:
            if c.method == "bptt":
                return f"the validation task loss (mean over τ = {c.tau_min}..{c.tau_max})"
            return "the validation pseudo-likelihood L(J)"
        if c.method == "pl":
            return "the full-batch training L(J)"
        return f"the epoch's mean minibatch {c.method.upper()} loss"

    @property
    def criterion(self) -> str:
        c = self.config
        return plateau_criterion(c.patience, c.min_improvement, self.monitored)

    def validation_loss(self, J: np.ndarray) -> float:
        """The method's loss on the held-out patterns at couplings ``J`` (N, N, d, d)."""
        if self._pl is not None:
            return float(self._pl(np.ascontiguousarray(J, self.xi_val.dtype), self.config.lam,
                                  self._G))  # fmt: skip
        return self._bptt_loss(J)

    def _bptt_loss(self, J: np.ndarray) -> float:
        from spinsa._torch import import_torch
        from spinsa.fit.backprop import torch_step

        torch, c = import_torch(), self.config
        total, n = 0.0, len(self.xi_val)
        Jt = torch.from_numpy(np.ascontiguousarray(J, self.xi_val.dtype))
        exclude = torch.eye(J.shape[0], dtype=torch.bool)
        with torch.no_grad():
            for s in range(0, n, _BPTT_CHUNK):
                x = torch.from_numpy(self._x0[s : s + _BPTT_CHUNK])
                clean = torch.from_numpy(self.xi_val[s : s + _BPTT_CHUNK])
                for t in range(1, c.tau_max + 1):
                    x = torch_step(torch, x, Jt, c.lam, c.gamma, exclude)
                    if t >= c.tau_min:  # per-pattern mean over tokens of |x_i - ξ_i|²
                        total += float((x - clean).pow(2).sum(dim=2).mean(dim=1).sum())
        return total / (n * (c.tau_max - c.tau_min + 1))

    def record(self, state, loss: float, J: np.ndarray) -> None:
        """After an epoch's full-batch evaluation (``loss``, NaN when not evaluated): the
        validation loss at ``J``, when there is a split."""
        if self.xi_val is not None:
            state.val_loss.append(self.validation_loss(J) if math.isfinite(loss) else math.nan)

    def curve(self, state) -> np.ndarray:
        """The monitored curve so far (see :mod:`spinsa.fit.convergence`)."""
        if self.xi_val is not None:
            return np.asarray(state.val_loss, dtype=np.float64)
        if self.config.method == "pl":
            return np.asarray(state.epoch_loss, dtype=np.float64)
        steps = np.asarray(state.step_loss, dtype=np.float64)
        n = steps.size // self.steps_per_epoch
        return steps[: n * self.steps_per_epoch].reshape(n, -1).mean(axis=1)

    def plateau(self, state) -> int | None:
        """The index into the monitored curve's finite points where the criterion was met."""
        return plateau_index(self.curve(state), self.config.patience, self.config.min_improvement)

    def should_stop(self, state) -> bool:
        """Early stopping is on and the criterion is met."""
        return self.config.early_stopping and self.plateau(state) is not None

    def finish(self, state) -> None:
        """Write ``converged``, ``criterion``, ``iterations`` (epochs run) and ``message``."""
        at = self.plateau(state)
        state.criterion = self.criterion
        state.iterations = int(state.epoch)
        state.converged = at is not None
        stopped = " (stopped early)" if self.config.early_stopping and at is not None else ""
        state.message = (
            f"completed {state.epoch} of {self.config.epochs} epochs{stopped}; criterion "
            + (f"met at evaluation {at}" if at is not None else "not met")
        )
