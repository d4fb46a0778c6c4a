"""Figures of evaluations: they read the files written by the experiments, never recompute.

::

    from spinsa import plotting
    fig = plotting.figure_errors("out/reproduce.h5")          # the paper's Fig. 1 curves
    plotting.save_figure(fig, "out/fig1_errors.png")
    fig = plotting.figure_examples("out/reproduce.h5", model="design")

The functions accept a run file (``spinsa train`` + ``spinsa evaluate``, or
:func:`spinsa.experiments.run_experiment`) or a ``reproduce.h5`` holding several models.
matplotlib is imported on first use, and figures are drawn on the Agg canvas without
touching pyplot's global state (so they work on machines without a display and do not
change an interactive session's backend).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spinsa.plotting._base import new_figure

__all__ = [
    "figure_errors",
    "figure_examples",
    "figure_notebook_view",
    "figure_patch_variances",
]

TASK_TITLES = {"masked": "masked prediction", "denoise": "denoising"}
PIXELS = ("all", "masked", "visible")


def _task_title(task: str, attrs: dict) -> str:
    title = TASK_TITLES.get(task, task)
    if task == "masked" and "mask_fraction" in attrs:
        title += f" ({float(attrs['mask_fraction']):.0%} of tokens)"
    if task == "denoise" and "noise_variance" in attrs:
        title += f" (noise variance {float(attrs['noise_variance']):g})"
    return title


REFERENCE_STYLES = {  # colour and line style of each reference's horizontal line
    "masked_input": ("0.55", ":"),
    "noisy_input": ("0.55", ":"),
    "mean_fill": ("tab:red", "--"),
    "mean_image": ("tab:red", "--"),
    "harmonic": ("tab:green", "--"),
    "blur": ("tab:green", "--"),
    "nearest": ("tab:purple", "-."),
    "knn_mean": ("tab:purple", "-."),
}


def _reference_levels(arrays: dict, task: str, pixels: str) -> dict[str, tuple[float, float]]:
    """``name -> (mean, sem)`` of the references stored with an evaluation, in their order."""
    from spinsa.references import REFERENCES
    from spinsa.tasks import mean_sem

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

    Each panel holds the model's mean error with its standard-error band (the masked task
    from t = 1, as in the paper; its t = 0 is the masked input, one of the references), the
    best t marked, and the simple predictors of :mod:`spinsa.references` computed on the same
    inputs as horizontal lines with their bands: a curve means little until it is seen
    beside them. Models measured in different pixel spaces get panels of their own.

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
        A ``baselines.h5`` (``spinsa reproduce``): the recycled block as a curve over t = 1..T
        and the ViT as a level, with standard-error bands, in the panels of the models whose
        pixel space is the images' own (the baselines are trained on pixels in [0, 1]).

    Returns
    -------
    matplotlib.figure.Figure
    """
    from spinsa.io.results import model_names, read_evaluation
    from spinsa.references import REFERENCES

    if pixels not in PIXELS:
        raise ValueError(f"pixels must be one of {', '.join(PIXELS)}; got {pixels!r}")
    names = list(models) if models is not None else model_names(path)
    rows = []
    for name in names:
        panels = []
        for task in tasks:
            try:
                arrays, attrs = read_evaluation(path, task, name)
            except KeyError:
                continue
            panels.append((task, arrays, attrs))
        if panels:
            rows.append((name, panels))
    if not rows:
        raise ValueError(f"{path} holds no evaluation of the tasks {list(tasks)}")
    n_cols = max(len(p) for _, p in rows)
    fig = new_figure(figsize or (5.2 * n_cols, 3.6 * len(rows)))
    axes = fig.subplots(len(rows), n_cols, squeeze=False)
    for r, (name, panels) in enumerate(rows):
        for c in range(n_cols):
            ax = axes[r, c]
            if c >= len(panels):
                ax.set_axis_off()
                continue
            task, arrays, attrs = panels[c]
            t = np.asarray(arrays["times"])
            mean = np.asarray(arrays["mean"][pixels], dtype=float)
            sem = np.nan_to_num(np.asarray(arrays["sem"][pixels], dtype=float))
            first = 1 if task == "masked" and t.size > 1 else 0
            ts, ms, ss = t[first:], mean[first:], sem[first:]
            ax.plot(ts, ms, color="C0", lw=1.8, label=f"{name}")
            ax.fill_between(ts, ms - ss, ms + ss, color="C0", alpha=0.25, lw=0)
            if np.isfinite(ms).any():
                b = int(np.nanargmin(ms))
                ax.plot(ts[b], ms[b], "o", color="C0", ms=5)
                ax.annotate(
                    f"t = {ts[b]}: {ms[b]:.4f}",
                    (ts[b], ms[b]),
                    textcoords="offset points",
                    xytext=(4, -12),
                    fontsize=8,
                    color="C0",
                )
            for ref, (level, band) in _reference_levels(arrays, task, pixels).items():
                color, ls = REFERENCE_STYLES.get(ref, ("0.3", "--"))
                label = REFERENCES.get(task, {}).get(ref, ref)
                ax.axhline(level, color=color, ls=ls, lw=1.1, label=f"{label} ({level:.4f})")
                ax.axhspan(level - band, level + band, color=color, alpha=0.15, lw=0)
            scale = attrs.get("embedding_scale", "paper")
            if baselines is not None and scale == "paper":
                lo, hi = ax.get_ylim()
                best = _draw_baselines(ax, baselines, task, pixels, 5)  # C5, C6: free colours
                # keep the bare SA readable: a baseline's rise beyond its best is cut off
                ax.set_ylim(lo, max([hi, *(1.15 * b for b in best)]))
            ax.set_title(f"{name}: {_task_title(task, attrs)}", fontsize=10)
            ax.set_xlabel("t (iterations)")
            ax.set_ylabel(f"mean squared error ({pixels} pixels)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    return fig


def figure_notebook_view(
    path, *, model: str | None = None, figsize: tuple[float, float] | None = None
):
    """The published notebook's own figure of the masked task, over the test images.

    The notebook plots, for one image, the "overlap" 1 - MSE in its pixel space min(2p, 1)
    over all, masked and visible ("not masked") pixels against q, the state after step q + 1
    being labelled q. Here the same three curves are means over the test images with their
    standard-error bands, against q = t - 1, with the masked pixels' 1 - MSE of the masked
    input (the hole left black), of the mean training image in the hole and of harmonic
    inpainting as levels.

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
    from spinsa.io.results import model_names, read_evaluation
    from spinsa.references import REFERENCES

    name = model or model_names(path)[0]
    arrays, attrs = read_evaluation(path, "masked", name)
    t = np.asarray(arrays["times"])
    q = t[1:] - 1
    fig = new_figure(figsize or (6.4, 4.2))
    ax = fig.subplots()
    for k, (part, label) in enumerate(
        (("all", "total"), ("masked", "masked"), ("visible", "not masked"))
    ):
        m = 1.0 - np.asarray(arrays["mean"][part], dtype=float)[1:]
        e = np.nan_to_num(np.asarray(arrays["sem"][part], dtype=float))[1:]
        ax.plot(q, m, color=f"C{k}", lw=1.6, label=label)
        ax.fill_between(q, m - e, m + e, color=f"C{k}", alpha=0.25, lw=0)
    styles = {"masked_input": ":", "mean_fill": "--", "harmonic": "-."}
    for ref, (level, _) in _reference_levels(arrays, "masked", "masked").items():
        if ref in styles:  # in the colour of the masked curve they compare with
            ax.axhline(
                1.0 - level,
                color="C1",
                ls=styles[ref],
                lw=1.1,
                label=f"masked: {REFERENCES['masked'][ref]} ({1.0 - level:.3f})",
            )
    ax.set_xlabel("q (the state after step q + 1)")
    ax.set_ylabel("overlap 1 - MSE (notebook's pixel space)")
    ax.set_title(f"{name}: the notebook's view of the masked task", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _draw_baselines(ax, path, task: str, pixels: str, k0: int) -> list[float]:
    """The recycled block (a curve over t = 1..T) and the ViT (a level) of a baselines file.

    Returns the best error of each baseline drawn.
    """
    from spinsa.io.results import read_tree

    colors = [f"C{i}" for i in range(10)]
    best = []
    for k, (model, label) in enumerate((("recycled", "recycled block"), ("vit", "ViT"))):
        try:
            arrays, _ = read_tree(path, f"models/{model}/{task}")
        except KeyError:
            continue
        color = colors[(k0 + k) % len(colors)]
        t = np.asarray(arrays["times"])
        mean = np.asarray(arrays["mean"][pixels], dtype=float)
        sem = np.nan_to_num(np.asarray(arrays["sem"][pixels], dtype=float))
        if model == "vit":
            m, s = float(mean[0]), float(sem[0])
            ax.axhline(m, color=color, lw=1.4, ls="--", label=label)
            ax.axhspan(m - s, m + s, color=color, alpha=0.2, lw=0)
            best.append(m)
            continue
        ax.plot(t, mean, color=color, lw=1.6, label=label)
        ax.fill_between(t, mean - sem, mean + sem, color=color, alpha=0.25, lw=0)
        if np.isfinite(mean).any():
            b = int(np.nanargmin(mean))
            ax.plot(t[b], mean[b], "s", color=color, ms=5)
            best.append(float(mean[b]))
    return best


def figure_patch_variances(path, *, log: bool = True, figsize: tuple[float, float] | None = None):
    """Distributions of the pixel variance inside masked patches (the paper's Fig. 2).

    One step histogram per model (bare-SA models, recycled block, ViT, and the clean images
    at the same patches for reference), from the ``patch_variances`` group of a
    ``baselines.h5`` written by ``spinsa reproduce``.

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
    from spinsa.io.results import read_tree

    try:
        arrays, attrs = read_tree(path, "patch_variances")
    except KeyError:
        raise ValueError(f"{path} holds no patch_variances group") from None
    models = [str(m) for m in attrs["models"]]
    edges = np.asarray(arrays["bin_edges"], dtype=float)
    density = np.asarray(arrays["density"], dtype=float)
    fig = new_figure(figsize or (6.0, 4.0))
    ax = fig.subplots()
    for k, model in enumerate(models):
        patch = attrs.get("patch", {}).get(model)
        label = f"{model} (median {float(arrays['median'][k]):.4f}"
        label += f", {patch}x{patch} patches)" if patch else ")"
        ax.stairs(
            density[k],
            edges,
            color="0.4" if model == "clean" else f"C{k}",
            ls=":" if model == "clean" else "-",
            lw=1.5,
            label=label,
        )
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("variance of the pixels of a masked patch")
    ax.set_ylabel("density")
    ax.set_title(
        f"predicted masked patches (first {attrs.get('n_images', '?')} test images)", fontsize=10
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def figure_examples(
    path,
    *,
    model: str | None = None,
    tasks: Sequence[str] = ("masked", "denoise"),
    n_examples: int = 4,
    figsize: tuple[float, float] | None = None,
):
    """A grid of decoded test images: one row per example, one column per kept time.

    For each task, the first ``n_examples`` examples kept in the file: the clean image, then
    the decoded state at each kept time (t = 0 is the corrupted input).

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
    from spinsa.io.results import model_names, read_evaluation

    name = model or model_names(path)[0]
    blocks = []
    for task in tasks:
        try:
            arrays, _ = read_evaluation(path, task, name)
        except KeyError:
            continue
        ex = arrays["examples"]
        n = min(int(n_examples), ex["images"].shape[1])
        if n > 0:
            blocks.append((task, ex, n))
    if not blocks:
        raise ValueError(f"{path} holds no example images for model {name!r}")
    n_cols = 1 + max(b[1]["times"].size for b in blocks)
    n_rows = sum(b[2] for b in blocks)
    fig = new_figure(figsize or (1.15 * n_cols + 0.6, 1.15 * n_rows + 0.5))
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    row = 0
    for task, ex, n in blocks:
        times = np.asarray(ex["times"])
        for r in range(n):
            panels = [("clean", ex["clean"][r])] + [
                (f"t = {t}", ex["images"][k, r]) for k, t in enumerate(times)
            ]
            for c in range(n_cols):
                ax = axes[row, c]
                ax.set_xticks([])
                ax.set_yticks([])
                if c < len(panels):
                    title, img = panels[c]
                    ax.imshow(img, cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
                    if r == 0:
                        ax.set_title(title, fontsize=8)
                else:
                    ax.set_axis_off()
            if r == 0:
                axes[row, 0].set_ylabel(TASK_TITLES.get(task, task), fontsize=8)
            row += 1
    fig.suptitle(f"{name}: decoded states", fontsize=10)
    return fig
