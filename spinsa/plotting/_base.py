"""What every figure shares: an Agg canvas without pyplot, the atomic save, the panel set-up."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spinsa._files import atomic_path

__all__ = ["new_figure", "save_figure"]


def new_figure(figsize):
    """A matplotlib Figure attached to an Agg canvas (no pyplot: its global state is left alone)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # on first use
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, path, *, dpi: int = 150) -> Path:
    """Save a figure atomically (temporary file, then rename), in the format of the suffix;
    returns ``path`` as a Path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".") or "png")
    return path


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
    """Title, labels, grid and legend of one panel."""
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=legend)


def gray(ax, image, title=None) -> None:
    """An image in [0, 1] in grey levels, without ticks."""
    ax.imshow(image, cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    if title is not None:
        ax.set_title(title, fontsize=8)
