"""Reading experiment results back from HDF5.

Three kinds of file hold evaluations, with the same layout under a prefix:

* a run file (``kind = "experiment"``, from :func:`spinsa.experiments.train` or
  :func:`~spinsa.experiments.run_experiment`): ``evaluation/<task>/...`` at the root;
* an evaluation file (``kind = "evaluation"``): the same;
* a reproduce file (``kind = "reproduce"``): one group per model, ``models/<name>/...``.

Figures (:mod:`spinsa.plotting`), summaries (:mod:`spinsa.analysis.summary`) and reports
read through these functions; nothing here runs the dynamics again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spinsa.io.hdf5 import RunFile, _read_group, read

__all__ = [
    "COMPARE_KIND",
    "REPRODUCE_KIND",
    "model_names",
    "model_prefix",
    "read_tree",
    "read_evaluation",
]

REPRODUCE_KIND = "reproduce"
COMPARE_KIND = "comparison"


def model_names(path) -> list[str]:
    """The models whose results a file holds (one for a run file), in file order."""
    return _model_names(read(path))


def _model_names(info: RunFile) -> list[str]:
    if info.kind == REPRODUCE_KIND:
        order = info.attrs.get("models")
        present = sorted({g.split("/")[1] for g in info.groups if g.startswith("models/")})
        return [m for m in order if m in present] if isinstance(order, list) else present
    return [str(info.attrs.get("name", info.config.get("name", "model")))]


def model_prefix(path, model: str | None = None) -> str:
    """The group prefix of ``model``'s results in ``path`` ('' for a run file)."""
    info = read(path)  # once: the models and the kind come from the same table of contents
    names = _model_names(info)
    if model is not None and model not in names:
        raise ValueError(f"{path} holds no model {model!r}; it holds: {', '.join(names)}")
    return f"models/{model or names[0]}/" if info.kind == REPRODUCE_KIND else ""


def read_tree(path, group: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """All datasets under ``group`` as a nested dict (subgroups become dicts), and its attrs."""
    return _read_group(Path(path), group, nested=True)


def read_evaluation(path, task: str, model: str | None = None):
    """The arrays and attributes of one task's evaluation.

    Parameters
    ----------
    path : str or PathLike
        A run file (``spinsa evaluate``) or a reproduction's file (``spinsa reproduce``).
    task : {"masked", "denoise"}
        The task whose evaluation to read.
    model : str, optional
        In a reproduction's file, the model (default: its first); None for a run file.

    Returns
    -------
    arrays : dict
        ``times``, ``errors/{all,masked,visible}``, ``mean/...``, ``sem/...``,
        ``mean_image_corr``, ``step_change``, ``final_mean_image``, ``final_coherence``,
        ``final_nearest_corr``, ``final_period`` (in files written since they exist),
        ``examples/{images,times,index,clean}`` (nested dicts).
    attrs : dict
        The evaluation group's attributes.

    Raises
    ------
    KeyError
        The file holds no evaluation of ``task`` (the message says to run ``spinsa evaluate``).
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
