"""Figures of evaluations (a run file or a ``reproduce.h5``) and of ``baselines.h5``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spinsa import io
from spinsa.analysis.summary import best_time
from spinsa.io.results import model_names, read_evaluation, read_tree
from spinsa.plotting._base import band, finish, gray, level, new_figure
from spinsa.references import REFERENCES
from spinsa.tasks import TASK_TITLES, mean_sem

__all__ = [
    "figure_errors",
    "figure_examples",
    "figure_notebook_view",
    "figure_patch_variances",
    "figure_validation_curves",
]

PIXELS = ("all", "masked", "visible")
REFERENCE_STYLES = {  # colour and line style of each reference's level, alike in both tasks
    **dict.fromkeys(("masked_input", "noisy_input"), ("0.55", ":")),
    **dict.fromkeys(("mean_fill", "mean_image"), ("tab:red", "--")),
    **dict.fromkeys(("harmonic", "blur"), ("tab:green", "--")),
    **dict.fromkeys(("nearest", "knn_mean"), ("tab:purple", "-.")),
}


def _task_title(task: str, attrs: dict) -> str:
    title = TASK_TITLES.get(task, task)
    if task == "masked" and "mask_fraction" in attrs:
        title += f" ({float(attrs['mask_fraction']):.0%} of tokens)"
    if task == "denoise" and "noise_variance" in attrs:
        title += f" (noise variance {float(attrs['noise_variance']):g})"
    return title


def _fit_label(path, model: str) -> str:
    """The model's name, tagged "(fit not converged)" when its file records so (the
    attributes of its group in a ``reproduce.h5``, the root's in a run file)."""
    info, group = io.read(path), f"models/{model}"
    attrs = io.read_attrs(path, group) if group in info.groups else info.attrs
    return model + (" (fit not converged)" if attrs.get("fit_converged") is False else "")


def _evaluations(path, model, tasks) -> list[tuple[str, dict, dict]]:
    """``(task, arrays, attrs)`` of the tasks among ``tasks`` that the file holds for ``model``."""
    out = []
    for task in tasks:
        try:
            out.append((task, *read_evaluation(path, task, model)))
        except KeyError:
            continue
    return out


def _reference_levels(arrays: dict, task: str, pixels: str) -> dict[str, tuple[float, float]]:
    """``name -> (mean, sem)`` of the references stored with an evaluation, in their order."""
    stored = arrays.get("references", {})
    out = {}
    for name in [n for n in REFERENCES.get(task, {}) if n in stored]:
        m, e, _ = mean_sem(stored[name][pixels])
        out[name] = (float(m), float(np.nan_to_num(e)))
    return out


