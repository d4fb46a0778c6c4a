"""The canvas and the file of every figure: matplotlib without pyplot, saved atomically."""

from __future__ import annotations

from pathlib import Path

from spinsa._files import atomic_path

__all__ = ["new_figure", "save_figure"]


def new_figure(figsize):
    """A matplotlib Figure attached to an Agg canvas (no pyplot: its global state is left alone)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - matplotlib is a core dependency
        raise ImportError(
            'figures need matplotlib, which is not installed: pip install "matplotlib>=3.7"'
        ) from None
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, path, *, dpi: int = 150) -> Path:
    """Save a figure atomically (temporary file, then rename); the format follows the suffix.

    Returns
    -------
    Path
    """
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".") or "png")
    return path
