"""Reading experiment results back from HDF5, and the numbers that summarise a task.

Three kinds of file hold evaluations, with the same layout under a prefix:

* a run file (``kind = "experiment"``, from :func:`spinsa.experiments.train` or
  :func:`~spinsa.experiments.run_experiment`): ``evaluation/<task>/...`` at the root;
* an evaluation file (``kind = "evaluation"``): the same;
* a reproduce file (``kind = "reproduce"``): one group per model, ``models/<name>/...``.

Figures (:mod:`spinsa.plotting`) and reports read through these functions; nothing here
runs the dynamics again.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "REPRODUCE_KIND",
    "model_names",
    "model_prefix",
    "read_tree",
    "read_evaluation",
    "summarize_arrays",
    "summarize_references",
    "read_summaries",
]

REPRODUCE_KIND = "reproduce"
_ERROR_FIELDS = ("all", "masked", "visible")


def model_names(path) -> list[str]:
    """The models whose results a file holds (one for a run file), in file order."""
    from spinsa import io

    info = io.read(path)
    if info.kind == REPRODUCE_KIND:
        order = info.attrs.get("models")
        present = sorted(
            {g.split("/")[1] for g in info.groups if g.startswith("models/") and g.count("/") >= 1}
        )
        return [m for m in order if m in present] if isinstance(order, list) else present
    return [str(info.attrs.get("name", info.config.get("name", "model")))]


def model_prefix(path, model: str | None = None) -> str:
    """The group prefix of ``model``'s results in ``path`` ('' for a run file)."""
    from spinsa import io

    info = io.read(path)
    names = model_names(path)
    if model is not None and model not in names:
        raise ValueError(f"{path} holds no model {model!r}; it holds: {', '.join(names)}")
    if info.kind == REPRODUCE_KIND:
        return f"models/{model or names[0]}/"
    return ""


def read_tree(path, group: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """All datasets under ``group`` as a nested dict (subgroups become dicts), and its attrs."""
    import h5py

    from spinsa import io
    from spinsa.io.schema import decode_attr

    def load(g) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, obj in g.items():
            if isinstance(obj, h5py.Group):
                out[key] = load(obj)
            elif h5py.check_string_dtype(obj.dtype) is not None:
                out[key] = np.asarray(obj.asstr()[()], dtype=str)
            else:
                out[key] = obj[()]
        return out

    with io.open_file(path) as f:
        if group not in f or not isinstance(f[group], h5py.Group):
            raise KeyError(f"{path} has no group {group!r}")
        return load(f[group]), {k: decode_attr(v) for k, v in f[group].attrs.items()}


def read_evaluation(path, task: str, model: str | None = None):
    """The arrays and attributes of one task's evaluation.

    Returns
    -------
    arrays : dict
        ``times``, ``errors/{all,masked,visible}``, ``mean/...``, ``sem/...``,
        ``mean_image_corr``, ``step_change``, ``final_mean_image``, ``final_coherence``,
        ``examples/{images,times,index,clean}`` (nested dicts).
    attrs : dict
    """
    prefix = model_prefix(path, model)
    group = f"{prefix}evaluation/{task}"
    try:
        return read_tree(path, group)
    except KeyError:
        raise KeyError(
            f"{Path(path)} holds no evaluation of the {task!r} task"
            f"{f' for model {model!r}' if model else ''} (no group {group!r}); run "
            f"spinsa evaluate on it first"
        ) from None


def _at(curve: np.ndarray, t: int) -> float:
    return float(curve[t]) if 0 <= t < curve.shape[0] else math.nan


def _z(a: float, sa: float, b: float, sb: float) -> float:
    """(a - b) in units of the combined standard error (NaN when undefined)."""
    den = math.sqrt(sa * sa + sb * sb) if np.isfinite(sa) and np.isfinite(sb) else math.nan
    return (a - b) / den if den and np.isfinite(den) else math.nan


SIGNIFICANT_Z = 3.0  # a difference counts when it exceeds 3 combined standard errors


def summarize_references(arrays: dict[str, Any], best_error: float, best_sem: float) -> dict:
    """The references of one task's arrays against the model's best error.

    Returns
    -------
    dict
        ``name -> {"error", "sem", "masked_error", "masked_sem", "z"}`` over all pixels
        (masked pixels for ``masked_*``), with z = (reference - best) / combined standard
        error: the model beats a reference when z > :data:`SIGNIFICANT_Z`.
    """
    from spinsa.tasks import mean_sem

    out = {}
    for name, errs in arrays.get("references", {}).items():
        m, e, _ = mean_sem(errs["all"])
        mm, me, _ = mean_sem(errs["masked"])
        out[name] = {
            "error": float(m),
            "sem": float(e),
            "masked_error": float(mm),
            "masked_sem": float(me),
            "z": _z(float(m), float(e), best_error, best_sem),
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
    first = 1 if task == "masked" and T >= 1 else 0
    best = first + int(np.nanargmin(mean[first:])) if np.isfinite(mean[first:]).any() else 0
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
    out["rise_z"] = _z(out["error_T"], out["sem_T"], out["best_error"], out["best_sem"])
    out["gain_z"] = _z(out["error_t0"], out["sem_t0"], out["best_error"], out["best_sem"])
    refs = summarize_references(arrays, out["best_error"], out["best_sem"])
    out["references"] = refs
    out["beats"] = [n for n, r in refs.items() if r["z"] > SIGNIFICANT_Z]
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
