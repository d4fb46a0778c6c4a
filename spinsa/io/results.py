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
from spinsa.io.schema import SpinsaFileError

__all__ = [
    "COMPARE_KIND",
    "EVALUATION_LAYOUT",
    "REPRODUCE_KIND",
    "check_evaluations",
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
    return _model_prefix(read(path), model)


def _model_prefix(info: RunFile, model: str | None) -> str:
    path = info.path
    names = _model_names(info)  # the models and the kind come from one table of contents
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
    SpinsaFileError
        The evaluation lacks a dataset of its layout or has one of the wrong shape
        (:func:`check_evaluations`).
    """
    info = read(path)
    group = f"{_model_prefix(info, model)}evaluation/{task}"
    if group not in info.groups:
        raise KeyError(
            f"{Path(path)} holds no evaluation of the {task!r} task"
            f"{f' for model {model!r}' if model else ''} (no group {group!r}); run "
            f"spinsa evaluate on it first"
        )
    _check_evaluation(info, group)
    return read_tree(path, group)


# --------------------------------------------------------------------------- layout
# The shape of every dataset of /evaluation/<task> (docs/files.md), in named dimensions:
# T1 = T + 1 recorded times, T = T1 - 1 steps, P test images, k example times, n example
# images, H x W pixels (the config's image). The first group must be there; the others
# are checked when present (files written before they existed lack some of them).
_PARTS = ("all", "masked", "visible")
EVALUATION_LAYOUT: dict[str, tuple[str, ...]] = {
    "times": ("T1",),
    **{f"errors/{p}": ("T1", "P") for p in _PARTS},
    **{f"{stat}/{p}": ("T1",) for stat in ("mean", "sem") for p in _PARTS},
}
_OPTIONAL_LAYOUT: dict[str, tuple[str, ...]] = {
    "mean_image_corr": ("T1", "P"),
    "mean_image_corr_mean": ("T1",),
    "mean_image_corr_sem": ("T1",),
    "step_change": ("T",),
    "final_mean_image": ("H", "W"),
    "final_coherence": ("P",),
    "final_nearest_corr": ("P",),
    "final_period": ("P",),
    "examples/times": ("k",),
    "examples/index": ("n",),
    "examples/clean": ("n", "H", "W"),
    "examples/images": ("k", "n", "H", "W"),
}


def check_evaluations(path, skip: tuple[str, ...] = ()) -> None:
    """Check the shapes of every evaluation a file holds (``/evaluation/<task>``, or
    ``/models/<name>/evaluation/<task>`` in a reproduction's file) against their layout
    (:data:`EVALUATION_LAYOUT`, docs/files.md), from its table of contents: no array is read.

    Parameters
    ----------
    path : str or PathLike
        A spinsa file.
    skip : tuple of str
        Groups not checked (say, ``"evaluation/masked"``, about to be written again).

    Raises
    ------
    SpinsaFileError
        With reason ``"corrupt"``: a dataset is missing or has the wrong shape. The message
        names it, the shape expected and the command that writes the evaluation again.
    """
    info = read(path)
    for group in info.groups:
        parent = group.rpartition("/")[0]
        if (parent == "evaluation" or parent.endswith("/evaluation")) and group not in skip:
            _check_evaluation(info, group)


def _check_evaluation(info: RunFile, group: str) -> None:
    """Raise :class:`SpinsaFileError` unless the datasets of the evaluation ``group`` of
    ``info`` have the shapes of :data:`EVALUATION_LAYOUT` (see :func:`check_evaluations`)."""
    shapes = {
        name[len(group) + 1 :]: shape
        for name, (shape, _) in info.datasets.items()
        if name.startswith(f"{group}/")
    }
    task = group.rpartition("/")[2]
    fix = f"Write it again with `spinsa evaluate {info.path} --task {task} --overwrite`"
    if group.startswith("models/"):  # a reproduction's: its stages write it
        fix = "Run the reproduction again to write it"
    missing = [name for name in EVALUATION_LAYOUT if name not in shapes]
    if missing:
        raise SpinsaFileError(
            f"{info.path}: the evaluation {group!r} lacks the datasets {', '.join(missing)} "
            f"of the layout that spinsa evaluate writes (docs/files.md): it was written or "
            f"edited outside spinsa. {fix}.",
            "corrupt",
        )
    dims: dict[str, int] = {}
    data = info.config.get("data") if isinstance(info.config, dict) else None
    size = data.get("image_size") if isinstance(data, dict) else None
    if isinstance(size, int):
        dims.update(H=size, W=size)
    layout = {**EVALUATION_LAYOUT, **_OPTIONAL_LAYOUT}
    references = sorted(n for n in shapes if n.startswith("references/"))
    for name in [n for n in layout if n in shapes] + references:
        expected = layout.get(name, ("P",))  # every reference: one error per test image
        shape = shapes[name]
        fits = len(shape) == len(expected)
        for dim, n in zip(expected, shape, strict=False):
            fits = fits and dims.setdefault(dim, n) == n
        if not fits:
            want = ", ".join(f"{d} = {dims[d]}" if d in dims else d for d in expected)
            raise SpinsaFileError(
                f"{info.path}: {group}/{name} has shape {tuple(shape)}, but the layout of an "
                f"evaluation (docs/files.md) wants ({want}){_DIMS}: the file was written or "
                f"edited outside spinsa. {fix}.",
                "corrupt",
            )
        if name == "times":
            dims["T"] = dims["T1"] - 1


_DIMS = " (T + 1 times, P test images, k example times of n images of H x W pixels)"
