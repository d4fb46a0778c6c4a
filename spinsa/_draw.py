"""Drawing on first use: the axes a result's ``plot`` draws on and the helpers every figure
shares, below every layer that draws.

Results of the model and of the analyses draw themselves (``result.plot(ax=None)``) and the
figures of :mod:`spinsa.plotting` draw files; both use these helpers, so a panel looks the
same whichever way it was made. matplotlib is imported on first use, and figures are drawn on
the Agg canvas without pyplot's global state.
"""

from __future__ import annotations

import numpy as np

__all__ = ["axes", "band", "finish", "gray", "level", "new_figure"]


def _matplotlib():
    try:
        import matplotlib  # noqa: F401  (on first use)
    except ImportError:  # pragma: no cover - matplotlib is a dependency of spinsa
        raise ImportError(
            "drawing needs matplotlib, which is missing: pip install matplotlib "
            '(or reinstall spinsa: pip install "spinsa")'
        ) from None


def new_figure(figsize):
    """A matplotlib Figure attached to an Agg canvas (no pyplot: its global state is left alone)."""
    _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def axes(ax=None, figsize=(5.0, 3.6)):
    """``ax`` itself, or the one axes of a new figure (:func:`new_figure`) when None.

    Parameters
    ----------
    ax : matplotlib.axes.Axes, optional
    figsize : (float, float)
        Size of the new figure.

    Returns
    -------
    matplotlib.axes.Axes
        Its figure is ``ax.figure``.
    """
    if ax is not None:
        if not hasattr(ax, "plot") or not hasattr(ax, "figure"):
            raise ValueError(f"ax must be a matplotlib Axes or None, got {type(ax).__name__}")
        return ax
    return new_figure(figsize).subplots()


def band(ax, t, mean, sem, label, color, *, ls="-", lw=1.6, alpha=0.2) -> None:
    """A mean curve with its standard-error band (a band of 0 where the sem is undefined)."""
    mean, sem = np.asarray(mean, dtype=float), np.nan_to_num(np.asarray(sem, dtype=float))
    ax.plot(t, mean, color=color, lw=lw, ls=ls, label=label)
    ax.fill_between(t, mean - sem, mean + sem, color=color, alpha=alpha, lw=0)


def level(ax, value, sem, label, color, *, ls="--", lw=1.1, alpha=0.15) -> None:
    """A horizontal level with its standard-error band."""
    ax.axhline(value, color=color, ls=ls, lw=lw, label=label)
    ax.axhspan(value - sem, value + sem, color=color, alpha=alpha, lw=0)


def finish(ax, title, xlabel="t (iterations)", ylabel=None, *, legend: int | None = 8) -> None:
    """Title, labels, grid and legend of one panel (no legend when nothing is labelled)."""
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if legend and ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=legend)


def gray(ax, image, title=None) -> None:
    """An image in [0, 1] in grey levels, without ticks."""
    ax.imshow(image, cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    if title is not None:
        ax.set_title(title, fontsize=8)
