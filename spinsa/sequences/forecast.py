"""The bare self-attention as a forecaster: prediction of the last token by the dynamics.

A window of ``context`` values and the k values to predict is encoded; the last token (the k
values) starts either as the zero spin, as the masked task does (``start="zero"``), or as
the last observed value repeated k times, the denoising start (``start="persistence"``);
the design's dynamics (eq. 1) runs; the last token, decoded, is the forecast at every t.
The t to report is chosen on the validation windows, never on the test ones.

With the zero start every score of the last token is 0, so its t = 1 forecast is a fixed
linear average of the window (docs/sequences.md). The persistence start asks the question
a forecaster must answer: does the dynamics improve on persistence? At t = 0 it *is*
persistence: the forecast returned at t = 0 is the observed last value itself, not its
decoding, because ``decode(encode(v))`` is exact only to float32 rounding and only for v
inside the training range [lo, hi] (values outside are clipped by the encoding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from spinsa._checks import check_choice, check_count
from spinsa.fit import fit_pseudolikelihood
from spinsa.model import run
from spinsa.sequences.data import windows
from spinsa.sequences.encoding import SeriesEmbedding

__all__ = ["SpinForecaster", "fit_forecaster", "embedding_for", "best_step", "STARTS"]

#: How the token to predict starts: the zero spin (masked) or the last observed value.
STARTS = ("zero", "persistence")


@dataclass(frozen=True)
class SpinForecaster:
    """Couplings fitted on windows of a series, and the dynamics that forecast with them.

    Parameters
    ----------
    J : ndarray, shape (N, N, d, d)
    embedding : SeriesEmbedding
        Of windows of ``context + k`` values.
    lam, gamma : float
        λ_eval and γ of the dynamics.
    steps : int
        T, the number of steps run.
    start : {"zero", "persistence"}
        The token to predict starts as the zero spin (the masked task's start), or as the
        last observed value in each of its k slots (the denoising start: at t = 0 the
        forecast is persistence, exactly).
    """

    J: np.ndarray
    embedding: SeriesEmbedding
    lam: float = 1.0
    gamma: float = 1.0
    steps: int = 30
    start: Literal["zero", "persistence"] = "zero"

    def __post_init__(self):
        check_choice(self.start, "start", STARTS)

    @property
    def context(self) -> int:
        return self.embedding.length - self.embedding.k

    def _contexts(self, contexts) -> np.ndarray:
        contexts = np.asarray(contexts, dtype=np.float64)
        if contexts.ndim != 2 or contexts.shape[1] != self.context:
            raise ValueError(f"contexts must have shape (n, {self.context}), got {contexts.shape}")
        return contexts

    def inputs(self, contexts) -> np.ndarray:
        """(n, context) values -> (n, N, d) spins; the last token is the zero spin
        (``start="zero"``) or the encoded last value of each context (``"persistence"``)."""
        contexts = self._contexts(contexts)
        k = self.embedding.k
        if self.start == "persistence":
            pad = np.repeat(contexts[:, -1:], k, axis=1)
        else:
            pad = np.full((contexts.shape[0], k), self.embedding.lo)
        x = self.embedding.encode(np.hstack([contexts, pad]))
        if self.start == "zero":
            x[:, -1] = 0.0
        return x

    def trajectories(self, contexts, steps: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The forecast of the next value at every t = 0..T, and the final states.

        Returns
        -------
        forecasts : ndarray, shape (T + 1, n)
            The first value of the decoded last token. At t = 0: ``lo`` (the zero spin)
            for ``start="zero"``; the last value of each context itself, unrounded and
            unclipped, for ``start="persistence"``.
        final : ndarray, shape (n, N, d)
            The states at t = T.
        """
        contexts = self._contexts(contexts)
        T = self.steps if steps is None else check_count(steps, "steps", 1)
        traj = run(self.inputs(contexts), self.J, self.lam, T, gamma=self.gamma)
        n, L = traj.states.shape[1], self.embedding.length
        decoded = self.embedding.decode(traj.states.reshape(-1, *traj.states.shape[2:]))
        forecasts = decoded.reshape(-1, n, L)[:, :, self.context]
        if self.start == "persistence":  # exactly persistence: no float32 or clipping error
            forecasts[0] = contexts[:, -1]
        return forecasts, traj.states[-1]

    def forecast(self, contexts, t: int) -> np.ndarray:
        """(n, context) -> (n,): the next value read at step t."""
        t = check_count(t, "t", 0)
        return self.trajectories(contexts, steps=max(t, 1))[0][t]

    def rolling(self, context, horizon: int, t: int) -> np.ndarray:
        """Multi-step forecast: predict, append the prediction, slide, repeat.
        ``context`` (context,) -> (horizon,)."""
        window = list(np.asarray(context, dtype=np.float64))
        out = []
        for _ in range(check_count(horizon, "horizon", 1)):
            value = float(self.forecast(np.array([window[-self.context :]]), t)[0])
            out.append(value)
            window.append(value)
        return np.array(out)


def fit_forecaster(
    train,
    context: int,
    *,
    k: int = 1,
    d: int | None = None,
    seed: int = 0,
    lam_eval: float = 1.0,
    gamma: float = 1.0,
    steps: int = 30,
    start: str = "zero",
    checkpoint=None,
    progress: bool = False,
    **fit_options,
):
    """Fit the couplings by pseudo-likelihood on every training window of ``context + k``
    values (stride 1), with the range of the training part as the embedding's [lo, hi].

    Parameters
    ----------
    train : array_like, shape (T,)
        The (normalised) training part.
    context, k, d, seed
        Values seen, values per token, spin dimension, seed of F and of the fit.
    lam_eval, gamma, steps, start
        The forecaster's dynamics and the start of its last token (:class:`SpinForecaster`).
    checkpoint, progress, **fit_options
        Passed to :func:`spinsa.fit_pseudolikelihood` (``backend``, ``lam``, ``max_iter``...).

    Returns
    -------
    (SpinForecaster, FitResult)
    """
    train = np.asarray(train, dtype=np.float64)
    context, k = check_count(context, "context", 1), check_count(k, "k", 1)
    check_choice(start, "start", STARTS)  # before the fit, not after it
    if context % k:
        raise ValueError(f"context {context} must be a multiple of k = {k}")
    emb = embedding_for(train, context, k, d, seed)
    xi = emb.encode(windows(train, context + k))
    fit = fit_pseudolikelihood(
        xi, seed=seed, checkpoint=checkpoint, progress=progress, **fit_options
    )
    forecaster = SpinForecaster(fit.J, emb, lam=lam_eval, gamma=gamma, steps=steps, start=start)
    return forecaster, fit


def embedding_for(
    train, context: int, k: int = 1, d: int | None = None, seed: int = 0
) -> SeriesEmbedding:
    """The embedding of windows of ``context + k`` values, [lo, hi] the training range."""
    train = np.asarray(train, dtype=np.float64)
    return SeriesEmbedding(
        context + k, lo=float(train.min()), hi=float(train.max()), k=k, d=d, seed=seed
    )


def best_step(forecasts, targets) -> tuple[int, np.ndarray]:
    """The t >= 1 of lowest mean squared error, and the error at every t.

    ``forecasts`` (T + 1, n), ``targets`` (n,). t = 0 is never chosen: it is the start (the
    zero spin, or persistence itself), not a step of the dynamics."""
    mse = ((np.asarray(forecasts) - np.asarray(targets)[None]) ** 2).mean(axis=1)
    return int(np.argmin(mse[1:]) + 1), mse
