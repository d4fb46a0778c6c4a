"""The numbers that decide fidelity, from one task's stored arrays.

:func:`summarize_arrays` turns an evaluation (:func:`spinsa.io.results.read_evaluation`) into
the numbers a report states: the best t, errors at t = 0, 1 and T, how far the curve rises
and falls in standard errors, and how the best error compares with every simple reference
(:mod:`spinsa.references`).

The statistics these numbers rest on are defined here, once: :func:`combined_z` (two means
apart in combined standard errors), :func:`significant` (beyond :data:`SIGNIFICANT_Z`),
:func:`best_time`, and two lifetimes: :func:`significant_gain_lifetime` (how long a mean
error stays significantly below a reference's) and :func:`below_reference_lifetimes` (how
long each image's error stays below the reference's on that image). Means and standard
errors are :func:`spinsa.tasks.mean_sem`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from spinsa import _draw
from spinsa.analysis._results import AnalysisResult, labels
from spinsa.analysis.lifetimes import Lifetimes, error_lifetimes, overlap_lifetimes
from spinsa.io.results import read_evaluation
from spinsa.tasks import mean_sem

__all__ = [
    "SIGNIFICANT_Z",
    "ErrorCurves",
    "below_reference_lifetimes",
    "best_time",
    "combined_z",
    "significant",
    "significant_gain_lifetime",
    "summarize_arrays",
    "summarize_references",
    "paired_gain_z",
    "read_summaries",
]


def best_time(mean, first: int = 0) -> int:
    """The t of the first minimum of an error curve over t >= ``first`` (``first`` when the
    curve holds no finite value there).

    The masked task counts from t = 1 (``first=1``: its t = 0 is the masked input, not a
    prediction, and the paper plots it from t = 1); denoising from t = 0.
    """
    tail = np.asarray(mean, dtype=np.float64)[first:]
    return first + int(np.nanargmin(tail)) if np.isfinite(tail).any() else first


def _at(curve: np.ndarray, t: int) -> float:
    return float(curve[t]) if 0 <= t < curve.shape[0] else math.nan


SIGNIFICANT_Z = 3.0  # a difference counts when it exceeds 3 combined standard errors


def combined_z(a, sem_a, b, sem_b):
    """How many combined standard errors ``a`` lies above ``b``.

    z = (a - b) / sqrt(sem_a² + sem_b²), elementwise on numbers or arrays (broadcast); NaN
    where the combined standard error is 0 or not finite. A model beats a reference when
    ``significant(combined_z(reference, reference_sem, error, error_sem))``.

    Parameters
    ----------
    a, sem_a : float or array_like
        The first estimate and its standard error.
    b, sem_b : float or array_like
        The second estimate and its standard error (all four broadcast together).

    Returns
    -------
    float, or ndarray of float64 for array input
    """
    a, sem_a, b, sem_b = (np.asarray(v, dtype=np.float64) for v in (a, sem_a, b, sem_b))
    with np.errstate(divide="ignore", invalid="ignore"):
        den = np.sqrt(sem_a * sem_a + sem_b * sem_b)
        z = np.where(np.isfinite(den) & (den > 0), (a - b) / den, np.nan)
    return float(z) if z.ndim == 0 else z


def significant(z):
    """Whether z exceeds :data:`SIGNIFICANT_Z` (False for NaN): bool, or an array of them."""
    out = np.asarray(z, dtype=np.float64) > SIGNIFICANT_Z
    return bool(out) if out.ndim == 0 else out


def significant_gain_lifetime(
    error, error_sem, reference, reference_sem, times, first: int = 0
) -> Lifetimes:
    """How long a mean error curve stays significantly below a reference's error.

    With z(t) = ``combined_z(reference, reference_sem, error(t), error_sem(t))``, the
    stretch around the peak of z during which z(t) > :data:`SIGNIFICANT_Z`
    (:func:`~spinsa.analysis.overlap_lifetimes` of z; times before ``first`` and undefined
    z count as 0).

    Parameters
    ----------
    error, error_sem : ndarray, shape (T,)
        The mean error over the test images at ``times`` and its standard error.
    reference, reference_sem : float
        The reference's error and its standard error.
    times : ndarray of int, shape (T,)
    first : int
        The first time that counts (1 for the masked task: t = 0 is the masked input).

    Returns
    -------
    Lifetimes
        Of one curve: every field has shape (1,).
    """
    times = np.asarray(times)
    z = combined_z(reference, reference_sem, error, error_sem)
    z = np.where((times >= first) & np.isfinite(z), z, 0.0)
    return overlap_lifetimes(z[:, None], times, SIGNIFICANT_Z)


def below_reference_lifetimes(errors, times, reference_errors, first: int = 0) -> Lifetimes:
    """How long each image's error stays below the reference's error on that image, around
    its minimum over t >= ``first`` (:func:`~spinsa.analysis.error_lifetimes`).

    Parameters
    ----------
    errors : ndarray, shape (T, P)
        The error of every test image at ``times``.
    times : ndarray of int, shape (T,)
    reference_errors : ndarray, shape (P,)
        The reference's error on every image.
    first : int
        The first time that counts (1 for the masked task).

    Returns
    -------
    Lifetimes
        With ``criterion = "error"``, one entry per image.
    """
    return error_lifetimes(np.asarray(errors)[first:], np.asarray(times)[first:], reference_errors)


def summarize_references(arrays: dict[str, Any], best_error: float, best_sem: float) -> dict:
    """The references of one task's arrays against the model's best error.

    Parameters
    ----------
    arrays : dict
        One task's arrays (as in :func:`summarize_arrays`); its ``references`` hold, per
        name, the errors ``all`` and ``masked`` of shape (n,), one per test image.
    best_error, best_sem : float
        The model's best mean error and its standard error.

    Returns
    -------
    dict
        ``name -> {"error", "sem", "masked_error", "masked_sem", "z"}`` over all pixels
        (masked pixels for ``masked_*``), with z = (reference - best) / combined standard
        error: the model beats a reference when z > :data:`SIGNIFICANT_Z`.
    """
    out = {}
    for name, errs in arrays.get("references", {}).items():
        m, e, _ = mean_sem(errs["all"])
        mm, me, _ = mean_sem(errs["masked"])
        out[name] = {
            "error": float(m),
            "sem": float(e),
            "masked_error": float(mm),
            "masked_sem": float(me),
            "z": combined_z(float(m), float(e), best_error, best_sem),
        }
    return out


def summarize_arrays(task: str, arrays: dict[str, Any]) -> dict[str, Any]:
    """The numbers that decide fidelity, from one task's arrays.

    Errors are over all pixels unless named ``masked_*`` (masked pixels only). The best t
    is the first minimum of the mean error over t >= 1 for the masked task (the paper plots
    it from t = 1; the masked input at t = 0 is not a prediction) and over t >= 0 for
    denoising. ``rise_z`` is (error at T - best error) over their combined standard error;
    ``gain_z`` is (error at t = 0 - best error) over theirs. ``references`` compares the
    best error with every simple predictor (:func:`summarize_references`); ``beats`` lists
    those it is below by more than 3 combined standard errors, ``best_reference`` names the
    one with the smallest error, and ``transient_memory`` is True when the model beats that
    one too (the only claim of a transient memory the data can carry).

    Parameters
    ----------
    task : {"masked", "denoise"}
        The task, which decides where the search for the best t starts.
    arrays : dict
        One task's arrays in the layout of ``/evaluation/<task>``
        (:func:`spinsa.io.results.read_evaluation`): ``mean/all`` and ``sem/all`` of shape
        (T + 1,), ``mean/masked``, ``mean_image_corr_mean``, ``mean_image_corr_sem``,
        ``final_coherence`` of shape (n,), ``step_change`` and ``references``.

    Returns
    -------
    dict
        ``T, error_t0, sem_t0, error_t1, sem_t1, best_t, best_error, best_sem, error_T,
        sem_T, rise_z, gain_z, masked_error_t0, masked_error_best, masked_error_T,
        corr_T, corr_T_sem, corr_t0, coherence_T, coherence_T_sem, step_change_T,
        references, beats, best_reference, transient_memory``.
    """
    mean, sem = arrays["mean"]["all"], arrays["sem"]["all"]
    T = int(mean.shape[0] - 1)
    best = best_time(mean, 1 if task == "masked" and T >= 1 else 0)
    m_masked = arrays["mean"]["masked"]
    corr, corr_sem = arrays["mean_image_corr_mean"], arrays["mean_image_corr_sem"]
    coh = np.asarray(arrays["final_coherence"], dtype=np.float64)
    coh = coh[np.isfinite(coh)]
    change = arrays["step_change"]
    out = {
        "T": T,
        "error_t0": _at(mean, 0),
        "sem_t0": _at(sem, 0),
        "error_t1": _at(mean, 1),
        "sem_t1": _at(sem, 1),
        "best_t": best,
        "best_error": _at(mean, best),
        "best_sem": _at(sem, best),
        "error_T": _at(mean, T),
        "sem_T": _at(sem, T),
        "masked_error_t0": _at(m_masked, 0),
        "masked_error_best": _at(m_masked, best),
        "masked_error_T": _at(m_masked, T),
        "corr_t0": _at(corr, 0),
        "corr_T": _at(corr, T),
        "corr_T_sem": _at(corr_sem, T),
        "coherence_T": float(coh.mean()) if coh.size else math.nan,
        "coherence_T_sem": float(coh.std(ddof=1) / math.sqrt(coh.size))
        if coh.size > 1
        else math.nan,
        "step_change_T": float(change[-1]) if change.size else math.nan,
    }
    out["rise_z"] = combined_z(out["error_T"], out["sem_T"], out["best_error"], out["best_sem"])
    out["gain_z"] = combined_z(out["error_t0"], out["sem_t0"], out["best_error"], out["best_sem"])
    refs = summarize_references(arrays, out["best_error"], out["best_sem"])
    out["references"] = refs
    out["beats"] = [n for n, r in refs.items() if significant(r["z"])]
    best_ref = min(refs, key=lambda n: refs[n]["error"]) if refs else None
    out["best_reference"] = best_ref
    out["transient_memory"] = best_ref is not None and best_ref in out["beats"]
    return out


def read_summaries(path, model: str | None = None, tasks=("masked", "denoise")) -> dict:
    """``task -> summarize_arrays(...)`` for the tasks a file holds for ``model``."""
    out = {}
    for task in tasks:
        try:
            arrays, _ = read_evaluation(path, task, model)
        except KeyError:
            continue
        out[task] = summarize_arrays(task, arrays)
    return out


PIXELS = ("all", "masked", "visible")
CURVES = tuple(f"{stat}_{part}" for part in PIXELS for stat in ("mean", "sem"))


@dataclass(frozen=True)
class ErrorCurves(AnalysisResult):
    """Task errors of several couplings from the same corrupted images.

    Attributes
    ----------
    times : ndarray of int64, shape (T + 1,)
    errors : ndarray of float64, shape (M, T + 1, P)
        Mean squared pixel error over all pixels of every image, per model.
    mean_all, sem_all, mean_masked, sem_masked, mean_visible, sem_visible
        ndarray of float64, shape (M, T + 1): mean over images and its standard error
        (masked and visible pixels: NaN without a mask).
    models : tuple of str, length M
    task : str
    """

    _coords = {"M": "models", "T+1": "times"}

    times: np.ndarray
    errors: np.ndarray
    mean_all: np.ndarray
    sem_all: np.ndarray
    mean_masked: np.ndarray
    sem_masked: np.ndarray
    mean_visible: np.ndarray
    sem_visible: np.ndarray
    models: tuple[str, ...] = ()
    task: str = ""

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "models", tuple(str(m) for m in self.models))
        M, T1 = len(self.models), self.times.shape[0]
        if self.errors.ndim != 3 or self.errors.shape[:2] != (M, T1):
            raise ValueError(f"errors must have shape ({M}, {T1}, P), got {self.errors.shape}")
        for name in CURVES:
            if getattr(self, name).shape != (M, T1):
                raise ValueError(f"{name} must have shape ({M}, {T1})")

    def plot(self, ax=None, *, first: int = 0):
        """Mean error of every model against t with standard-error bands.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure when None.
        first : int
            First record drawn (1 for the masked task, whose t = 0 is the masked input).

        Returns
        -------
        matplotlib.axes.Axes
        """
        ax = _draw.axes(ax)
        for m, model in enumerate(labels(self.models, self.mean_all.shape[0])):
            t, mean, sem = self.times[first:], self.mean_all[m, first:], self.sem_all[m, first:]
            _draw.band(ax, t, mean, sem, model, f"C{m}", ls="-" if m == 0 else "--")
        _draw.finish(ax, f"{self.task} task" if self.task else "errors",
                     ylabel="mean squared error (all pixels)")  # fmt: skip
        return ax


def paired_gain_z(errors, other_errors) -> float:
    """The gain of a model over another in standard errors of the paired difference of
    their errors on the same inputs: mean(other - errors) / its standard error (> 0: the
    model's errors are smaller; 0 when the difference has no spread).

    Parameters
    ----------
    errors, other_errors : array_like, shape (n,)
        Per-input errors of the two models, on the same n inputs.

    Returns
    -------
    float
        mean(other_errors - errors) / its standard error; 0.0 when that is 0.
    """
    mean, sem, _ = mean_sem(np.asarray(other_errors) - np.asarray(errors))
    return float(mean / sem) if sem > 0 else 0.0
