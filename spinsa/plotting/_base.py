"""What every figure shares: an Agg canvas without pyplot (:mod:`spinsa._draw`), the atomic
save, the panel set-up."""

from __future__ import annotations

from pathlib import Path

# the panel helpers live in spinsa._draw, where results draw themselves too
from spinsa._draw import band, finish, gray, level, new_figure  # noqa: F401
from spinsa._files import atomic_path

__all__ = ["new_figure", "save_figure"]


def save_figure(fig, path, *, dpi: int = 150) -> Path:
    """Save a figure atomically (temporary file, then rename), in the format of the suffix;
    returns ``path`` as a Path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".") or "png")
    return path