def figure_errors(
    path,
    *,
    models: Sequence[str] | None = None,
    tasks: Sequence[str] = ("masked", "denoise"),
    pixels: str = "all",
    figsize: tuple[float, float] | None = None,
    baselines=None,
):
    """Error against t: one panel per model (rows) and task (columns), with the references.

    The model's mean error with its standard-error band (the masked task from t = 1, as in
    the paper), its best t marked, and the simple predictors of :mod:`spinsa.references` on
    the same inputs as levels with their bands: a curve means little until seen beside them.

    Parameters
    ----------
    path : str or PathLike
        A run file or a ``reproduce.h5``.
    models : sequence of str, optional
        Which models (default: all in the file).
    tasks : sequence of {"masked", "denoise"}
        One column per task (tasks the file does not hold are skipped).
    pixels : {"all", "masked", "visible"}
        Which pixels the error is averaged over.
    figsize : (float, float), optional
    baselines : str or PathLike, optional
        A ``baselines.h5``: the recycled block (a curve) and the ViT (a level) in the panels
        of the models whose pixel space is the images' own, as the baselines'.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if pixels not in PIXELS:
        raise ValueError(f"pixels must be one of {', '.join(PIXELS)}; got {pixels!r}")
    names = list(models) if models is not None else model_names(path)
    rows = [(name, _evaluations(path, name, tasks)) for name in names]
    rows = [(name, panels) for name, panels in rows if panels]
    if not rows:
        raise ValueError(f"{path} holds no evaluation of the tasks {list(tasks)}")
    n_cols = max(len(p) for _, p in rows)
    fig = new_figure(figsize or (5.2 * n_cols, 3.6 * len(rows)))
    axes = fig.subplots(len(rows), n_cols, squeeze=False)
    for r, (name, panels) in enumerate(rows):
        label = _fit_label(path, name)
        for ax in axes[r, len(panels) :]:
            ax.set_axis_off()
        for ax, (task, arrays, attrs) in zip(axes[r], panels, strict=False):
            first = 1 if task == "masked" and arrays["times"].size > 1 else 0
            t = arrays["times"][first:]
            mean = np.asarray(arrays["mean"][pixels], dtype=float)[first:]
            band(ax, t, mean, arrays["sem"][pixels][first:], label, "C0", lw=1.8, alpha=0.25)
            if np.isfinite(mean).any():
                b = best_time(mean)
                ax.plot(t[b], mean[b], "o", color="C0", ms=5)
                note = dict(textcoords="offset points", xytext=(4, -12), fontsize=8, color="C0")
                ax.annotate(f"t = {t[b]}: {mean[b]:.4f}", (t[b], mean[b]), **note)
            for ref, (value, sem) in _reference_levels(arrays, task, pixels).items():
                color, ls = REFERENCE_STYLES.get(ref, ("0.3", "--"))
                level(ax, value, sem, f"{REFERENCES[task][ref]} ({value:.4f})", color, ls=ls)
            if baselines is not None and attrs.get("embedding_scale", "paper") == "paper":
                lo, hi = ax.get_ylim()
                best = _draw_baselines(ax, baselines, task, pixels)
                # show every baseline's best, and keep the bare SA readable: a baseline's
                # rise beyond its best is cut off
                ax.set_ylim(
                    min([lo, *(0.85 * b for b in best)]), max([hi, *(1.15 * b for b in best)])
                )
            ylabel = f"mean squared error ({pixels} pixels)"
            finish(ax, f"{label}: {_task_title(task, attrs)}", ylabel=ylabel, legend=7)
    return fig


def _draw_baselines(ax, path, task: str, pixels: str) -> list[float]:
    """The recycled block (a curve over t = 1..T, C5) and the ViT (a level, C6) of a
    baselines file, labelled "(not converged)" unless their file records that they converged
    (docs/convergence.md); returns the best error of each baseline drawn."""
    best = []
    for color, model, label in (("C5", "recycled", "recycled block"), ("C6", "vit", "ViT")):
        try:
            arrays, attrs = read_tree(path, f"models/{model}/{task}")
        except KeyError:
            continue
        if not bool(attrs.get("converged", False)):
            label += " (not converged)"
        t, mean = arrays["times"], np.asarray(arrays["mean"][pixels], dtype=float)
        sem = np.nan_to_num(np.asarray(arrays["sem"][pixels], dtype=float))
        if model == "vit":
            level(ax, float(mean[0]), float(sem[0]), label, color, lw=1.4, alpha=0.2)
            best.append(float(mean[0]))
            continue
        band(ax, t, mean, sem, label, color, alpha=0.25)
        if np.isfinite(mean).any():
            b = best_time(mean)  # an index into times, which start at t = 1
            ax.plot(t[b], mean[b], "s", color=color, ms=5)
            best.append(float(mean[b]))
    return best


def figure_notebook_view(
    path, *, model: str | None = None, figsize: tuple[float, float] | None = None
):
    """The published notebook's own figure of the masked task, over the test images: 1 - MSE
    over all, masked and visible pixels against q = t - 1 (the notebook labels the state after
    step q + 1 "q"), with the masked pixels' 1 - MSE of three references as levels.

    Parameters
    ----------
    path : str or PathLike
        A run file or a ``reproduce.h5``.
    model : str, optional
        Which model (default: the first in the file).
    figsize : (float, float), optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    name = model or model_names(path)[0]
    arrays, _ = read_evaluation(path, "masked", name)
    q = arrays["times"][1:] - 1
    fig = new_figure(figsize or (6.4, 4.2))
    ax = fig.subplots()
    for k, part in enumerate(PIXELS):
        label = {"all": "total", "visible": "not masked"}.get(part, part)
        mean = 1.0 - np.asarray(arrays["mean"][part], dtype=float)[1:]
        band(ax, q, mean, arrays["sem"][part][1:], label, f"C{k}", alpha=0.25)
    styles = {"masked_input": ":", "mean_fill": "--", "harmonic": "-."}
    for ref, (value, _) in _reference_levels(arrays, "masked", "masked").items():
        if ref in styles:  # in the colour of the masked curve they compare with
            label = f"masked: {REFERENCES['masked'][ref]} ({1.0 - value:.3f})"
            ax.axhline(1.0 - value, color="C1", ls=styles[ref], lw=1.1, label=label)
    finish(
        ax,
        f"{name}: the notebook's view of the masked task",
        "q (the state after step q + 1)",
        "overlap 1 - MSE (notebook's pixel space)",
    )
    return fig


def figure_patch_variances(path, *, log: bool = True, figsize: tuple[float, float] | None = None):
    """Distributions of the pixel variance inside masked patches (the paper's Fig. 2): a
    histogram per model (bare SA, recycled block, ViT) and for the clean images.

    Parameters
    ----------
    path : str or PathLike
        A ``baselines.h5``.
    log : bool
        Logarithmic density axis.
    figsize : (float, float), optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    try:
        arrays, attrs = read_tree(path, "patch_variances")
    except KeyError:
        raise ValueError(f"{path} holds no patch_variances group") from None
    fig = new_figure(figsize or (6.0, 4.0))
    ax = fig.subplots()
    edges, density = (np.asarray(arrays[k], dtype=float) for k in ("bin_edges", "density"))
    for k, model in enumerate(str(m) for m in attrs["models"]):
        patch = attrs.get("patch", {}).get(model)
        label = f"{model} (median {float(arrays['median'][k]):.4f}"
        label += f", {patch}x{patch} patches)" if patch else ")"
        style = dict(color="0.4", ls=":") if model == "clean" else dict(color=f"C{k}", ls="-")
        ax.stairs(density[k], edges, lw=1.5, label=label, **style)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel("density")
    title = f"predicted masked patches (first {attrs.get('n_images', '?')} test images)"
    finish(ax, title, "variance of the pixels of a masked patch")
    return fig


def figure_validation_curves(path, *, figsize: tuple[float, float] | None = None):
    """The validation curve of every trained baseline of a ``baselines.h5``: one panel per
    task, the loss after each epoch on a log scale, the kept (lowest) epoch marked, and the
    label saying whether the stopping rule held (docs/convergence.md).

    Parameters
    ----------
    path : str or PathLike
        A ``baselines.h5``.
    figsize : (float, float), optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    groups = [g for g in io.read(path).groups if g.count("/") == 2 and g.startswith("models/")]
    if not groups:
        raise ValueError(f"{path} holds no trained baseline (models/<model>/<task>)")
    tasks = [t for t in TASK_TITLES if any(g.endswith(f"/{t}") for g in groups)]
    fig = new_figure(figsize or (5.6 * len(tasks), 3.8))
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    for ax, task in zip(axes, tasks, strict=True):
        for k, group in enumerate(g for g in groups if g.endswith(f"/{task}")):
            arrays, attrs = read_tree(path, f"{group}/history")[0], io.read_attrs(path, group)
            val = np.asarray(arrays["val_loss"], dtype=float)
            if not val.size:
                continue
            epochs = np.arange(1, val.size + 1)
            state = "converged" if attrs.get("converged") else "not converged"
            label = f"{group.split('/')[1]} ({state}, {val.size} epochs)"
            ax.plot(epochs, val, color=f"C{k}", lw=1.3, label=label)
            best = int(np.nanargmin(val))
            ax.plot(epochs[best], val[best], "o", color=f"C{k}", ms=4)
        ax.set_yscale("log")
        finish(ax, TASK_TITLES[task], "epoch", "validation loss (MSE)", legend=7)
    return fig


def figure_examples(
    path,
    *,
    model: str | None = None,
    tasks: Sequence[str] = ("masked", "denoise"),
    n_examples: int = 4,
    figsize: tuple[float, float] | None = None,
):
    """Decoded test images: for each task, a row per example kept in the file (the first
    ``n_examples``): the clean image, then the state at each kept time (t = 0: the input).

    Parameters
    ----------
    path : str or PathLike
        A run file or a ``reproduce.h5``.
    model : str, optional
        Which model (default: the first in the file).
    tasks : sequence of {"masked", "denoise"}
    n_examples : int
        Rows per task (at most the number kept).
    figsize : (float, float), optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    name = model or model_names(path)[0]
    examples = [(task, arrays["examples"]) for task, arrays, _ in _evaluations(path, name, tasks)]
    blocks = [(task, ex, min(int(n_examples), ex["images"].shape[1])) for task, ex in examples]
    blocks = [(task, ex, n) for task, ex, n in blocks if n > 0]
    if not blocks:
        raise ValueError(f"{path} holds no example images for model {name!r}")
    n_cols = 1 + max(ex["times"].size for _, ex, _ in blocks)
    n_rows = sum(n for _, _, n in blocks)
    fig = new_figure(figsize or (1.15 * n_cols + 0.6, 1.15 * n_rows + 0.5))
    axes = iter(fig.subplots(n_rows, n_cols, squeeze=False))
    for task, ex, n in blocks:
        for r in range(n):
            row = next(axes)
            panels = [("clean", ex["clean"][r])]
            panels += [(f"t = {t}", ex["images"][k, r]) for k, t in enumerate(ex["times"])]
            for ax, (title, image) in zip(row, panels, strict=False):
                gray(ax, image, title if r == 0 else None)
            for ax in row[len(panels) :]:
                ax.set_axis_off()
            if r == 0:
                row[0].set_ylabel(TASK_TITLES.get(task, task), fontsize=8)
    fig.suptitle(f"{name}: decoded states", fontsize=10)
    return fig
